"""Mass properties of a union of spheres with uniform density (for objects given without inertia)."""

from __future__ import annotations

import numpy as np

from realissim.spec.scene import InertiaSpec, SphereSetSpec


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
