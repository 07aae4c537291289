"""3D Gaussians as numpy arrays, and procedural surface Gaussians for boxes, capsules and planes.

A Gaussian has a mean (m), a rotation (unit quaternion [w, x, y, z]) taking its local axes to the
frame it lives in, three standard deviations along those local axes (m), an RGB colour in [0, 1] and
an opacity in [0, 1]. Surface Gaussians are flat: their local z axis is the surface normal with a thin
standard deviation, their local x and y axes are tangent. Each generator returns Gaussians in the
frame of its shape; place them with `GaussianArrays.transformed`. Everything here is float64 numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from realissim.geometry import axis_angle_quat, mat_to_quat, quat_mul, quat_to_mat
from realissim.spec.scene import GaussianSetSpec

QUAT_NORM_TOL = 1e-6
"""Largest accepted | |q| - 1 | for a Gaussian's quaternion."""
DEFAULT_OVERLAP = 0.55
"""Tangent standard deviation as a fraction of the distance between neighbours. At 0.55, a square grid
of 0.95-opaque Gaussians covers every point of its surface with alpha ≥ 0.88; at 0.3 it leaves holes
(alpha 0.22 between four neighbours)."""
DEFAULT_THICKNESS = 0.001
"""Standard deviation along the surface normal, m."""

_FIELD_TAILS: dict[str, tuple[int, ...]] = {
    "means": (3,),
    "quats": (4,),
    "scales": (3,),
    "colors": (3,),
    "opacities": (),
}
Seed = int | np.random.Generator


def _checked(name: str, value: ArrayLike, n: int | None) -> np.ndarray:
    arr = np.array(value, dtype=np.float64)
    tail = _FIELD_TAILS[name]
    if arr.ndim != 1 + len(tail) or arr.shape[1:] != tail or (n is not None and len(arr) != n):
        want = ", ".join(["N", *map(str, tail)])
        raise ValueError(f"GaussianArrays.{name}: expected shape ({want}) with N = {n}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"GaussianArrays.{name}: contains NaN or inf")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class GaussianArrays:
    """N Gaussians in one frame: means (N,3) m, quats (N,4) unit wxyz, scales (N,3) std-dev m per local
    axis, colors (N,3) RGB in [0,1], opacities (N,) in [0,1]. Arrays are read-only float64 copies."""

    means: np.ndarray
    quats: np.ndarray
    scales: np.ndarray
    colors: np.ndarray
    opacities: np.ndarray

    def __post_init__(self) -> None:
        n = len(np.asarray(self.means))
        for name in _FIELD_TAILS:
            object.__setattr__(self, name, _checked(name, getattr(self, name), n))
        norms = np.linalg.norm(self.quats, axis=1)
        if np.any(np.abs(norms - 1.0) > QUAT_NORM_TOL):
            raise ValueError("GaussianArrays.quats: quaternions must have unit norm")
        if np.any(self.scales <= 0):
            raise ValueError("GaussianArrays.scales: standard deviations must be > 0")
        for name in ("colors", "opacities"):
            values = getattr(self, name)
            if np.any(values < 0) or np.any(values > 1):
                raise ValueError(f"GaussianArrays.{name}: values must lie in [0, 1]")

    def __len__(self) -> int:
        return len(self.means)

    @staticmethod
    def empty() -> GaussianArrays:
        """No Gaussians."""
        return GaussianArrays(np.zeros((0, 3)), np.zeros((0, 4)), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0))

    @staticmethod
    def concat(parts: Sequence[GaussianArrays]) -> GaussianArrays:
        """All Gaussians of `parts`, in order (all in the same frame)."""
        if not parts:
            return GaussianArrays.empty()
        return GaussianArrays(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in _FIELD_TAILS})

    @staticmethod
    def from_spec(spec: GaussianSetSpec) -> GaussianArrays:
        """The Gaussians of a scene file's `GaussianSetSpec`."""
        return GaussianArrays(**spec.arrays())

    def to_spec(self) -> GaussianSetSpec:
        """These Gaussians as a `GaussianSetSpec` (plain tuples of floats)."""
        rows = {k: tuple(map(tuple, getattr(self, k).tolist())) for k in ("means", "quats", "scales", "colors")}
        return GaussianSetSpec(**rows, opacities=tuple(self.opacities.tolist()))  # type: ignore[arg-type]

    def select(self, index: ArrayLike) -> GaussianArrays:
        """The subset picked by a boolean mask (N,) or an integer index array."""
        idx = np.asarray(index)
        return GaussianArrays(**{k: getattr(self, k)[idx] for k in _FIELD_TAILS})

    def transformed(self, pos: ArrayLike, quat: ArrayLike) -> GaussianArrays:
        """These Gaussians moved by the rigid pose (pos (3,) m, quat (4,) wxyz): means → R·μ + p,
        quats → q ⊗ q_local. Scales, colours and opacities are unchanged."""
        p = np.asarray(pos, dtype=np.float64)
        q = np.asarray(quat, dtype=np.float64)
        if p.shape != (3,) or q.shape != (4,) or not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
            raise ValueError(f"transformed: need finite pos (3,) and quat (4,), got {p.shape} and {q.shape}")
        q = q / np.linalg.norm(q)
        quats = quat_mul(q, self.quats)
        return GaussianArrays(
            means=self.means @ quat_to_mat(q).T + p,
            quats=quats / np.linalg.norm(quats, axis=1, keepdims=True),
            scales=self.scales,
            colors=self.colors,
            opacities=self.opacities,
        )


