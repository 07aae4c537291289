"""Scene description: robot, rigid objects, ground, cameras and goals, as frozen dataclasses.

Conventions (docs/design.md §2): SI units (m, kg, s, rad), world Z up with the table top at z = 0,
quaternions `[w, x, y, z]`, cameras in OpenCV axes (x right, y down, z forward). Every class checks
its own values on construction and raises `SpecError` naming the field; `realissim.spec.io` adds the
path from the scene root when loading a file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from realissim.geometry import pose_matrix
from realissim.spec.errors import SpecError

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]
Row3 = tuple[float, float, float]
Row4 = tuple[float, float, float, float]

QUAT_NORM_TOL = 1e-4
"""Largest accepted | |q| - 1 | for a quaternion in a scene file."""
ROTATION_TOL = 1e-4
"""Largest accepted entry of |R^T R - I| for a camera rotation."""


def _require(ok: bool, field_name: str, reason: str) -> None:
    if not ok:
        raise SpecError(field_name, reason)


def _check_unit_quat(quat: Sequence[float], field_name: str) -> None:
    norm = math.sqrt(math.fsum(q * q for q in quat))
    _require(abs(norm - 1.0) <= QUAT_NORM_TOL, field_name, f"quaternion must have unit norm, |q| = {norm:.6g}")


def _check_unique(names: Iterable[str], field_name: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        _require(name not in seen, f"{field_name}[{i}].name", f"duplicate name {name!r}")
        seen.add(name)


def _check_name(name: str, field_name: str = "name") -> None:
    _require(bool(name.strip()), field_name, "must be a non-empty name")


@dataclass(frozen=True)
class Pose:
    """A rigid pose: translation `pos` (m) and unit quaternion `quat` [w, x, y, z]."""

    pos: Vec3 = (0.0, 0.0, 0.0)
    """Translation in metres."""
    quat: Quat = (1.0, 0.0, 0.0, 0.0)
    """Rotation as a unit quaternion, [w, x, y, z]."""

    def __post_init__(self) -> None:
        _check_unit_quat(self.quat, "quat")

    def matrix(self) -> np.ndarray:
        """The 4×4 homogeneous transform (float64) of this pose."""
        return pose_matrix(self.pos, self.quat)


@dataclass(frozen=True)
class JointSpec:
    """One robot joint and its limits (radians and their derivatives, N·m)."""

    name: str
    lower: float
    """Lowest position, rad."""
    upper: float
    """Highest position, rad."""
    velocity: float
    """Largest |q̇|, rad/s."""
    acceleration: float
    """Largest |q̈|, rad/s²."""
    jerk: float
    """Largest |dq̈/dt|, rad/s³."""
    effort: float
    """Largest |τ|, N·m."""

    def __post_init__(self) -> None:
        _check_name(self.name)
        _require(self.lower < self.upper, "lower", f"lower limit {self.lower} must be below upper {self.upper}")
        for name in ("velocity", "acceleration", "jerk", "effort"):
            value = getattr(self, name)
            _require(value > 0, name, f"limit must be > 0, got {value}")


@dataclass(frozen=True)
class PusherSpec:
    """A rigid rod fixed to the flange along its z axis, ending in a hemispherical tip."""

    radius: float = 0.01
    """Rod radius, m."""
    length: float = 0.2
    """Distance from the flange to the centre of the tip hemisphere, m."""

    def __post_init__(self) -> None:
        _require(self.radius > 0, "radius", f"must be > 0, got {self.radius}")
        _require(self.length > 0, "length", f"must be > 0, got {self.length}")


@dataclass(frozen=True)
class RobotSpec:
    """The arm: which kinematic model, where its base stands, its joints in model order, its tool."""

    model: str
    """Kinematic model name, resolved by `realissim.assets` (e.g. "franka_panda")."""
    base: Pose
    """Pose of the robot base frame in the world."""
    joints: tuple[JointSpec, ...]
    """Joints in the model's order, with their limits."""
    home: tuple[float, ...]
    """Joint configuration (rad) the robot starts from, in joint order."""
    pusher: PusherSpec | None = None
    """Optional rod at the flange."""

    def __post_init__(self) -> None:
        _check_name(self.model, "model")
        _require(len(self.joints) > 0, "joints", "must list at least one joint")
        _check_unique((j.name for j in self.joints), "joints")
        _require(
            len(self.home) == len(self.joints),
            "home",
            f"must have one value per joint ({len(self.joints)}), got {len(self.home)}",
        )
        for i, (q, joint) in enumerate(zip(self.home, self.joints)):
            _require(joint.lower <= q <= joint.upper, f"home[{i}]", f"{q} outside [{joint.lower}, {joint.upper}]")

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Joint names in model order."""
        return tuple(j.name for j in self.joints)


@dataclass(frozen=True)
class SphereSetSpec:
    """Collision geometry as spheres: centres (N, 3) in the body frame, m, and radii (N,), m."""

    centers: tuple[Vec3, ...]
    radii: tuple[float, ...]

    def __post_init__(self) -> None:
        _require(len(self.centers) > 0, "centers", "must hold at least one sphere")
        _require(
            len(self.radii) == len(self.centers),
            "radii",
            f"must have one radius per centre ({len(self.centers)}), got {len(self.radii)}",
        )
        for i, r in enumerate(self.radii):
            _require(r > 0, f"radii[{i}]", f"radius must be > 0, got {r}")


@dataclass(frozen=True)
class BoxSpec:
    """An axis-aligned box in a body frame: centre `center` (3,), m, and half sizes `half` (3,), m, along the
    body's x, y and z axes."""

    center: Vec3
    """Centre of the box in the body frame, m."""
    half: Vec3
    """Half the box's extent along body x, y and z, m (each > 0)."""

    def __post_init__(self) -> None:
        _require(all(math.isfinite(c) for c in self.center), "center", f"must be finite, got {list(self.center)}")
        finite_positive = all(math.isfinite(h) and h > 0 for h in self.half)
        _require(finite_positive, "half", f"half sizes must be finite and > 0, got {list(self.half)}")

    @property
    def volume(self) -> float:
        """m³."""
        return 8.0 * self.half[0] * self.half[1] * self.half[2]


