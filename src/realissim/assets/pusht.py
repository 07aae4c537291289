"""The PushT T-block (exact boxes and a sphere-set approximation) and the PushT scene preset."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from realissim.assets.mass import box_union_inertia
from realissim.assets.panda import panda_robot_spec
from realissim.geometry import intrinsics_from_fov, look_at, yaw_quat
from realissim.spec.scene import (
    BoxSpec,
    CameraSpec,
    GoalSpec,
    GroundSpec,
    InertiaSpec,
    ObjectSpec,
    Pose,
    PusherSpec,
    SceneSpec,
    SphereSetSpec,
)

T_NAME = "tblock"


Box = BoxSpec
"""An axis-aligned box in a body frame: centre (3,) and half sizes (3,), m (the scene's `BoxSpec`)."""


@dataclass(frozen=True)
class TBlock:
    """The T: a top bar along body x and a stem along body −y, extruded along z.

    Body frame: origin at the centre of mass (mid-height), x along the bar, +y from the stem towards
    the bar, z up. Resting on the table, the body origin is at z = height / 2.
    """

    bar_length: float = 0.20
    bar_width: float = 0.05
    stem_width: float = 0.05
    stem_length: float = 0.15
    height: float = 0.035

    def _com_y(self) -> float:
        bar_area = self.bar_length * self.bar_width
        stem_area = self.stem_width * self.stem_length
        # In a frame with the bar/stem junction at y = 0, before shifting the origin to the COM.
        return (bar_area * self.bar_width / 2 - stem_area * self.stem_length / 2) / (bar_area + stem_area)

    def boxes(self) -> tuple[Box, Box]:
        """The exact shape as two non-overlapping boxes (bar, stem) in the body frame."""
        shift = -self._com_y()
        h = self.height / 2
        bar = Box((0.0, self.bar_width / 2 + shift, 0.0), (self.bar_length / 2, self.bar_width / 2, h))
        stem = Box((0.0, -self.stem_length / 2 + shift, 0.0), (self.stem_width / 2, self.stem_length / 2, h))
        return bar, stem

    @property
    def volume(self) -> float:
        """m³."""
        return sum(b.volume for b in self.boxes())

    def inertia(self, mass: float) -> InertiaSpec:
        """Exact centre of mass and inertia about it, for uniform density and total `mass` kg.

        The centre of mass is the body origin by construction, so it is given as exactly (0, 0, 0); the
        inertia is `box_union_inertia` of the boxes (whose computed centre differs from 0 only by rounding).
        """
        return InertiaSpec(com=(0.0, 0.0, 0.0), inertia=box_union_inertia(self.boxes(), mass).inertia)

    def contains(self, points: ArrayLike) -> np.ndarray:
        """Whether body-frame points (N, 3) lie inside the exact shape; bool (N,)."""
        p = np.asarray(points, dtype=np.float64)
        inside = np.zeros(len(p), dtype=bool)
        for box in self.boxes():
            inside |= np.all(np.abs(p - box.center) <= np.asarray(box.half) + 1e-12, axis=1)
        return inside

    def distance(self, points: ArrayLike) -> np.ndarray:
        """Planar distance (...) m from body-frame points (..., 2) to the footprint (0 inside)."""
        p = np.asarray(points, dtype=np.float64)
        out = np.full(p.shape[:-1], np.inf)
        for box in self.boxes():
            gap = np.maximum(np.abs(p - np.asarray(box.center[:2])) - np.asarray(box.half[:2]), 0.0)
            out = np.minimum(out, np.linalg.norm(gap, axis=-1))
        return out

    def spheres(self, radius: float, spacing: float | None = None) -> SphereSetSpec:
        """Spheres of one `radius` (m) filling the T, each ball inside the exact shape.

        Centres lie on grids inset by `radius` from the outer faces, at most `spacing` apart (default:
        `radius`, so the surface between two neighbours sags by at most 0.14·radius). `radius` must not
        exceed half the height, so the set rests at the same height as the exact T.
        """
        if not 0 < radius <= self.height / 2 + 1e-12:
            raise ValueError(f"sphere radius must be in (0, {self.height / 2}] m, got {radius}")
        spacing = radius if spacing is None else spacing
        if spacing <= 0:
            raise ValueError(f"sphere spacing must be > 0, got {spacing}")
        bar, stem = self.boxes()
        top = bar.center[1] + bar.half[1]
        # The stem continues through the bar for filling, so the junction is filled without a seam.
        stem_full = Box(
            (0.0, (stem.center[1] - stem.half[1] + top) / 2, 0.0),
            (stem.half[0], (top - stem.center[1] + stem.half[1]) / 2, stem.half[2]),
        )
        grids = []
        for box in (bar, stem_full):
            axes = [_inset_grid(c, h, radius, spacing) for c, h in zip(box.center, box.half)]
            grids.append(np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3))
        bar_pts, stem_pts = grids
        # Drop stem centres that duplicate bar centres where the two grids overlap.
        gap = np.min(np.linalg.norm(stem_pts[:, None] - bar_pts[None], axis=2), axis=1)
        centers = np.concatenate([bar_pts, stem_pts[gap > 0.5 * spacing]])
        pts = tuple(tuple(float(v) for v in p) for p in centers)
        return SphereSetSpec(centers=pts, radii=(float(radius),) * len(pts))  # type: ignore[arg-type]


