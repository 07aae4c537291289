"""Virtual camera images of recorded twin states: the joints and object poses of stored frames put back into
the twin's MuJoCo positions, body poses by forward kinematics, and `VirtualCameras` — the renderer an
environment uses at deployment, so a recorded frame's image equals what a policy would have seen then."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from realissim.data.schema import DatasetMeta
from realissim.twin.physics import PhysicsConfig, build_model
from realissim.twin.state import TwinLayout
from realissim.views.virtual import VirtualCameras, body_poses

RENDER_BATCH = 32
"""Frames rendered per `VirtualCameras.render_batch` call."""


class StateRenderer:
    """Renders `cameras` (scene camera names, "wrist") at `size` (width, height) px for a dataset's scene."""

    def __init__(self, meta: DatasetMeta, cameras: Sequence[str], size: tuple[int, int]) -> None:
        if not cameras:
            raise ValueError("StateRenderer: need at least one camera")
        self.cameras, self.size = tuple(cameras), size
        self.model = build_model(meta.scene, PhysicsConfig())
        self.layout = TwinLayout.from_model(self.model, meta.joint_names, meta.object_names)
        self.renderer = VirtualCameras(meta.scene, self.model, self.cameras, size)

    def render(
        self, q: np.ndarray, object_pos: np.ndarray, object_quat: np.ndarray, batch: int = RENDER_BATCH
    ) -> Iterator[dict[str, np.ndarray]]:
        """Images uint8 (b, H, W, 3) RGB per camera for frames with joints q (n, J) rad, object positions
        (n, K, 3) m and quaternions (n, K, 4) wxyz, in order, `batch` frames at a time."""
        n = len(q)
        qpos = np.tile(self.model.qpos0, (n, 1))
        qpos[:, self.layout.robot_qpos] = q
        qpos[:, self.layout.object_qpos[:, :3]] = object_pos
        qpos[:, self.layout.object_qpos[:, 3:]] = object_quat / np.linalg.norm(object_quat, axis=-1, keepdims=True)
        for b in range(0, n, batch):
            yield self.renderer.render_batch(*body_poses(self.model, qpos[b : b + batch]))
