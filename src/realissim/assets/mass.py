"""Mass properties at uniform density of a union of spheres (for objects given without inertia) or of boxes
(an object's exact shape, `ObjectSpec.boxes`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from realissim.spec.scene import BoxSpec, InertiaSpec, SphereSetSpec

TOUCH_TOL = 1e-9
"""Boxes that interpenetrate by at most this depth (m) along some axis are taken as touching, not overlapping."""


def sphere_union_inertia(spheres: SphereSetSpec, mass: float, resolution: int = 64) -> InertiaSpec:
    """Centre of mass and inertia (body frame) of the union of `spheres` at uniform density.

    Integrated on a regular grid with `resolution` cells along the longest side of the bounding box;
    overlapping spheres are counted once. Accuracy improves as resolution³.
    """
    c = np.asarray(spheres.centers, dtype=np.float64)
    r = np.asarray(spheres.radii, dtype=np.float64)
    lo, hi = (c - r[:, None]).min(axis=0), (c + r[:, None]).max(axis=0)
    h = float((hi - lo).max()) / resolution
    axes = [np.arange(a + h / 2, b, h) for a, b in zip(lo, hi)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    inside = np.zeros(len(grid), dtype=bool)
    for center, radius in zip(c, r):
        inside |= np.sum((grid - center) ** 2, axis=1) <= radius * radius
    pts = grid[inside]
    if len(pts) == 0:
        pts = c  # spheres smaller than a cell: treat them as point masses
    com = pts.mean(axis=0)
    d = pts - com
    m = mass / len(pts)
    ixx = m * np.sum(d[:, 1] ** 2 + d[:, 2] ** 2)
    iyy = m * np.sum(d[:, 0] ** 2 + d[:, 2] ** 2)
    izz = m * np.sum(d[:, 0] ** 2 + d[:, 1] ** 2)
    # Each cell is a small cube, not a point: add its own inertia so thin shapes stay positive definite.
    cell = mass * h * h / 6.0
    return InertiaSpec(
        com=(float(com[0]), float(com[1]), float(com[2])),
        inertia=(
            float(ixx + cell),
            float(iyy + cell),
            float(izz + cell),
            float(-m * np.sum(d[:, 0] * d[:, 1])),
            float(-m * np.sum(d[:, 0] * d[:, 2])),
            float(-m * np.sum(d[:, 1] * d[:, 2])),
        ),
    )


def _overlapping(boxes: Sequence[BoxSpec]) -> bool:
    """Whether any two of `boxes` share a volume (deeper than `TOUCH_TOL` along every axis)."""
    for a, b in itertools.combinations(boxes, 2):
        depth = np.asarray(a.half) + np.asarray(b.half) - np.abs(np.asarray(a.center) - np.asarray(b.center))
        if np.all(depth > TOUCH_TOL):
            return True
    return False


def _disjoint_cells(boxes: Sequence[BoxSpec]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The union of `boxes` as disjoint boxes (centre (3,), half sizes (3,), m): the cells of the grid through
    every box face whose centre lies inside some box (faces closer than `TOUCH_TOL` are merged)."""
    centers = np.array([b.center for b in boxes], dtype=np.float64)
    halves = np.array([b.half for b in boxes], dtype=np.float64)
    axes = []
    for k in range(3):
        edges = np.unique(np.concatenate([centers[:, k] - halves[:, k], centers[:, k] + halves[:, k]]))
        axes.append(edges[np.concatenate([[True], np.diff(edges) > TOUCH_TOL])])
    cells = []
    for lo_hi in itertools.product(*(itertools.pairwise(e) for e in axes)):
        lo, hi = np.array([p[0] for p in lo_hi]), np.array([p[1] for p in lo_hi])
        mid = (lo + hi) / 2
        if np.any(np.all(np.abs(mid - centers) < halves, axis=1)):
            cells.append((mid, (hi - lo) / 2))
    return cells


def box_union_inertia(boxes: Sequence[BoxSpec], mass: float) -> InertiaSpec:
    """Centre of mass (body frame, m) and inertia about it (kg·m², body axes) of the union of `boxes` (body frame)
    at uniform density and total `mass` kg.

    Exact: boxes that overlap are first cut into disjoint cells, so shared volume counts once; boxes that only touch
    are used as they are. The inertia is summed about the body origin, box by box in the given order, then moved to
    the centre of mass.
    """
    if not boxes:
        raise ValueError("box_union_inertia needs at least one box")
    if _overlapping(boxes):
        parts = _disjoint_cells(boxes)
    else:
        parts = [(np.asarray(b.center, dtype=np.float64), np.asarray(b.half, dtype=np.float64)) for b in boxes]
    volumes = [8.0 * h[0] * h[1] * h[2] for _, h in parts]
    volume = sum(volumes)
    about_origin = np.zeros((3, 3))
    moment = np.zeros(3)
    for (r, half), v in zip(parts, volumes):
        m = mass * v / volume
        a, b, c = (2 * s for s in half)
        diag = m / 12.0 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])
        about_origin += np.diag(diag) + m * (np.dot(r, r) * np.eye(3) - np.outer(r, r))
        moment += m * r
    com = moment / mass
    total = about_origin - mass * (np.dot(com, com) * np.eye(3) - np.outer(com, com))
    return InertiaSpec(
        com=(float(com[0]), float(com[1]), float(com[2])),
        inertia=(
            float(total[0, 0]),
            float(total[1, 1]),
            float(total[2, 2]),
            float(total[0, 1]),
            float(total[0, 2]),
            float(total[1, 2]),
        ),
    )
