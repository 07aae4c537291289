"""Scripted pusher motions: Cartesian tip paths turned into 60 Hz joint targets by inverse kinematics.

The tip follows straight segments between waypoints at a requested speed; where that speed would ask a
joint to move faster than its velocity limit, the step is stretched over more frames, so the result
is as fast as the arm allows, up to the requested speed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from realissim.twin.kinematics import PusherIK


def sample_path(waypoints: ArrayLike, speed: float, dt: float, accel: float = math.inf) -> np.ndarray:
    """Tip positions (N, 3), one per frame of `dt` s, along the polyline `waypoints` (M, 3) m.

    Each straight segment starts and ends at rest and follows a trapezoidal speed profile with peak
    `speed` m/s and acceleration `accel` m/s² (infinite: constant speed). Ends are included.
    """
    pts = np.asarray(waypoints, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3 or len(pts) < 2:
        raise ValueError(f"waypoints must have shape (M ≥ 2, 3), got {pts.shape}")
    if not (speed > 0 and dt > 0 and accel > 0):
        raise ValueError(f"speed, dt and accel must be > 0, got {speed}, {dt}, {accel}")
    out = [pts[:1]]
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
) -> np.ndarray:
    """Joint targets (T, J), one per frame of `dt` s, moving the tip through `tip_points` (N, 3).

    Each point is solved by IK from the previous solution; a step that would exceed `velocity_limit`
    (J,) rad/s on any joint is split into several frames of linearly interpolated joints.
    """
    vmax = np.asarray(velocity_limit, dtype=np.float64)
    q_prev = np.asarray(seed, dtype=np.float64)
    frames = []
    for p in np.asarray(tip_points, dtype=np.float64):
        q = ik.solve(p, q_prev)
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
