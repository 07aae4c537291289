"""Wrist-camera keypoints lifted onto the table: where in the world an image keypoint lies.

A wrist camera sees the object relative to the tip, and the camera moves with the arm: to act, a policy needs
the object's pose in the world (the goal is fixed there), which is the image position composed with the
camera's pose — the forward kinematics of the arm's joints q. Left to the network, that composition is learned
from data, and learned imprecisely (measured, docs/decisions.md "Flow policy": the auxiliary pose head of a
wrist policy read the T's position 8–13 mm wrong at the median, and the state policy given 10 mm of pose noise
fell from 33 to 8 of 50 on `pusht/select-v1`). Here it is computed instead: each image keypoint (pixel) is a
ray from the camera, which is intersected with the horizontal plane of the objects' top faces.

Nothing here is privileged: q is what the twin's arm holds (the policy already sees it), the camera's mount
and intrinsics are the virtual camera's own.

Frames and units: camera poses X_WC in the world frame, OpenCV axes (x right, y down, z forward), metres;
pixels (u, v) in the full image, K's convention (principal point at the image centre).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from realissim.assets.panda import FLANGE_SITE
from realissim.geometry import intrinsics_from_fov
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import ChainKinematics, robot_only_model
from realissim.views.virtual import WristMount

CAMERA_DIM = 12
"""Size of a camera pose vector: position (3) then the rotation matrix R_WC row by row (9)."""


class WristGeometry:
    """The wrist camera of `scene`'s robot at `size` = (width, height) px: its world pose from the arm's joints
    and its intrinsics; `plane` is the height (m, world z) keypoints are lifted to — the top face of the
    scene's first object at its start pose."""

    def __init__(self, scene: SceneSpec, size: tuple[int, int], mount: WristMount = WristMount()) -> None:
        model = robot_only_model(scene)
        self.joints = len(scene.robot.joints)
        if model.nq != self.joints:
            raise ValueError(f"wrist lift: the robot model has {model.nq} positions, not its {self.joints} joints")
        self.chain = ChainKinematics(model, FLANGE_SITE)
        X_FC = mount.X_FC()
        self.R_FC, self.p_FC = X_FC[:3, :3], X_FC[:3, 3]
        self.K = intrinsics_from_fov(int(size[0]), int(size[1]), mount.fovy)
        """(3, 3) intrinsics, px."""
        self.plane = _top_height(scene)

    def camera_poses(self, q: np.ndarray) -> np.ndarray:
        """(N, 12) float32 camera poses (see `CAMERA_DIM`) at joints q (N, J) rad."""
        q = np.asarray(q, dtype=np.float64)
        if q.ndim != 2 or q.shape[1] != self.joints:
            raise ValueError(f"wrist lift: q must be (N, {self.joints}), got {q.shape}")
        p_WF, R_WF = self.chain.forward(q)
        R_WC = R_WF @ self.R_FC
        p_WC = p_WF + R_WF @ self.p_FC
        return np.concatenate([p_WC, R_WC.reshape(len(q), 9)], axis=1).astype(np.float32)


def _top_height(scene: SceneSpec) -> float:
    """World z (m) of the first object's top face at its start pose (its centre when it has no spheres)."""
    if not scene.objects:
        return 0.0
    obj = scene.objects[0]
    z = float(obj.pose.pos[2])
    if obj.spheres is not None and len(obj.spheres.radii):
        z += max(c[2] + r for c, r in zip(obj.spheres.centers, obj.spheres.radii))
    return z


def lift_pixels(pixels: Tensor, camera: Tensor, K: Tensor, plane: float, reach: float = 2.0) -> Tensor:
    """World (x, y) (B, P, 2) m where the rays through `pixels` (B, P, 2) (u, v) px of cameras at `camera`
    (B, 12) poses meet the plane z = `plane`. A ray that points up or along the plane is cut at `reach` m
    (so every output is finite and the map stays differentiable); pixels may lie outside the image."""
    p = camera[:, :3]
    R = camera[:, 3:].reshape(-1, 3, 3)
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    d_c = torch.stack([(pixels[..., 0] - cx) / fx, (pixels[..., 1] - cy) / fy, torch.ones_like(pixels[..., 0])], -1)
    d_w = d_c @ R.transpose(1, 2)  # (B, P, 3): R d for each pixel
    dz = d_w[..., 2]
    height = (plane - p[:, 2])[:, None]  # (B, 1), negative: the camera is above the plane
    # Distance along the ray (in units of d_w): height / dz where the ray descends, else `reach`.
    down = dz < -1e-6
    t = torch.where(down, height / torch.where(down, dz, torch.full_like(dz, -1.0)), torch.full_like(dz, reach))
    t = t.clamp(0.0, reach)
    return p[:, None, :2] + t[..., None] * d_w[..., :2]