def _inset_grid(center: float, half: float, radius: float, spacing: float) -> np.ndarray:
    extent = 2 * (half - radius)
    if extent <= 1e-12:
        return np.array([center])
    n = math.ceil(extent / spacing - 1e-9) + 1
    return np.linspace(center - extent / 2, center + extent / 2, n)


@dataclass(frozen=True)
class PushTConfig:
    """Parameters of the PushT scene preset."""

    sphere_radius: float = 0.0175
    """Radius of the T's collision spheres, m (at most half the T's height)."""
    sphere_spacing: float | None = None
    """Largest distance between neighbouring sphere centres, m (default: the radius)."""
    t_mass: float = 0.25
    """kg (a 3D-printed T of this size)."""
    t_friction: float = 0.5
    table_friction: float = 0.5
    camera_width: int = 480
    camera_height: int = 270
    camera_fovy: float = math.radians(50.0)
    """Vertical field of view of each camera, rad."""
    pusher_length: float = 0.2
    pusher_radius: float = 0.01


WORKSPACE_CENTER = (0.0, 0.0)
WORKSPACE_HALF = 0.25
"""The T is kept within a 0.5 × 0.5 m square centred on WORKSPACE_CENTER (world x, y)."""
ROBOT_BASE = (-0.5, 0.0, 0.0)
"""Robot base on the table, facing +x towards the workspace."""
PUSHER_HOME = (-0.0071, -0.1693, 0.0074, -2.7145, 0.0022, 2.5452, 0.6942)
"""Start configuration: rod vertical, tip centre at PUSHER_HOME_TIP (solved by inverse kinematics)."""
PUSHER_HOME_TIP = (-0.1, 0.0, 0.08)
START_POSE = Pose((0.0, -0.15, 0.0175), yaw_quat(0.0))
GOAL_POSE = Pose((0.0, 0.0, 0.0175), yaw_quat(math.pi / 4))
CAMERA_EYES = ((0.75, 0.0, 0.85), (-0.35, 0.8, 0.8), (-0.35, -0.8, 0.8))
"""Three cameras around the table (front, left, right of the workspace seen from the robot)."""


def pusht_cameras(width: int, height: int, fovy: float) -> tuple[CameraSpec, ...]:
    """The three fixed PushT cameras, looking at the workspace centre, `width`×`height` px."""
    K = intrinsics_from_fov(width, height, fovy)
    cams = []
    for name, eye in zip(("front", "left", "right"), CAMERA_EYES):
        X_WC = look_at(eye, (*WORKSPACE_CENTER, 0.0))
        cams.append(
            CameraSpec(
                name=name,
                width=width,
                height=height,
                K=tuple(tuple(float(v) for v in row) for row in K),  # type: ignore[arg-type]
                X_WC=tuple(tuple(float(v) for v in row) for row in X_WC),  # type: ignore[arg-type]
            )
        )
    return tuple(cams)


def pusht_scene(config: PushTConfig = PushTConfig()) -> SceneSpec:
    """The PushT scene: table, Panda with pusher rod, the T at its start pose, goal, three cameras."""
    t = TBlock()
    robot = panda_robot_spec(
        base=Pose(ROBOT_BASE, (1.0, 0.0, 0.0, 0.0)),
        home=PUSHER_HOME,
        pusher=PusherSpec(radius=config.pusher_radius, length=config.pusher_length),
    )
    block = ObjectSpec(
        name=T_NAME,
        pose=Pose(START_POSE.pos, START_POSE.quat),
        mass=config.t_mass,
        friction=config.t_friction,
        spheres=t.spheres(config.sphere_radius, config.sphere_spacing),
        inertia=t.inertia(config.t_mass),
        color=(0.85, 0.25, 0.2),
        boxes=t.boxes(),
    )
    return SceneSpec(
        name="pusht",
        robot=robot,
        objects=(block,),
        ground=GroundSpec(friction=config.table_friction, size=(0.8, 0.6)),
        cameras=pusht_cameras(config.camera_width, config.camera_height, config.camera_fovy),
        goals=(GoalSpec(object=T_NAME, pose=GOAL_POSE),),
    )