@dataclass(frozen=True)
class InertiaSpec:
    """Mass distribution: centre of mass (m, body frame) and inertia about it (kg·m², body axes)."""

    com: Vec3
    inertia: tuple[float, float, float, float, float, float]
    """[Ixx, Iyy, Izz, Ixy, Ixz, Iyz] about the centre of mass."""

    def __post_init__(self) -> None:
        ixx, iyy, izz, ixy, ixz, iyz = self.inertia
        mat = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
        with np.errstate(all="ignore"):
            eig = np.linalg.eigvalsh(mat) if np.all(np.isfinite(mat)) else np.array([np.nan])
        _require(bool(np.all(eig > 0)), "inertia", "must be positive definite")
        a, b, c = eig
        _require(bool(a + b >= c * (1 - 1e-9)), "inertia", "principal moments violate the triangle inequality")


@dataclass(frozen=True)
class GaussianSetSpec:
    """3D Gaussians in a body frame: means (N,3) m, quats (N,4) wxyz, scales (N,3) std-dev m,
    colors (N,3) RGB in [0,1], opacities (N,) in [0,1]."""

    means: tuple[Vec3, ...]
    quats: tuple[Quat, ...]
    scales: tuple[Vec3, ...]
    colors: tuple[Vec3, ...]
    opacities: tuple[float, ...]

    def __post_init__(self) -> None:
        n = len(self.means)
        _require(n > 0, "means", "must hold at least one Gaussian")
        for name in ("quats", "scales", "colors", "opacities"):
            count = len(getattr(self, name))
            _require(count == n, name, f"must have one entry per mean ({n}), got {count}")
        for i, q in enumerate(self.quats):
            _check_unit_quat(q, f"quats[{i}]")
        for i, s in enumerate(self.scales):
            _require(min(s) > 0, f"scales[{i}]", f"scales must be > 0, got {list(s)}")
        for i, c in enumerate(self.colors):
            _require(min(c) >= 0.0 and max(c) <= 1.0, f"colors[{i}]", f"must lie in [0, 1], got {list(c)}")
        for i, o in enumerate(self.opacities):
            _require(0.0 <= o <= 1.0, f"opacities[{i}]", f"must lie in [0, 1], got {o}")

    def arrays(self) -> dict[str, np.ndarray]:
        """The Gaussians as float64 arrays keyed by field name."""
        return {name: np.asarray(getattr(self, name), dtype=np.float64) for name in _GAUSSIAN_FIELDS}


_GAUSSIAN_FIELDS = ("means", "quats", "scales", "colors", "opacities")


@dataclass(frozen=True)
class ObjectSpec:
    """A rigid object: a free body with sphere collision geometry and, optionally, its exact shape as boxes.

    The twin collides on `spheres` whatever `boxes` says; `boxes` describes the true shape, for what draws the
    object (procedural Gaussians) and for a simulated real world that collides on it.
    """

    name: str
    pose: Pose
    """Initial pose of the body frame in the world."""
    mass: float
    """kg."""
    friction: float
    """Sliding (Coulomb) friction coefficient against anything it touches."""
    spheres: SphereSetSpec
    inertia: InertiaSpec | None = None
    """Centre of mass and inertia; if absent, uniform density over the spheres is assumed."""
    gaussians: GaussianSetSpec | str | None = None
    """Appearance: inline, or a path (relative to the scene file) to an .npz with the same keys."""
    color: Vec3 = (0.8, 0.3, 0.2)
    """Base RGB colour in [0, 1] for rasterised views."""
    boxes: tuple[BoxSpec, ...] | None = None
    """The object's exact shape as a union of axis-aligned boxes in its body frame (m; they may touch or
    overlap); None: its sphere set is its shape."""

    def __post_init__(self) -> None:
        _check_name(self.name)
        _require(self.mass > 0, "mass", f"must be > 0, got {self.mass}")
        _require(self.friction > 0, "friction", f"must be > 0, got {self.friction}")
        _require(min(self.color) >= 0.0 and max(self.color) <= 1.0, "color", "must lie in [0, 1]")
        if isinstance(self.gaussians, str):
            _require(bool(self.gaussians.strip()), "gaussians", "reference must be a non-empty path")
        _require(self.boxes is None or len(self.boxes) > 0, "boxes", "must hold at least one box (or be null)")


