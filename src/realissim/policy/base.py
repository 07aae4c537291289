"""The policy seam: what a policy sees (`Observation`), what it returns (`ActionChunk`), and `Policy`.

One written interface between environments and methods (docs/design.md §7): every environment (online or
offline, single or batched) produces `Observation`s and executes `ActionChunk`s; every policy (scripted,
expert, learned, teleoperation) consumes and produces them. In a batch, every array gains a leading axis B.

A chunk is the paper's trajectory: m waypoints of desired joints q′ with a self-reported task progress,
evenly spread over a horizon H s — waypoint i is due at (i + 1)·H/m after the chunk starts. The environment
follows it by linear interpolation from the joints it was commanding when the chunk arrived, one target per
frame, and asks for the next chunk when it is used up (or at its re-plan period).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Observation:
    """What a policy sees at time `time`: the twin's state, and images on request. Never ground truth.

    Shapes for one environment (a batch adds a leading axis B to every array): joints in the robot's order
    (J), objects in the scene's order (K), world frame, SI units, quaternions [w, x, y, z].
    """

    time: np.ndarray
    """() or (B,) s since the episode's start."""
    q: np.ndarray
    """(J,) the twin arm's joint positions, rad."""
    qd: np.ndarray
    """(J,) its joint velocities, rad/s."""
    q_des: np.ndarray
    """(J,) the desired joints q′ it is holding to, rad."""
    object_pos: np.ndarray
    """(K, 3) the twin's object positions, m."""
    object_quat: np.ndarray
    """(K, 4) the twin's object orientations."""
    images: dict[str, np.ndarray] = field(default_factory=dict)
    """Virtual cameras rendered from the twin, by name (the scene's cameras, "wrist"): (H, W, 3) uint8 RGB."""
    real_images: dict[str, np.ndarray] = field(default_factory=dict)
    """Online, when asked for: the real cameras' latest frames by name, (H, W, 3) uint8 RGB."""

    @property
    def batch_size(self) -> int | None:
        """B for a batched observation, None for a single one."""
        return None if np.ndim(self.time) == 0 else int(np.shape(self.time)[0])

    def select(self, i: int) -> Observation:
        """Environment i of a batched observation, as a single one."""
        if self.batch_size is None:
            raise ValueError("select: this observation is not batched")
        return Observation(
            time=self.time[i],
            q=self.q[i],
            qd=self.qd[i],
            q_des=self.q_des[i],
            object_pos=self.object_pos[i],
            object_quat=self.object_quat[i],
            images={k: v[i] for k, v in self.images.items()},
            real_images={k: v[i] for k, v in self.real_images.items()},
        )


