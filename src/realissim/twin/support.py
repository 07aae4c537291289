"""Which of a twin's objects rest on static geometry, and the support's normal (from MuJoCo's contacts, and
from geom distances for an object that has just hopped off its support)."""

from __future__ import annotations

import mujoco
import numpy as np


def support_normals(model: mujoco.MjModel, data: mujoco.MjData, bodies: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """(K,3) unit normal, world frame, pointing from the static geometry (world-body geoms, e.g. the table)
    into each of `bodies` (K,): the mean direction of its contacts with static geometry in `data`'s current
    contacts; for a body with none, the direction from the nearest static geom to it if that is within `margin`
    m (`mj_geomDistance`; positions must be current); zeros for bodies farther than that from all static
    geometry. The margin keeps a body that bounces a millimetre off the table counted as resting on it."""
    bodies = np.asarray(bodies)
    out = np.zeros((len(bodies), 3))
    b1, b2 = _contact_bodies(model, data)
    if len(b1):
        normal = data.contact.frame[: len(b1), :3]  # from geom1 towards geom2
        for k, body in enumerate(bodies):
            towards = normal[(b1 == 0) & (b2 == body)].sum(axis=0) - normal[(b2 == 0) & (b1 == body)].sum(axis=0)
            norm = np.linalg.norm(towards)
            if norm > 1e-9:
                out[k] = towards / norm
    if margin > 0:
        for k in np.flatnonzero(~out.any(axis=1)):
            out[k] = _nearby_support(model, data, int(bodies[k]), margin)
    return out


def touched(model: mujoco.MjModel, data: mujoco.MjData, bodies: np.ndarray) -> np.ndarray:
    """(K,) bool: whether each of `bodies` (K,) is in contact, in `data`'s current contacts, with a body that is
    neither static geometry (the world body) nor itself: the arm's pusher, or another object."""
    b1, b2 = _contact_bodies(model, data)
    moving = (b1 != 0) & (b2 != 0) & (b1 != b2)
    return np.isin(np.asarray(bodies), np.concatenate([b1[moving], b2[moving]]))


def _contact_bodies(model: mujoco.MjModel, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
    """Body ids (n,) of the first and of the second geom of each of `data`'s n current contacts."""
    n = data.ncon
    return model.geom_bodyid[data.contact.geom1[:n]], model.geom_bodyid[data.contact.geom2[:n]]


def _nearby_support(model: mujoco.MjModel, data: mujoco.MjData, body: int, margin: float) -> np.ndarray:
    """Unit direction (3,) from the static geom nearest to `body` towards it, if within `margin` m; else zeros."""
    static = np.flatnonzero(model.geom_bodyid == 0)
    own = np.flatnonzero(model.geom_bodyid == body)
    fromto = np.zeros(6)
    best, direction = margin, np.zeros(3)
    for g1 in static:
        for g2 in own:
            dist = mujoco.mj_geomDistance(model, data, int(g1), int(g2), margin, fromto)
            if dist < best:
                d = fromto[3:] - fromto[:3]
                norm = np.linalg.norm(d)
                if norm > 1e-9:  # (touching: the contacts above would have had it)
                    best, direction = dist, d / norm
    return direction


def planar_wrenches(wrenches: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """Wrenches (K,6) [force, torque] without the parts a support already decides: for each body with a
    support normal n (K,3; zero rows leave the wrench unchanged), the force along n and the torque about
    axes perpendicular to n (tilting it into the support) are removed; the in-plane force and the torque
    about n remain."""
    out = np.array(wrenches, dtype=np.float64, copy=True)
    n = np.asarray(normals, dtype=np.float64)
    f, t = out[:, :3], out[:, 3:]
    supported = np.linalg.norm(n, axis=1) > 0.5
    along = np.sum(f * n, axis=1, keepdims=True)
    f[supported] -= (along * n)[supported]
    t[supported] = (np.sum(t * n, axis=1, keepdims=True) * n)[supported]
    return out
