"""Disturbed demonstrations: while the expert demonstrates, the collector now and then moves the object to a
nearby pose, and the expert recovers from there.

Why: a clone drifts into states its demonstrations never visited and then has nothing to imitate (measured on
60 planar demonstrations: near any T pose of a failed rollout, the demonstrations held at most one episode within
3 cm and 0.3 rad, often none; docs/decisions.md, "Flow policy"). Moving the object while the expert works is a
cheap way to show the expert's answer from more states per demonstration — the idea of DART (Laskey et al.,
2017), perturbing the state rather than the expert's actions, so every recorded action is still the expert's.

A disturbance happens only between two chunks (when the expert is asked for the next one), with the object at
rest and clear of the rod, and only to a pose that is in the task's workspace, reachable all round, clear of the
robot and not already a success; the expert is then told to decide again (`replan`). The simulated times of the
disturbances are stored with the episode (`extra[DISTURBANCES_KEY]`, `data.schema`), and training drops the
frames whose target chunk would reach past one (their targets would show the expert reacting to a move it could
not foresee; `policy.dataset.disturbance_mask`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from realissim.estimate.placement import place_object
from realissim.geometry import planar_rotation, quat_yaw, yaw_quat
from realissim.policy.base import ActionChunk, Observation, Policy
from realissim.tasks.pusht import T_BLOCK, PushTTask, wrap_angle

if TYPE_CHECKING:
    from realissim.envs import Env

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DisturbConfig:
    """How often and how far the collector moves the object during a demonstration."""

    every: float = 0.0
    """Mean simulated time between disturbances, s (exponentially distributed); 0: none."""
    xy: float = 0.10
    """Standard deviation of the object's planar shift, m (per axis): far enough that the demonstrations show the
    tip travelling back to a T it is no longer beside (docs/decisions.md, "Demonstrations")."""
    yaw: float = 1.0
    """Standard deviation of its yaw change, rad (docs/decisions.md, "Demonstrations")."""
    max_count: int = 3
    """Disturbances per episode at most."""
    not_before: float = 1.0
    """No disturbance in the episode's first seconds, s."""
    rest_speed: float = 0.01
    """The object counts as at rest below this speed, m/s (and `rest_spin`)."""
    rest_spin: float = 0.2
    """... and below this angular speed, rad/s."""
    clearance: float = 0.01
    """Least planar gap between the rod and the object, before and after the move, m."""
    tries: int = 30
    """Random poses tried for one disturbance before giving up until the next chunk."""

    def __post_init__(self) -> None:
        if not (self.every >= 0 and math.isfinite(self.every)):
            raise ValueError(f"disturb.every: must be ≥ 0 s (0: none), got {self.every}")
        if self.xy < 0 or self.yaw < 0 or self.max_count < 0 or self.tries < 1:
            raise ValueError("disturb: xy, yaw, max_count must be ≥ 0 and tries ≥ 1")

    @property
    def enabled(self) -> bool:
        return self.every > 0 and self.max_count > 0 and (self.xy > 0 or self.yaw > 0)


class Replanning(Policy, Protocol):
    """A policy that can be told to drop its current plan (the world changed under it)."""

    def replan(self) -> None: ...


class Disturber:
    """Wraps an expert (a single-environment `Policy` with `replan`) in `env`, moving `task`'s object between
    chunks as `config` says; `times` are this episode's disturbance times, s. Seeded by `seed` at every reset."""

    def __init__(self, policy: Replanning, env: Env, task: PushTTask, config: DisturbConfig, seed: int = 0) -> None:
        if not hasattr(policy, "replan"):
            raise TypeError(f"Disturber: {type(policy).__name__} cannot be told to replan")
        self.policy, self.env, self.task, self.config = policy, env, task, config
        self.seed = seed
        self.times: list[float] = []
        self._rng = np.random.default_rng(seed)
        self._next = math.inf
        self._object = task.t_index
        pusher = task.scene.robot.pusher
        self._rod = pusher.radius if pusher is not None else 0.0

    def reset(self) -> None:
        self.policy.reset()
        self.times = []
        self._rng = np.random.default_rng(self.seed)
        cfg = self.config
        self._next = cfg.not_before + self._rng.exponential(cfg.every) if cfg.enabled else math.inf

    def act(self, observation: Observation) -> ActionChunk:
        t = float(observation.time)
        if t >= self._next and len(self.times) < self.config.max_count and self._disturb(observation):
            self.times.append(t)
            self.policy.replan()
            observation = self.env.observe()
            self._next = t + self._rng.exponential(self.config.every)
        return self.policy.act(observation)

    def _gap(self, tip_xy: np.ndarray, pos: np.ndarray, yaw: float) -> float:
        """Planar gap between the rod and the object at (pos, yaw), m."""
        return float(T_BLOCK.distance(planar_rotation(yaw).T @ (tip_xy - pos[:2]))) - self._rod

    def _disturb(self, observation: Observation) -> bool:
        """Move the object if it is at rest and clear of the rod; whether it was moved."""
        cfg, task, k = self.config, self.task, self._object
        state = self.env.runtime.twin.state()
        speed, spin = np.linalg.norm(state.object_linvel[k]), np.linalg.norm(state.object_angvel[k])
        if speed > cfg.rest_speed or spin > cfg.rest_spin:
            return False
        pos = np.asarray(observation.object_pos[k], dtype=np.float64)
        yaw = float(quat_yaw(np.asarray(observation.object_quat[k])))
        tip = task.ik.tip_position(np.asarray(observation.q, dtype=np.float64))
        if self._gap(tip[:2], pos, yaw) < cfg.clearance:
            return False
        for _ in range(cfg.tries):
            new = pos.copy()
            new[:2] += self._rng.normal(0.0, cfg.xy, 2)
            new_yaw = wrap_angle(yaw + float(self._rng.normal(0.0, cfg.yaw)))
            if not task.in_workspace(new) or self._gap(tip[:2], new, new_yaw) < cfg.clearance:
                continue
            all_pos = np.asarray(observation.object_pos, dtype=np.float64).copy()
            all_quat = np.asarray(observation.object_quat, dtype=np.float64).copy()
            all_pos[k], all_quat[k] = new, yaw_quat(new_yaw)
            if task.evaluate(all_pos, all_quat).success or not task.reachable(new, new_yaw):
                continue
            placed = place_object(self.env.runtime.twin, k, new, yaw_quat(new_yaw))
            if not placed.placed:
                continue
            log.debug("disturbance at %.2f s: T moved by %s m, %.2f rad", float(observation.time),
                      (placed.pos[:2] - pos[:2]).round(3), new_yaw - yaw)  # fmt: skip
            return True
        return False
