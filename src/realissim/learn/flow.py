"""Conditional flow matching (rectified flow) over action chunks, independent of the network.

Conventions (LeRobot's π0): flow time t ∈ [0, 1], t = 1 is noise. A training pair interpolates
x_t = t·ε + (1 − t)·a between a data chunk a and noise ε ~ N(0, I); the network v(x_t, t | c) regresses the
constant velocity u = ε − a with a mean squared error. Sampling integrates dx/dt = v from t = 1 (noise) to
t = 0 with K Euler steps.

Shapes: chunks (B, m, A) (m waypoints, A values each, normalised), conditions (B, C), times (B,).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from realissim.learn.config import FlowConfig

VelocityField = Callable[[Tensor, Tensor, Tensor], Tensor]
"""v(x (B, m, A), t (B,), cond (B, C)) → (B, m, A)."""


def sample_time(n: int, config: FlowConfig, generator: torch.Generator | None = None) -> Tensor:
    """(n,) training times in [t_min, 1]. Beta(α, 1) by its inverse CDF u^(1/α): exact and seedable."""
    u = torch.rand(n, generator=generator)
    s = u if config.time_sampling == "uniform" else u.pow(1.0 / config.beta_alpha)
    return config.t_min + (1.0 - config.t_min) * s


def flow_loss(
    velocity: VelocityField,
    actions: Tensor,
    cond: Tensor,
    config: FlowConfig,
    generator: torch.Generator | None = None,
    weight: Tensor | None = None,
) -> Tensor:
    """Mean squared error of v(x_t, t | cond) against u = ε − a for chunks `actions` (B, m, A); scalar. With
    `weight` (broadcastable to (B, m, A), ≥ 0), the weighted mean: an element of weight 0 carries no loss."""
    t = sample_time(actions.shape[0], config, generator).to(actions.dtype)
    noise = torch.randn(actions.shape, generator=generator, dtype=actions.dtype)
    tt = t[:, None, None]
    x_t = tt * noise + (1.0 - tt) * actions
    error = (velocity(x_t, t, cond) - (noise - actions)) ** 2
    if weight is None:
        return torch.mean(error)
    weight = weight.expand_as(error)
    return torch.sum(error * weight) / torch.clamp(torch.sum(weight), min=1e-12)


def euler_times(steps: int) -> Tensor:
    """The flow times (steps,) float64 at which `steps` Euler steps from t = 1 to t = 0 evaluate the velocity: 1 − k·dt
    for k = 0 … K − 1, dt = 1/K."""
    dt = 1.0 / steps
    return torch.tensor([1.0 - k * dt for k in range(steps)], dtype=torch.float64)


def euler_sample(velocity: VelocityField, noise: Tensor, cond: Tensor, steps: int) -> Tensor:
    """Chunks (B, m, A): `noise` (B, m, A) at t = 1 carried to t = 0 by `steps` Euler steps of −v(x, t | cond) dt."""
    x, dt = noise, 1.0 / steps
    for t in euler_times(steps).to(x.dtype):  # (1 − k·dt in double, then rounded, as the steps always were)
        x = x - dt * velocity(x, t.expand(x.shape[0]), cond)
    return x
