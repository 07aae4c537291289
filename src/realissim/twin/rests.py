"""The ways a rigid object can rest on the table: lying as the twin models it, or tipped onto one of its sides.

The twin's objects are unions of spheres in one plane of their body frame (an extruded shape such as the T: one
layer of spheres whose radius is half the thickness). Such an object lies on the table with its body z up (its
lying rest), or stands on one of its sides: an edge of the convex hull of the sphere centres in that plane, with
the outward normal pointing down. A side is a rest where the object can stay still (quasi-statically stable)
when the centre of mass projects onto the side within its ends. The real object has flat faces there (the T's boxes)
and stands; the twin's sphere layer would balance on a line, so the twin does not stand objects up: the search
uses the tipped rests to recognise a tipped object (`estimate.search`), not to place one.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
from scipy.spatial import ConvexHull

from realissim.geometry import mat_to_quat


@dataclass(frozen=True)
class Rest:
    """One resting orientation. With the object at yaw ψ about the world's z and this rest, its body orientation
    is yaw_quat(ψ) ⊗ `quat` and its body origin is `height` above the table (at the body origin's planar
    position)."""

    name: str
    """"side k" (k: the edge's index in the hull of the sphere centres)."""
    quat: np.ndarray
    """(4,) wxyz: the body's orientation at yaw 0."""
    height: float
    """Body origin above the table, m."""


def tipped_rests(model: mujoco.MjModel, body: int, min_margin: float = 0.005) -> tuple[float, list[Rest]]:
    """The lying height of `body` in `model` (its body origin above the table when lying, m) and its stable tipped
    rests (its sphere geoms; see the module docstring), longest side first. A side counts when the centre of mass
    projects onto it at least `min_margin` m inside both ends.

    Raises ValueError if the body has no sphere geoms, or its spheres are not one layer of equal radii in the
    body's x-y plane (the only shape the twin's objects take)."""
    geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == body]
    spheres = [g for g in geoms if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE]
    if not spheres:
        raise ValueError(f"body {body}: no sphere geoms to find its rests from")
    centres = np.array([model.geom_pos[g] for g in spheres], dtype=np.float64)
    radii = np.array([model.geom_size[g][0] for g in spheres], dtype=np.float64)
    # Geoms' positions are in the body frame; the geoms' own frames may be rotated, spheres do not care.
    if np.ptp(centres[:, 2]) > 1e-9 or np.ptp(radii) > 1e-9:
        raise ValueError(f"body {body}: tipped rests need one layer of equal spheres in the body's x-y plane")
    radius = float(radii[0])
    com = np.asarray(model.body_ipos[body], dtype=np.float64)
    lying = radius - float(centres[0, 2])
    pts = centres[:, :2]
    if len(pts) < 3 or np.linalg.matrix_rank(pts - pts.mean(axis=0)) < 2:
        return lying, []
    hull = ConvexHull(pts)
    out: list[tuple[float, Rest]] = []
    for k, (a, b) in enumerate(hull.simplices):
        p, q = pts[a], pts[b]
        along = q - p
        length = float(np.linalg.norm(along))
        along /= length
        normal = np.array([along[1], -along[0]])
        if np.dot(normal, pts.mean(axis=0) - p) > 0:  # outward: away from the interior
            normal = -normal
        s = float(np.dot(com[:2] - p, along))
        margin = min(s, length - s)
        if margin < min_margin:
            continue  # the centre of mass overhangs an end: the object tips on
        # At yaw 0 the side runs along world x and its outward normal points down: the world's axes in body
        # coordinates are x = along, z = −normal, y = z × x (right-handed); their rows map body to world.
        ex, ez = np.array([along[0], along[1], 0.0]), -np.array([normal[0], normal[1], 0.0])
        R = np.stack([ex, np.cross(ez, ex), ez])
        height = radius - float((centres @ R.T)[:, 2].min())  # the lowest sphere touches the table
        out.append((length, Rest(f"side {k}", np.asarray(mat_to_quat(R), dtype=np.float64), height)))
    out.sort(key=lambda item: -item[0])
    return lying, [rest for _, rest in out]
