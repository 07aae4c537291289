"""Putting a twin's object at a pose consistently: pose set, velocities and pending wrench zeroed, shifted in the
plane by the smallest amount that clears the robot (and other objects) when the pose overlaps them (used by
re-acquisition, `estimate.search`)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from realissim.twin.physics import TwinPhysics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlacementConfig:
    """Putting an object at a found pose without overlapping the robot (or other objects)."""

    directions: int = 24
    """Planar directions, evenly spaced, tried for the shift that clears an overlap."""
    max_shift: float = 0.1
    """m; an overlap that needs a longer shift is not cleared, and the object is not placed."""
    step: float = 0.005
    """m; along each direction the shift grows by this until clear, then is bisected."""
    tolerance: float = 5e-4
    """m; resolution of the bisection."""
    clearance: float = 1e-3
    """m added to the smallest clearing shift, so the object does not start in contact."""
    penetration: float = 1e-4
    """m; contacts deeper than this count as an overlap."""

    def __post_init__(self) -> None:
        if self.directions < 1:
            raise ValueError(f"directions: must be ≥ 1, got {self.directions}")
        for name in ("max_shift", "step", "tolerance"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Placement:
    """The outcome of `place_object`. World frame."""

    placed: bool
    """Whether the object was moved (False: the twin is unchanged)."""
    pos: np.ndarray
    """(3,) m: where the object was put (the requested position plus `shift`), or the requested one."""
    quat: np.ndarray
    """(4,) wxyz, normalised."""
    shift: np.ndarray
    """(2,) m: the planar shift that cleared an overlap (zero if there was none)."""
    reason: str = ""
    """Why it was not placed."""


def place_object(
    twin: TwinPhysics, obj: int | str, pos: ArrayLike, quat: ArrayLike, config: PlacementConfig = PlacementConfig()
) -> Placement:
    """Move the twin's object `obj` (index or name) to pos (3,) m, quat (4,) wxyz, at rest (velocities and any
    pending wrench zeroed), then `mj_forward`. If the object would overlap the robot's geoms (or another
    object's) at the twin's current joints, it is shifted in the plane by the smallest amount (over
    `config.directions`) that clears them; if none up to `max_shift` does, the twin is left unchanged."""
    layout, model = twin.layout, twin.model
    k = layout.object_index(obj)
    p, q = np.asarray(pos, dtype=np.float64).reshape(3), np.asarray(quat, dtype=np.float64).reshape(4)
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(q)) and np.linalg.norm(q) > 0):
        raise ValueError(f"pos and quat must be finite (and quat non-zero), got {p}, {q}")
    q = q / np.linalg.norm(q)
    overlaps = _Overlap(twin, k, q, p[2], config.penetration)
    shift = np.zeros(2)
    if overlaps(p[:2]):
        found = _clearing_shift(overlaps, p[:2], config)
        if found is None:
            reason = f"overlaps the robot and no planar shift up to {config.max_shift} m clears it"
            log.info("place_object: %s not placed: %s", layout.object_names[k], reason)
            return Placement(False, p, q, shift, reason)
        shift = found
    qadr, dof, body = layout.object_qpos[k], layout.object_dof[k], layout.object_bodies[k]
    d = twin.data
    d.qpos[qadr[:3]] = p + np.append(shift, 0.0)
    d.qpos[qadr[3:]] = q
    d.qvel[dof] = 0.0
    d.qacc_warmstart[dof] = 0.0
    d.xfrc_applied[body] = 0.0
    mujoco.mj_forward(model, d)
    return Placement(True, p + np.append(shift, 0.0), q, shift)


class _Overlap:
    """Whether object k at a planar position (orientation and height fixed) penetrates the robot or another
    object, in a scratch copy of the twin's current state."""

    def __init__(self, twin: TwinPhysics, k: int, quat: np.ndarray, height: float, penetration: float) -> None:
        model = twin.model
        self.model, self.data = model, mujoco.MjData(model)
        self.data.qpos[:] = twin.data.qpos
        self.qadr, self.quat, self.height, self.penetration = twin.layout.object_qpos[k], quat, height, penetration
        body = twin.layout.object_bodies[k]
        root = model.body_rootid[model.geom_bodyid]
        self.mine = root == body
        self.obstacles = (root != body) & (root != 0)
        """Geoms of the robot and the other objects (not the world's: the object rests on the table)."""

    def __call__(self, xy: np.ndarray) -> bool:
        d = self.data
        d.qpos[self.qadr[:3]] = (xy[0], xy[1], self.height)
        d.qpos[self.qadr[3:]] = self.quat
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_collision(self.model, d)
        c = d.contact
        pair = (self.mine[c.geom1] & self.obstacles[c.geom2]) | (self.mine[c.geom2] & self.obstacles[c.geom1])
        return bool(np.any(pair & (c.dist < -self.penetration)))


def _clearing_shift(overlaps: _Overlap, xy: np.ndarray, cfg: PlacementConfig) -> np.ndarray | None:
    """The smallest planar shift (2,) m, over `cfg.directions` directions, after which `overlaps` is False (plus
    the clearance), or None if none up to `max_shift` clears."""
    best: tuple[float, np.ndarray] | None = None
    for i in range(cfg.directions):
        angle = 2 * math.pi * i / cfg.directions
        u = np.array([math.cos(angle), math.sin(angle)])
        limit = cfg.max_shift if best is None else best[0]
        lo, hi = 0.0, min(cfg.step, limit)
        while overlaps(xy + hi * u):
            if hi >= limit:
                break
            lo, hi = hi, min(hi + cfg.step, limit)
        else:
            while hi - lo > cfg.tolerance:
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if overlaps(xy + mid * u) else (lo, mid)
            if best is None or hi < best[0]:
                best = (hi, u)
    if best is None:
        return None
    shift = (best[0] + cfg.clearance) * best[1]
    return shift if not overlaps(xy + shift) else None