@dataclass(frozen=True)
class GroundSpec:
    """The table: the plane z = 0, with its friction and visible extent."""

    friction: float = 0.5
    """Sliding friction coefficient."""
    size: tuple[float, float] = (0.6, 0.6)
    """Half extents of the table top along world x and y, m (collision is the whole plane)."""
    gaussians: GaussianSetSpec | str | None = None
    color: Vec3 = (0.55, 0.45, 0.35)

    def __post_init__(self) -> None:
        _require(self.friction > 0, "friction", f"must be > 0, got {self.friction}")
        _require(min(self.size) > 0, "size", f"must be > 0, got {list(self.size)}")
        _require(min(self.color) >= 0.0 and max(self.color) <= 1.0, "color", "must lie in [0, 1]")


@dataclass(frozen=True)
class CameraSpec:
    """A pinhole camera: image size (px), intrinsics K (px) and pose X_WC (OpenCV axes)."""

    name: str
    width: int
    height: int
    K: tuple[Row3, Row3, Row3]
    """[[fx, s, cx], [0, fy, cy], [0, 0, 1]]; pixel (u, v) centres are at (u + 0.5, v + 0.5)."""
    X_WC: tuple[Row4, Row4, Row4, Row4]
    """Camera-to-world transform; camera x right, y down, z forward."""
    near: float = 0.01
    far: float = 10.0

    def __post_init__(self) -> None:
        _check_name(self.name)
        _require(self.width > 0, "width", f"must be > 0, got {self.width}")
        _require(self.height > 0, "height", f"must be > 0, got {self.height}")
        (fx, _, cx), (k10, fy, cy), (k20, k21, k22) = self.K
        _require(fx > 0 and fy > 0, "K", f"focal lengths must be > 0, got fx={fx}, fy={fy}")
        _require(k10 == 0 and k20 == 0 and k21 == 0 and k22 == 1, "K", "bottom rows must be [0, fy, cy], [0, 0, 1]")
        _require(0 < cx < self.width, "K", f"cx={cx} outside the image width {self.width}")
        _require(0 < cy < self.height, "K", f"cy={cy} outside the image height {self.height}")
        _require(0 < self.near < self.far, "near", f"need 0 < near < far, got {self.near}, {self.far}")
        self._check_pose()

    def _check_pose(self) -> None:
        mat = np.asarray(self.X_WC, dtype=np.float64)
        _require(bool(np.all(mat[3] == [0, 0, 0, 1])), "X_WC", "last row must be [0, 0, 0, 1]")
        rot = mat[:3, :3]
        with np.errstate(all="ignore"):
            err = float(np.max(np.abs(rot.T @ rot - np.eye(3))))
            det = float(np.linalg.det(rot)) if math.isfinite(err) else math.nan
        _require(err <= ROTATION_TOL and det > 0, "X_WC", "rotation must be orthonormal and right-handed")

    @property
    def K_array(self) -> np.ndarray:
        """K as a (3, 3) float64 array."""
        return np.asarray(self.K, dtype=np.float64)

    @property
    def X_WC_array(self) -> np.ndarray:
        """X_WC as a (4, 4) float64 array."""
        return np.asarray(self.X_WC, dtype=np.float64)

    def resized(self, width: int, height: int) -> CameraSpec:
        """The same camera imaging at `width`×`height` px: K scaled per axis (pixel centres at u + 0.5)."""
        sx, sy = width / self.width, height / self.height
        K = self.K_array * np.array([[sx], [sy], [1.0]])
        return replace(self, width=width, height=height, K=tuple(tuple(map(float, r)) for r in K))  # type: ignore[arg-type]


@dataclass(frozen=True)
class GoalSpec:
    """A target pose for a named object."""

    object: str
    pose: Pose


@dataclass(frozen=True)
class SceneSpec:
    """A whole scene. `version` is the file format version (currently 1)."""

    name: str
    robot: RobotSpec
    objects: tuple[ObjectSpec, ...] = ()
    ground: GroundSpec = field(default_factory=GroundSpec)
    cameras: tuple[CameraSpec, ...] = ()
    goals: tuple[GoalSpec, ...] = ()
    version: int = 1

    def __post_init__(self) -> None:
        _check_name(self.name)
        _require(self.version == 1, "version", f"unsupported scene format version {self.version} (expected 1)")
        _check_unique((o.name for o in self.objects), "objects")
        _check_unique((c.name for c in self.cameras), "cameras")
        names = {o.name for o in self.objects}
        for i, goal in enumerate(self.goals):
            _require(goal.object in names, f"goals[{i}].object", f"no object named {goal.object!r}")

    def object(self, name: str) -> ObjectSpec:
        """The object called `name`; KeyError if there is none."""
        for obj in self.objects:
            if obj.name == name:
                return obj
        raise KeyError(f"scene {self.name!r} has no object {name!r}")
