"""The 3D part of the teleoperation page (viser scene, z up): the twin's meshes and the operator's target.

The twin is drawn from its collision geometry (`meshes.body_meshes`): one frame node per body, moved to
the body's world pose on every update, with its meshes fixed under it; each goal as a translucent ghost of
its object. The target is a viser transform
gizmo restricted to translation on the table plane (the x/y arrows and the xy square; no rotation, no
z): dragging it sets the pusher tip's target, held at the push height and inside the table's extent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import mujoco
import numpy as np
import viser

from realissim.spec.scene import CameraSpec, SceneSpec
from realissim.teleop.meshes import body_meshes
from realissim.views.virtual import body_poses

log = logging.getLogger(__name__)

TARGET_NODE = "/target"
"""Scene node name of the target gizmo."""
GIZMO_SCALE = 0.15
"""Size of the target gizmo, m: the x/y arrows are this long; the xy square sits near its origin."""
GOAL_OPACITY = 0.3
"""Opacity of each goal's ghost: its object's meshes at the goal pose."""
SHOWN_TOLERANCE = 1e-5
"""A body whose position (m) and quaternion moved less than this since it was last sent is not sent again."""
MARKER_RADIUS = 0.012
"""Radius of the sphere marking the target, m."""


def camera_view(camera: CameraSpec) -> tuple[np.ndarray, np.ndarray, float]:
    """A viewer camera matching a scene camera: eye (3,) m, look-at point (3,) m — where its optical axis
    meets the table plane z = 0 (1 m ahead if it does not) — and vertical field of view, rad."""
    X_WC = camera.X_WC_array
    eye, axis = X_WC[:3, 3], X_WC[:3, 2]
    depth = -eye[2] / axis[2] if axis[2] < -1e-6 else 1.0
    fovy = 2.0 * float(np.arctan(0.5 * camera.height / camera.K[1][1]))
    return eye, eye + depth * axis, fovy


def clamp_to_table(point: np.ndarray, scene: SceneSpec, height: float, margin: float) -> np.ndarray:
    """`point` (3,) m moved onto the plane z = `height`, inside the table's extent less `margin` m."""
    half = np.asarray(scene.ground.size, dtype=np.float64) - margin
    xy = np.clip(np.asarray(point, dtype=np.float64)[:2], -half, half)
    return np.array([xy[0], xy[1], height])


class TwinScene:
    """The twin's bodies and the target gizmo in a viser scene."""

    def __init__(self, server: viser.ViserServer, scene: SceneSpec, model: mujoco.MjModel, camera: CameraSpec) -> None:
        """Meshes of `model` (the twin's), a gizmo on the table of `scene`, the initial view from `camera`."""
        self.server, self.scene, self.model = server, scene, model
        server.scene.set_up_direction("+z")
        eye, look_at, fovy = camera_view(camera)
        server.initial_camera.position = tuple(eye)
        server.initial_camera.look_at = tuple(look_at)
        server.initial_camera.fov = fovy
        # Shadow maps make software-rendered WebGL (a browser without a GPU) crawl; the tip's height is fixed.
        server.scene.configure_default_lights(cast_shadow=False)
        meshes = body_meshes(model)
        self._frames: dict[int, viser.FrameHandle] = {}
        self._shown: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for mesh in meshes:
            body = model.body(mesh.body).name or "world"
            if mesh.body not in self._frames:
                self._frames[mesh.body] = server.scene.add_frame(f"/twin/{body}", show_axes=False)
            server.scene.add_mesh_simple(f"/twin/{body}/{mesh.name}", mesh.vertices, mesh.faces, color=mesh.color)
        for goal in scene.goals:
            body = model.body(goal.object).id
            server.scene.add_frame(f"/goal/{goal.object}", show_axes=False, position=goal.pose.pos, wxyz=goal.pose.quat)
            for mesh in (m for m in meshes if m.body == body):
                server.scene.add_mesh_simple(f"/goal/{goal.object}/{mesh.name}", mesh.vertices, mesh.faces,
                                             color=mesh.color, opacity=GOAL_OPACITY)  # fmt: skip
        self.gizmo = server.scene.add_transform_controls(
            TARGET_NODE,
            scale=GIZMO_SCALE,
            active_axes=(True, True, False),
            disable_rotations=True,
            depth_test=False,
        )
        server.scene.add_icosphere(f"{TARGET_NODE}/marker", radius=MARKER_RADIUS, color=(255, 200, 0))

    def show_twin(self, qpos: np.ndarray) -> None:
        """Move each body's node to its pose for the twin's MuJoCo positions `qpos` (nq,); bodies that did not
        move are not sent (every pose is a message to every browser)."""
        xpos, xquat = body_poses(self.model, qpos[None])
        moved = [b for b in self._frames if not _same_pose(self._shown.get(b), xpos[0, b], xquat[0, b])]
        if not moved:
            return
        with self.server.atomic():
            for body in moved:
                self._frames[body].position = xpos[0, body]
                self._frames[body].wxyz = xquat[0, body]
                self._shown[body] = (xpos[0, body].copy(), xquat[0, body].copy())

    def place_target(self, point: np.ndarray) -> None:
        """Put the gizmo at `point` (3,) m (e.g. over the tip after a reset)."""
        self.gizmo.position = np.asarray(point, dtype=np.float64)

    def on_drag(self, accept: Callable[[np.ndarray], np.ndarray]) -> None:
        """Call `accept(position (3,) m)` while the gizmo is dragged; it returns the target it accepted, and the
        gizmo is put there at release (the browser may have dragged it off the allowed region)."""

        def handle(event: viser.TransformControlsEvent) -> None:
            accepted = accept(np.asarray(event.target.position, dtype=np.float64))
            if event.phase == "end" and not np.allclose(accepted, event.target.position, atol=1e-6):
                event.target.position = accepted

        self.gizmo.on_update(handle)


def _same_pose(shown: tuple[np.ndarray, np.ndarray] | None, pos: np.ndarray, quat: np.ndarray) -> bool:
    return shown is not None and bool(
        np.allclose(shown[0], pos, rtol=0.0, atol=SHOWN_TOLERANCE)
        and np.allclose(shown[1], quat, rtol=0.0, atol=SHOWN_TOLERANCE)
    )
