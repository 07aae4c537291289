"""Refine the cameras' poses from one image each of a fully known scene (the start state).

The twin is told each camera's pose; the real one differs by a small calibration error, which biases
every visual correction. At the start the whole scene is known (arm at its encoders, objects at their
start poses, the table), so each camera's pose correction Δ (rotation vector and translation in the
camera frame, X_WC ← X_WC · Δ) can be found by minimising the photometric error of that camera alone.
Rendering through X_WC · Δ equals rendering the Gaussians moved by X_WC · Δ⁻¹ · X_WC⁻¹ through X_WC,
so only Gaussian gradients are needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from realissim.render import rasterize
from realissim.render.gaussians import Gaussians, quat_multiply
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CameraRefineConfig:
    """Camera pose refinement."""

    steps: int = 60
    """Adam steps per camera."""
    lr_rotation: float = 2e-3
    """rad."""
    lr_translation: float = 2e-3
    """m."""
    intrinsics: bool = False
    """Also refine each camera's focal scale and principal point (by warping the real image onto the told
    intrinsics; `views` then renders with the refined K)."""
    lr_focal: float = 1e-3
    """Focal scale (relative)."""
    lr_principal: float = 0.05
    """Principal point, px."""


def _rotvec_matrix(r: Tensor) -> Tensor:
    """Rotation matrix (3,3) of a rotation vector (3,) (Rodrigues, differentiable, safe at 0)."""
    theta2 = (r * r).sum()
    K = torch.zeros(3, 3, dtype=r.dtype)
    K = K.index_put((torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([1, 2, 0, 2, 0, 1])),
                    torch.stack([-r[2], r[1], r[2], -r[0], -r[1], r[0]]))  # fmt: skip
    # Series for small angles: sin θ/θ ≈ 1 − θ²/6, (1 − cos θ)/θ² ≈ 1/2 − θ²/24.
    return torch.eye(3, dtype=r.dtype) + (1 - theta2 / 6) * K + (0.5 - theta2 / 24) * (K @ K)


def _matrix_quat(R: Tensor) -> Tensor:
    """Quaternion wxyz (4,) of a rotation matrix near the identity (differentiable)."""
    w = torch.sqrt(torch.clamp(1 + R[0, 0] + R[1, 1] + R[2, 2], min=1e-12)) / 2
    return torch.stack([w, (R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w), (R[1, 0] - R[0, 1]) / (4 * w)])


def refine_cameras(
    views: TwinViews,
    xpos: np.ndarray,
    xquat: np.ndarray,
    images: Tensor,
    config: CameraRefineConfig = CameraRefineConfig(),
    only: list[int] | None = None,
) -> np.ndarray:
    """Correct every camera's pose in `views` (or the cameras numbered in `only`) from real images (C,H,W,3)
    (uint8 or float in [0, 1]) of the scene at body poses xpos, xquat; updates `views` in place and returns the
    corrections (C,6): rotation vector (rad) and translation (m), in each camera's frame (zero for cameras left
    out)."""
    target = images.to(torch.float32) / 255.0 if images.dtype == torch.uint8 else images.to(torch.float32)
    g = views.moving(xpos, xquat)
    scene = Gaussians(*(torch.cat([a, b]).detach() for a, b in zip(g.args(), views.static.args())))
    out = np.zeros((len(views.cameras), 6))
    new_poses = views.X_WCs.clone()
    new_Ks = views.Ks.clone()
    for c in range(len(views.cameras)):
        if only is not None and c not in only:
            continue
        X = views.X_WCs[c].to(torch.float32)
        background = views.background[c : c + 1] if views.background.ndim == 2 else views.background
        rot = torch.zeros(3, requires_grad=True)
        trans = torch.zeros(3, requires_grad=True)
        focal = torch.zeros(1, requires_grad=True)  # log of the real focal length over the told one
        principal = torch.zeros(2, requires_grad=True)  # real principal point minus the told one, px
        groups = [{"params": [rot], "lr": config.lr_rotation}, {"params": [trans], "lr": config.lr_translation}]
        if config.intrinsics:
            groups += [{"params": [focal], "lr": config.lr_focal}, {"params": [principal], "lr": config.lr_principal}]
        optimiser = torch.optim.Adam(groups)
        K = views.Ks[c].to(torch.float32)
        losses = []
        for step in range(config.steps + 1):
            with torch.set_grad_enabled(step < config.steps):
                # Move the Gaussians by M = X · Δ⁻¹ · X⁻¹, Δ = [R(rot) | trans].
                R_inv = _rotvec_matrix(rot).T
                M_R = X[:3, :3] @ R_inv @ X[:3, :3].T
                M_t = X[:3, 3] - M_R @ X[:3, 3] - X[:3, :3] @ (R_inv @ trans)
                means = scene.means @ M_R.T + M_t
                quats = quat_multiply(_matrix_quat(M_R).expand(len(scene), 4), scene.quats)
                rgb, _, _ = rasterize(
                    means, quats, scene.scales, scene.colors, scene.opacities, views.Ks[c : c + 1], X[None],
                    views.width, views.height, background, views.backend, eps2d=views.eps2d,
                )  # fmt: skip
                seen = _warp(target[c], K, focal.exp(), principal) if config.intrinsics else target[c]
                loss = ((rgb[0] - seen) ** 2).mean()
            losses.append(float(loss.detach()))
            if step == config.steps:
                break
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        delta = torch.eye(4)
        delta[:3, :3] = _rotvec_matrix(rot.detach())
        delta[:3, 3] = trans.detach()
        new_poses[c] = X @ delta
        if config.intrinsics:
            scale = float(focal.detach().exp())
            new_Ks[c, :2, :2] *= scale
            new_Ks[c, :2, 2] += principal.detach().to(new_Ks.dtype)
            log.info("camera %s: focal ×%.4f, principal point %+.2f, %+.2f px", views.cameras[c].name, scale,
                     *principal.detach().tolist())  # fmt: skip
        out[c] = np.concatenate([rot.detach().numpy(), trans.detach().numpy()])
        log.info(
            "camera %s: pose corrected by %.2f mrad, %.1f mm (loss %.5f → %.5f)", views.cameras[c].name,
            1e3 * float(rot.detach().norm()), 1e3 * float(trans.detach().norm()), losses[0], losses[-1],
        )  # fmt: skip
    views.set_cameras(X_WCs=new_poses, Ks=new_Ks if config.intrinsics else None)
    return out


def _warp(image: Tensor, K: Tensor, scale: Tensor, principal: Tensor) -> Tensor:
    """The real image (H,W,3), taken with focal lengths `scale`·(fx, fy) and principal point (cx, cy) +
    `principal` px, resampled (bilinear) onto the told intrinsics K (3,3): pixel centre u of the result
    samples the real image at scale·(u − cx) + cx + principal_x (likewise v)."""
    h, w = image.shape[:2]
    u = torch.arange(w, dtype=image.dtype) + 0.5
    v = torch.arange(h, dtype=image.dtype) + 0.5
    u_real = scale * (u - K[0, 2]) + K[0, 2] + principal[0]
    v_real = scale * (v - K[1, 2]) + K[1, 2] + principal[1]
    gx = (2 * u_real / w - 1)[None, :].expand(h, w)
    gy = (2 * v_real / h - 1)[:, None].expand(h, w)
    grid = torch.stack([gx, gy], dim=-1)[None]
    out = torch.nn.functional.grid_sample(
        image.permute(2, 0, 1)[None], grid, mode="bilinear", padding_mode="border", align_corners=False
    )
    return out[0].permute(1, 2, 0)