@dataclass(frozen=True)
class ActionChunk:
    """m waypoints of desired joints `q_des` (m, J) rad with `progress` (m,) in [0, 1], due at (i + 1)·H/m s
    for i = 0 … m − 1 over the horizon `horizon` H s (a batch: (B, m, J) and (B, m))."""

    q_des: np.ndarray
    progress: np.ndarray
    horizon: float = 1.0

    def __post_init__(self) -> None:
        q, p = np.asarray(self.q_des, dtype=np.float64), np.asarray(self.progress, dtype=np.float64)
        if q.ndim not in (2, 3) or p.shape != q.shape[:-1] or q.shape[-2] < 1:
            raise ValueError(f"ActionChunk: q_des must be (m, J) or (B, m, J) with progress (m,) or (B, m); "
                             f"got {q.shape} and {p.shape}")  # fmt: skip
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(p))):
            raise ValueError("ActionChunk: q_des and progress must be finite")
        if not (self.horizon > 0 and np.isfinite(self.horizon)):
            raise ValueError(f"ActionChunk: horizon must be a positive number of seconds, got {self.horizon}")
        object.__setattr__(self, "q_des", q)
        object.__setattr__(self, "progress", p)

    @property
    def waypoints(self) -> int:
        """m."""
        return int(self.q_des.shape[-2])

    def targets(
        self, q_start: np.ndarray, dt: float, frames: int, offset: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-frame joint targets (frames, [B,] J) and progress (frames, [B]) at t = offset + dt, offset + 2·dt, …
        after the chunk starts: linear between `q_start` ([B,] J, the joints commanded at t = offset: when the chunk
        arrived) and the waypoints still ahead; held at the last waypoint beyond the horizon. `offset` s of the
        chunk have passed before it arrived (a policy asked beside a real-time loop answers late: its chunk starts
        at the observation it was asked with); the waypoints due by then are skipped. Elementwise, so a batch's
        rows equal the single-environment values bit for bit."""
        q = np.moveaxis(self.q_des, -2, 0)  # (m, [B,] J)
        p = np.moveaxis(self.progress, -1, 0)  # (m, [B])
        q0 = np.asarray(q_start, dtype=np.float64)
        if q0.shape != q.shape[1:]:
            raise ValueError(f"targets: q_start must have shape {q.shape[1:]}, got {q0.shape}")
        if not (offset >= 0 and np.isfinite(offset)):
            raise ValueError(f"targets: offset must be a finite number of seconds ≥ 0, got {offset}")
        if offset > 0:
            return self._targets_after(q0, q, p, dt, frames, offset)
        # Knots: the start, the waypoints, and the last one again (so t ≥ H lands exactly on it).
        knots_q = np.concatenate([q0[None], q, q[-1:]])
        knots_p = np.concatenate([p[:1], p, p[-1:]])  # before the first waypoint, its progress
        step = self.horizon / self.waypoints
        s = np.minimum(np.arange(1, frames + 1) * dt / step, float(self.waypoints))  # position in waypoint units
        i = np.floor(s).astype(int)
        w = (s - i).reshape((-1,) + (1,) * (knots_q.ndim - 1))
        out_q = knots_q[i] + (knots_q[i + 1] - knots_q[i]) * w
        wp = w.reshape((-1,) + (1,) * (knots_p.ndim - 1))
        out_p = knots_p[i] + (knots_p[i + 1] - knots_p[i]) * wp
        return out_q, out_p

    def _targets_after(
        self, q0: np.ndarray, q: np.ndarray, p: np.ndarray, dt: float, frames: int, offset: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """`targets` for offset > 0: knots at `q0` (position offset/step, in waypoint units) and at the waypoints
        due after it (position i + 1 for waypoint i), the last one again one unit on."""
        m = self.waypoints
        step = self.horizon / m
        s0 = min(offset / step, float(m))
        ahead = np.arange(m) + 1.0 > s0  # waypoints not yet due
        if not ahead.any():  # answered after its horizon: the chunk's end, held
            return np.repeat(q[-1:], frames, axis=0), np.repeat(p[-1:], frames, axis=0)
        knots_s = np.concatenate([[s0], np.arange(1.0, m + 1)[ahead], [m + 1.0]])
        knots_q = np.concatenate([q0[None], q[ahead], q[-1:]])
        whole = np.concatenate([p[:1], p, p[-1:]])  # `targets`'s progress knots, at 0 … m + 1
        i0 = int(np.floor(s0))
        knots_p = np.concatenate([(whole[i0] + (whole[i0 + 1] - whole[i0]) * (s0 - i0))[None], p[ahead], p[-1:]])
        s = np.minimum(s0 + np.arange(1, frames + 1) * dt / step, float(m))
        i = np.clip(np.searchsorted(knots_s, s, side="right") - 1, 0, len(knots_s) - 2)
        w = (s - knots_s[i]) / (knots_s[i + 1] - knots_s[i])
        wq = w.reshape((-1,) + (1,) * (knots_q.ndim - 1))
        wp = w.reshape((-1,) + (1,) * (knots_p.ndim - 1))
        return knots_q[i] + (knots_q[i + 1] - knots_q[i]) * wq, knots_p[i] + (knots_p[i + 1] - knots_p[i]) * wp


@runtime_checkable
class Policy(Protocol):
    """A policy: `reset()` before each episode, then `act(observation)` whenever the environment needs a new
    chunk. A policy for a batched environment takes batched observations and returns batched chunks."""

    def reset(self) -> None:
        """Forget the last episode."""
        ...

    def act(self, observation: Observation) -> ActionChunk:
        """The next chunk of desired joints for `observation`."""
        ...


@runtime_checkable
class PlansInPhysics(Protocol):
    """A policy that plans in its own copy of the scene's physics (a model-based expert): whoever changes the
    objects' dynamics in the twin (domain randomisation) changes them in these models too."""

    def planning_models(self) -> tuple[Any, ...]:
        """The `mujoco.MjModel`s the policy plans in; each holds the scene's objects under their scene names."""
        ...


class PerEnvPolicies:
    """A batched policy made of one policy per environment (each sees its own row of the observation)."""

    def __init__(self, policies: Sequence[Policy]) -> None:
        if not policies:
            raise ValueError("PerEnvPolicies: need at least one policy")
        self.policies = list(policies)

    def reset(self) -> None:
        for policy in self.policies:
            policy.reset()

    def act(self, observation: Observation) -> ActionChunk:
        if observation.batch_size != len(self.policies):
            raise ValueError(
                f"PerEnvPolicies: {len(self.policies)} policies, observation batch {observation.batch_size}"
            )
        chunks = [policy.act(observation.select(i)) for i, policy in enumerate(self.policies)]
        horizons = {c.horizon for c in chunks}
        if len(horizons) != 1 or len({c.waypoints for c in chunks}) != 1:
            raise ValueError("PerEnvPolicies: every policy must return chunks of one horizon and waypoint count")
        return ActionChunk(np.stack([c.q_des for c in chunks]), np.stack([c.progress for c in chunks]), horizons.pop())
