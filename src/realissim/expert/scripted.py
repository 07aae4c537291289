"""Scripted pusher motions: Cartesian tip paths turned into joint targets by inverse kinematics, and the
scripted push of the T as a `Policy`.

The tip follows straight segments between waypoints at a requested speed; where that speed would ask a
joint to move faster than its velocity limit, the step is stretched over more samples, so the result
is as fast as the arm allows, up to the requested speed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from realissim.assets import panda
from realissim.geometry import quat_to_mat
from realissim.policy.base import ActionChunk, Observation
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK


def sample_path(
    waypoints: ArrayLike, speed: float, dt: float, accel: float = math.inf, through: bool = False
) -> np.ndarray:
    """Tip positions (N, 3), one per frame of `dt` s, along the polyline `waypoints` (M, 3) m.

    Each straight segment starts and ends at rest and follows a trapezoidal speed profile with peak
    `speed` m/s and acceleration `accel` m/s² (infinite: constant speed); `through`: one such profile over the
    whole polyline, which turns its inner corners without stopping. Ends are included.
    """
    pts = np.asarray(waypoints, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3 or len(pts) < 2:
        raise ValueError(f"waypoints must have shape (M ≥ 2, 3), got {pts.shape}")
    if not (speed > 0 and dt > 0 and accel > 0):
        raise ValueError(f"speed, dt and accel must be > 0, got {speed}, {dt}, {accel}")
    out = [pts[:1]]
    if through and len(pts) > 2:
        arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])
        s = _trapezoid(float(arc[-1]), speed, accel, dt)
        out.append(np.stack([np.interp(s, arc, pts[:, k]) for k in range(3)], axis=1))
        return np.concatenate(out)
    for a, b in itertools.pairwise(pts):
        length = float(np.linalg.norm(b - a))
        s = _trapezoid(length, speed, accel, dt)
        out.append(a + (b - a) * (s / max(length, 1e-12))[:, None])
    return np.concatenate(out)


def _trapezoid(length: float, vmax: float, amax: float, dt: float) -> np.ndarray:
    """Arc lengths (n,) at t = dt, 2dt, ... of a rest-to-rest trapezoidal profile over `length` m."""
    if length <= 0:
        return np.array([0.0])
    t_acc = min(vmax / amax, math.sqrt(length / amax)) if math.isfinite(amax) else 0.0
    v_peak = amax * t_acc if math.isfinite(amax) else vmax
    d_acc = 0.5 * v_peak * t_acc
    t_cruise = (length - 2 * d_acc) / v_peak
    total = 2 * t_acc + t_cruise
    t = np.arange(1, max(1, math.ceil(total / dt - 1e-9)) + 1) * dt
    t = np.minimum(t, total)
    s = np.where(
        t < t_acc,
        0.5 * amax * t**2 if t_acc > 0 else 0.0,
        np.where(
            t < t_acc + t_cruise,
            d_acc + v_peak * (t - t_acc),
            length - 0.5 * (amax if t_acc > 0 else 0.0) * np.maximum(total - t, 0.0) ** 2,
        ),
    )
    return np.clip(s, 0.0, length)


def joint_trajectory(
    ik: PusherIK,
    tip_points: ArrayLike,
    seed: ArrayLike,
    velocity_limit: Sequence[float],
    dt: float,
    strict: bool = True,
) -> np.ndarray:
    """Joint targets (T, J), one per frame of `dt` s, moving the tip through `tip_points` (N, 3).

    Each point is solved by IK from the previous solution; a step that would exceed `velocity_limit`
    (J,) rad/s on any joint is split into several frames of linearly interpolated joints. `strict=False`: an
    unreachable point gets the closest reachable configuration instead of an `IKError`.
    """
    vmax = np.asarray(velocity_limit, dtype=np.float64)
    q_prev = np.asarray(seed, dtype=np.float64)
    frames = []
    for p in np.asarray(tip_points, dtype=np.float64):
        q = ik.solve(p, q_prev, strict)
        n = max(1, math.ceil(float(np.max(np.abs(q - q_prev) / (vmax * dt)))))
        frames.append(q_prev + (q - q_prev) * (np.arange(1, n + 1) / n)[:, None])
        q_prev = q
    return np.concatenate(frames)


def sweep_waypoints(center: ArrayLike, half: float, lanes: int, height: float) -> np.ndarray:
    """Zig-zag tip waypoints (2·lanes, 3) across a square of half size `half` m around `center` (x, y)."""
    cx, cy = np.asarray(center, dtype=np.float64)[:2]
    ys = np.linspace(cy - half, cy + half, lanes)
    pts = []
    for i, y in enumerate(ys):
        xs = (cx - half, cx + half) if i % 2 == 0 else (cx + half, cx - half)
        pts += [(xs[0], y, height), (xs[1], y, height)]
    return np.asarray(pts)


@dataclass(frozen=True)
class ScriptedPushConfig:
    """The scripted push: behind the object, down, along the line to its goal, up; then hold."""

    speed: float = 0.25
    """Pusher tip speed, m/s."""
    accel: float = 2.0
    """Tip acceleration at the ends of each straight segment, m/s²."""
    push_height: float = 0.015
    """Tip centre height above the table while pushing, m."""
    approach_gap: float = 0.05
    """Distance kept from the object's edge when the tip comes down behind it, m."""
    hover: float = 0.08
    """Tip height while travelling above the object, m."""
    waypoints: int = 32
    """Waypoints per chunk, m."""
    horizon: float = 1.0
    """Chunk horizon H, s."""