def _colors(color: ArrayLike, n: int, jitter: float, rng: np.random.Generator) -> np.ndarray:
    """`color` (3,) for n Gaussians, each brightened or darkened by a uniform amount in ±jitter."""
    base = np.broadcast_to(np.asarray(color, dtype=np.float64), (n, 3))
    return np.clip(base + rng.uniform(-jitter, jitter, size=(n, 1)), 0.0, 1.0)


def _surfels(
    means: np.ndarray, quats: np.ndarray, tangent: np.ndarray, thickness: float, colors: np.ndarray, opacity: float
) -> GaussianArrays:
    """Flat Gaussians: tangent std-devs (N, 2) along local x, y; `thickness` along local z (the normal)."""
    n = len(means)
    scales = np.column_stack([tangent, np.full(n, thickness)])
    return GaussianArrays(means, np.broadcast_to(quats, (n, 4)), scales, colors, np.full(n, opacity))


def _axis_quats(axis: Sequence[float], angles: np.ndarray) -> np.ndarray:
    """Quaternions (N, 4) rotating by `angles` (N,) rad about a fixed unit `axis` (3,)."""
    half = 0.5 * np.asarray(angles, dtype=np.float64)
    return np.column_stack([np.cos(half), np.sin(half)[:, None] * np.asarray(axis, dtype=np.float64)])


def _cells(extent: float, spacing: float) -> tuple[np.ndarray, float]:
    """Centres of the equal cells (at most `spacing` long) tiling [-extent/2, extent/2], and their size."""
    n = max(1, math.ceil(extent / spacing - 1e-9))
    size = extent / n
    return -extent / 2 + size * (np.arange(n) + 0.5), size


def _face_quat(axis: int, sign: float) -> np.ndarray:
    """Rotation whose columns are (t1, t2, n) with n = sign·e_axis, right-handed."""
    e = np.eye(3)
    t1, t2 = e[(axis + 1) % 3], e[(axis + 2) % 3]
    if sign < 0:
        t1, t2 = t2, t1
    return mat_to_quat(np.column_stack([t1, t2, sign * e[axis]]))


def box_gaussians(
    center: ArrayLike,
    half: ArrayLike,
    color: ArrayLike,
    spacing: float,
    opacity: float = 0.95,
    seed: Seed = 0,
    overlap: float = DEFAULT_OVERLAP,
    thickness: float = DEFAULT_THICKNESS,
    jitter: float = 0.03,
) -> GaussianArrays:
    """Flat Gaussians on the six faces of an axis-aligned box (centre (3,), half sizes (3,), m), at most
    `spacing` m apart, thin axis along each face's normal."""
    c, h = np.asarray(center, dtype=np.float64), np.asarray(half, dtype=np.float64)
    rng = np.random.default_rng(seed)
    parts = []
    for axis in range(3):
        u, v = (axis + 1) % 3, (axis + 2) % 3
        cu, su = _cells(2 * h[u], spacing)
        cv, sv = _cells(2 * h[v], spacing)
        gu, gv = (g.ravel() for g in np.meshgrid(cu, cv, indexing="ij"))
        for sign in (1.0, -1.0):
            pts = np.zeros((len(gu), 3))
            pts[:, u], pts[:, v], pts[:, axis] = gu, gv, sign * h[axis]
            # The face quaternion's first tangent is e_u for +n and e_v for -n.
            tangent = overlap * np.array([su, sv] if sign > 0 else [sv, su])
            colors = _colors(color, len(pts), jitter, rng)
            quat = _face_quat(axis, sign)
            parts.append(_surfels(pts + c, quat, np.tile(tangent, (len(pts), 1)), thickness, colors, opacity))
    return GaussianArrays.concat(parts)


