"""The twin seen through cameras: its bodies' Gaussians rendered with the differentiable rasteriser.

`TwinViews` renders any set of pinhole cameras (the scene's, which stand for the real ones, or
virtual cameras placed anywhere) from MuJoCo body poses. The ground never moves, so on CPU it is
pre-rendered once per camera set as a static layer and each frame rasterises only the objects and
the robot; on CUDA (gsplat) everything is rasterised every frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import mujoco
import numpy as np
import torch
from torch import Tensor

from realissim.assets.appearance import AppearanceConfig
from realissim.render import Backend, StaticLayer, rasterize, render_static, resolve_backend
from realissim.render.gaussians import Gaussians, place
from realissim.spec.scene import CameraSpec, SceneSpec
from realissim.twin.appearance import SceneAppearance

DEFAULT_BACKGROUND = (0.12, 0.12, 0.14)
"""RGB behind everything (beyond the table)."""


class TwinViews:
    """Render a twin's Gaussians into pinhole cameras of one size."""

    def __init__(
        self,
        scene: SceneSpec,
        model: mujoco.MjModel,
        cameras: Sequence[CameraSpec] | None = None,
        backend: Backend = "auto",
        appearance: AppearanceConfig = AppearanceConfig(),
        base_dir: str | Path | None = None,
        device: str = "cpu",
    ) -> None:
        """`cameras` default to the scene's; all must share one image size. Gaussians come from the scene
        (or procedural, see `realissim.assets.appearance`)."""
        cams = tuple(cameras if cameras is not None else scene.cameras)
        if not cams:
            raise ValueError("cameras: the scene has none and none were given")
        sizes = {(c.width, c.height) for c in cams}
        if len(sizes) != 1:
            raise ValueError(f"cameras: all must share one image size, got {sorted(sizes)}")
        self.cameras = cams
        self.width, self.height = sizes.pop()
        self.device = torch.device(device)
        self.backend = resolve_backend(backend, self.device.type)
        self.appearance = SceneAppearance.from_scene(scene, model, base_dir=base_dir, config=appearance)
        f32 = torch.float32
        self.Ks = torch.tensor(np.stack([c.K_array for c in cams]), dtype=f32, device=self.device)
        self.X_WCs = torch.tensor(np.stack([c.X_WC_array for c in cams]), dtype=f32, device=self.device)
        self.background = torch.tensor(DEFAULT_BACKGROUND, dtype=f32, device=self.device)
        local = Gaussians.from_arrays(self.appearance.local).select(torch.tensor(~self.appearance.static))
        self.local = Gaussians(*(t.to(self.device) for t in local.args()))
        self.body_index = torch.tensor(self.appearance.body_index[~self.appearance.static], device=self.device)
        self.object_mask = torch.tensor(self.appearance.objects[~self.appearance.static], device=self.device)
        """(M,) bool over the moving Gaussians: those of the scene's objects (the rest are the robot's)."""
        rest = self.appearance.world(np.zeros((model.nbody, 3)), _identity(model.nbody), subset=self.appearance.static)
        self.static = Gaussians(*(t.to(self.device) for t in Gaussians.from_arrays(rest).args()))
        self.static_layer: StaticLayer | None = None
        """The ground pre-rendered into every camera (None on the gsplat backend: rendered each frame)."""
        self._render_static_layer()

    def _render_static_layer(self) -> None:
        if self.backend != "gsplat":
            self.static_layer = render_static(
                *self.static.args(), self.Ks, self.X_WCs, self.width, self.height, self.backend
            )

    def set_camera_poses(self, X_WCs: Tensor) -> None:
        """Replace the camera-to-world poses (C,4,4) (e.g. after calibration); re-renders the static layer."""
        if tuple(X_WCs.shape) != tuple(self.X_WCs.shape):
            raise ValueError(f"X_WCs: expected shape {tuple(self.X_WCs.shape)}, got {tuple(X_WCs.shape)}")
        self.X_WCs = X_WCs.detach().to(self.X_WCs)
        self._render_static_layer()

    def set_colors(self, moving: Tensor, static: Tensor, background: Tensor) -> None:
        """Replace the colours of the moving (M,3) and static (S,3) Gaussians and the background (3,) or (C,3)
        (all RGB in [0, 1]); re-renders the static layer."""
        self.local = Gaussians(
            self.local.means, self.local.quats, self.local.scales, moving.detach(), self.local.opacities
        )
        self.static = Gaussians(
            self.static.means, self.static.quats, self.static.scales, static.detach(), self.static.opacities
        )
        self.background = background.detach()
        self._render_static_layer()

    def moving(self, xpos: np.ndarray, xquat: np.ndarray) -> Gaussians:
        """World-frame Gaussians of everything that moves, for body poses (nbody,3) m and (nbody,4) wxyz."""
        pos = torch.as_tensor(np.asarray(xpos), dtype=torch.float32, device=self.device)
        quat = torch.as_tensor(np.asarray(xquat), dtype=torch.float32, device=self.device)
        means, quats = place(self.local.means, self.local.quats, self.body_index, pos, quat)
        return Gaussians(means, quats, self.local.scales, self.local.colors, self.local.opacities)

    def render(self, data: mujoco.MjData) -> tuple[Tensor, Tensor, Tensor]:
        """rgb (C,H,W,3), alpha (C,H,W), depth (C,H,W) m of the twin in `data` (body poses must be current)."""
        g = self.moving(data.xpos, data.xquat)
        if self.static_layer is None:
            g = Gaussians(*(torch.cat([a, b]) for a, b in zip(g.args(), self.static.args())))
        with torch.no_grad():
            return rasterize(
                *g.args(),
                self.Ks,
                self.X_WCs,
                self.width,
                self.height,
                self.background,
                self.backend,
                static=self.static_layer,
            )


def _identity(n: int) -> np.ndarray:
    q = np.zeros((n, 4))
    q[:, 0] = 1.0
    return q
