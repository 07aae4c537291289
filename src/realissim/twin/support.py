"""Which of a twin's objects rest on static geometry, and the support's normal (from MuJoCo's contacts)."""

from __future__ import annotations

import mujoco
import numpy as np


def support_normals(model: mujoco.MjModel, data: mujoco.MjData, bodies: np.ndarray) -> np.ndarray:
    """(K,3) unit normal, world frame, pointing from the static geometry (world-body geoms, e.g. the table)
    into each of `bodies` (K,) that touches it in `data`'s current contacts (their mean direction); zeros
    for bodies that touch no static geometry."""
    bodies = np.asarray(bodies)
    out = np.zeros((len(bodies), 3))
    n = data.ncon
    if n == 0:
        return out
    b1 = model.geom_bodyid[data.contact.geom1[:n]]
    b2 = model.geom_bodyid[data.contact.geom2[:n]]
    normal = data.contact.frame[:n, :3]  # from geom1 towards geom2
    for k, body in enumerate(bodies):
        towards = normal[(b1 == 0) & (b2 == body)].sum(axis=0) - normal[(b2 == 0) & (b1 == body)].sum(axis=0)
        norm = np.linalg.norm(towards)
        if norm > 1e-9:
            out[k] = towards / norm
    return out


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