def _rings(radius: float, spacing: float, top: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Polar angles φ, azimuths θ (N,) and tangent std-dev factors (N, 2) of points on a hemisphere."""
    n_phi = max(1, math.ceil(0.5 * math.pi * radius / spacing - 1e-9))
    dphi = 0.5 * math.pi / n_phi
    phis, thetas, cells = [], [], []
    for i in range(n_phi):
        phi = (i + 0.5) * dphi
        circ = 2 * math.pi * radius * math.sin(phi)
        n_theta = max(1, math.ceil(circ / spacing - 1e-9))
        phis.append(np.full(n_theta, phi if top else math.pi - phi))
        thetas.append(2 * math.pi * (np.arange(n_theta) + 0.5 * (i % 2)) / n_theta)
        cells.append(np.tile([radius * dphi, max(circ / n_theta, radius * dphi)], (n_theta, 1)))
    return np.concatenate(phis), np.concatenate(thetas), np.concatenate(cells)


def _cap(radius: float, z: float, top: bool, spacing: float, overlap: float) -> tuple[np.ndarray, ...]:
    """Means, quats and tangent std-devs of a hemisphere of `radius` centred at (0, 0, z), pole along ±z."""
    phi, theta, cells = _rings(radius, spacing, top)
    normal = np.column_stack([np.sin(phi) * np.cos(theta), np.sin(phi) * np.sin(theta), np.cos(phi)])
    quats = quat_mul(_axis_quats((0, 0, 1), theta), _axis_quats((0, 1, 0), phi))
    return radius * normal + [0.0, 0.0, z], quats, overlap * cells


def _side(radius: float, length: float, spacing: float, overlap: float) -> tuple[np.ndarray, ...]:
    """Means, quats and tangent std-devs on the side of a cylinder along z from 0 to `length`."""
    if length <= 0:
        return np.zeros((0, 3)), np.zeros((0, 4)), np.zeros((0, 2))
    zs, dz = _cells(length, spacing)
    n_theta = max(1, math.ceil(2 * math.pi * radius / spacing - 1e-9))
    stagger = 0.5 * (np.arange(len(zs)) % 2)
    theta = (2 * math.pi * (np.arange(n_theta)[None, :] + stagger[:, None]) / n_theta).ravel()
    z = np.repeat(zs + length / 2, n_theta)
    means = np.column_stack([radius * np.cos(theta), radius * np.sin(theta), z])
    # At θ = 0 the Gaussian's axes are (tangent y, cylinder axis z, normal x).
    base = mat_to_quat(np.column_stack([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))
    quats = quat_mul(_axis_quats((0, 0, 1), theta), base)
    cells = np.tile([2 * math.pi * radius / n_theta, dz], (len(theta), 1))
    return means, quats, overlap * cells


def _z_to(direction: np.ndarray) -> np.ndarray:
    """A quaternion rotating +z onto the unit vector `direction` (3,)."""
    axis = np.cross([0.0, 0.0, 1.0], direction)
    if np.linalg.norm(axis) < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0]) if direction[2] > 0 else np.array([0.0, 1.0, 0.0, 0.0])
    return axis_angle_quat(axis, math.acos(float(np.clip(direction[2], -1.0, 1.0))))


def capsule_gaussians(
    p0: ArrayLike,
    p1: ArrayLike,
    radius: float,
    color: ArrayLike,
    spacing: float,
    opacity: float = 0.95,
    seed: Seed = 0,
    overlap: float = DEFAULT_OVERLAP,
    thickness: float = DEFAULT_THICKNESS,
    jitter: float = 0.03,
) -> GaussianArrays:
    """Flat Gaussians on a capsule: the segment p0 → p1 (3,) m swept by a sphere of `radius` m (cylinder
    side and two hemispherical caps), at most `spacing` m apart. p0 = p1 gives a sphere."""
    a, b = np.asarray(p0, dtype=np.float64), np.asarray(p1, dtype=np.float64)
    length = float(np.linalg.norm(b - a))
    direction = (b - a) / length if length > 0 else np.array([0.0, 0.0, 1.0])
    pieces = [
        _side(radius, length, spacing, overlap),
        _cap(radius, length, True, spacing, overlap),
        _cap(radius, 0.0, False, spacing, overlap),
    ]
    means, quats, tangent = (np.concatenate(col) for col in zip(*pieces))
    colors = _colors(color, len(means), jitter, np.random.default_rng(seed))
    local = _surfels(means, quats, tangent, thickness, colors, opacity)
    return local.transformed(a, _z_to(direction))


def plane_gaussians(
    half_x: float,
    half_y: float,
    color: ArrayLike,
    spacing: float,
    checker: float | None = 0.1,
    contrast: float = 0.06,
    opacity: float = 0.95,
    seed: Seed = 0,
    overlap: float = DEFAULT_OVERLAP,
    thickness: float = DEFAULT_THICKNESS,
    jitter: float = 0.03,
) -> GaussianArrays:
    """Flat Gaussians on the rectangle |x| ≤ half_x, |y| ≤ half_y (m) of the plane z = 0, normal +z.

    With `checker` (square size, m), alternate squares are brighter and darker by `contrast`, so the
    surface has texture for photometric alignment.
    """
    xs, sx = _cells(2 * half_x, spacing)
    ys, sy = _cells(2 * half_y, spacing)
    gx, gy = (g.ravel() for g in np.meshgrid(xs, ys, indexing="ij"))
    means = np.column_stack([gx, gy, np.zeros_like(gx)])
    base = np.asarray(color, dtype=np.float64)
    if checker is not None:
        parity = (np.floor(gx / checker) + np.floor(gy / checker)) % 2
        base = base + contrast * (2 * parity[:, None] - 1)
    colors = _colors(np.clip(base, 0.0, 1.0), len(means), jitter, np.random.default_rng(seed))
    tangent = np.tile(overlap * np.array([sx, sy]), (len(means), 1))
    return _surfels(means, np.array([1.0, 0.0, 0.0, 0.0]), tangent, thickness, colors, opacity)