def push_waypoints(
    scene: SceneSpec, obj_pos: ArrayLike, obj_quat: ArrayLike, tip_start: ArrayLike, cfg: ScriptedPushConfig
) -> np.ndarray:
    """Tip waypoints (5, 3) m, world frame: from `tip_start` to above a point behind the scene's first object
    (at obj_pos (3,) m, obj_quat (4,) wxyz), down, along the line to its goal, up."""
    obj = scene.objects[0]
    start = np.asarray(obj_pos, dtype=np.float64)[:2]
    goal = np.asarray(scene.goals[0].pose.pos[:2]) if scene.goals else start + np.array([0.1, 0.0])
    direction = (goal - start) / max(float(np.linalg.norm(goal - start)), 1e-9)
    # How far the object extends behind its centre, seen along the push direction, at its yaw.
    centers_W = np.asarray(obj.spheres.centers)[:, :2] @ quat_to_mat(np.asarray(obj_quat))[:2, :2].T
    rod = scene.robot.pusher.radius if scene.robot.pusher else 0.0
    back = float(np.max(centers_W @ -direction + np.asarray(obj.spheres.radii))) + rod
    behind = start - direction * (back + cfg.approach_gap)
    end = goal - direction * back
    h, z = cfg.hover, cfg.push_height
    return np.array([np.asarray(tip_start, dtype=np.float64), [*behind, h], [*behind, z], [*end, z], [*end, h]])


class ScriptedPush:
    """A `Policy` that pushes the scene's first object once along the straight line to its goal, then holds.

    It plans on its first `act` after `reset`, from what it observes (the object's pose, the arm's joints), a
    tip path sampled every H/m s and solved by IK; each chunk is the next m samples of that plan from the
    observation's time, and progress is the plan's elapsed fraction.
    """

    def __init__(self, scene: SceneSpec, config: ScriptedPushConfig = ScriptedPushConfig()) -> None:
        self.scene, self.config = scene, config
        self.ik = PusherIK(scene)
        self._plan: np.ndarray | None = None
        self._t0 = 0.0

    def reset(self) -> None:
        self._plan = None

    def plan(self, observation: Observation) -> np.ndarray:
        """Joint targets (L, J), one every H/m s, the first at the observed joints."""
        cfg = self.config
        step = cfg.horizon / cfg.waypoints
        q = np.asarray(observation.q, dtype=np.float64)
        points = push_waypoints(
            self.scene, observation.object_pos[0], observation.object_quat[0], self.ik.tip_position(q), cfg
        )
        tips = sample_path(points, cfg.speed, step, accel=cfg.accel)
        # Best effort: where the line behind the object leaves the arm's reach, it pushes from as close as it can.
        return np.concatenate([q[None], joint_trajectory(self.ik, tips, q, panda.VELOCITY_LIMIT, step, strict=False)])

    def act(self, observation: Observation) -> ActionChunk:
        cfg = self.config
        if self._plan is None:
            self._plan, self._t0 = self.plan(observation), float(observation.time)
        last = len(self._plan) - 1
        k0 = round((float(observation.time) - self._t0) * cfg.waypoints / cfg.horizon)
        idx = np.minimum(k0 + np.arange(1, cfg.waypoints + 1), last)
        return ActionChunk(self._plan[idx], idx / max(last, 1), cfg.horizon)
