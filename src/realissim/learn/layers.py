"""Layers shared by the policy's networks."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Mish(nn.Module):
    """Mish, x · tanh(softplus(x)), elementwise, any shape: the same function as `torch.nn.Mish` (relative error
    ≤ 3e-7 over [−100, 100] in float32, tested), computed as x · p · (1 + q) / (1 + q²) with p = sigmoid(x),
    q = 1 − p — an identity of tanh(log(1 + eˣ)) that stays exact where x is far negative (x · p). ATen's
    sigmoid is the one fast transcendental kernel on this CPU: at (20, 64, 16) activations this takes ~65 % of
    the time of ATen's Mish kernel and ~50 % of tanh(softplus(x)) (docs/decisions.md, "Offline evaluation: the
    network"). No parameters: checkpoints written with `torch.nn.Mish` load unchanged."""

    def forward(self, x: Tensor) -> Tensor:
        p = torch.sigmoid(x)
        q = 1.0 - p
        return x * p * (1.0 + q) / (1.0 + q * q)
