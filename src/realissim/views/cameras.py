"""The twin seen through cameras: its bodies' Gaussians rendered with the differentiable rasteriser.

`TwinViews` renders any set of pinhole cameras (the scene's, which stand for the real ones, or
virtual cameras placed anywhere) from MuJoCo body poses. The ground never moves, so on CPU it is
pre-rendered once per camera set as a static layer and each frame rasterises only the objects and
the robot; on CUDA (gsplat) everything is rasterised every frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
import torch
from torch import Tensor

from realissim.assets.appearance import AppearanceConfig
from realissim.render import Backend, StaticLayer, rasterize, render_static, resolve_backend
from realissim.render.common import EPS2D, may_cover
from realissim.render.gaussians import Gaussians, place
from realissim.spec.scene import CameraSpec, SceneSpec
from realissim.views.appearance import SceneAppearance
from realissim.views.shadows import ShadowCaster, ShadowFitConfig, ShadowLight, fit_shadow_light

DEFAULT_BACKGROUND = (0.12, 0.12, 0.14)
"""RGB behind everything (beyond the table)."""


@dataclass(frozen=True)
class ViewWindow:
    """A width × height px window of every camera's image, camera c's starting at pixel (x0[c], y0[c]):
    rendering with `Ks` (principal points moved by −x0, −y0) and `static_layer` gives exactly those pixels
    of the full render."""

    x0: tuple[int, ...]
    y0: tuple[int, ...]
    width: int
    height: int
    Ks: Tensor
    X_WCs: Tensor
    static_layer: StaticLayer | None

    def touches(self, means: Tensor, extent: Tensor) -> Tensor:
        """(N,) bool: which Gaussians (world means (N,3) m, extent (N,) m, e.g. 3× their largest scale) may
        cover a pixel of the window in some camera (conservative: a bounding circle of the projected extent);
        the others cannot change the window's render."""
        return may_cover(means, extent, self.Ks, self.X_WCs, self.width, self.height)

    def select(self, cameras: Sequence[int]) -> ViewWindow:
        """The window in some cameras only, in the order given (images cut by it must be selected alike)."""
        index = list(cameras)
        layer = None if self.static_layer is None else self.static_layer.select(index)
        return ViewWindow(tuple(self.x0[c] for c in index), tuple(self.y0[c] for c in index), self.width,
                          self.height, self.Ks[index], self.X_WCs[index], layer)  # fmt: skip

    def cut(self, images: Tensor) -> Tensor:
        """The window of full-size images (C,H,W,...) → (C,height,width,...)."""
        return torch.stack(
            [images[c, y : y + self.height, x : x + self.width] for c, (x, y) in enumerate(zip(self.x0, self.y0))]
        )


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
        eps2d: float = EPS2D,
    ) -> None:
        """`cameras` default to the scene's; all must share one image size. Gaussians come from the scene
        (or procedural, see `realissim.assets.appearance`). `eps2d` px² is the renderer's low-pass on every projected
        Gaussian in these views (`render.rasterize`), here and wherever the twin renders into them."""
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
        self.eps2d = float(eps2d)
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
        """The ground pre-rendered into every camera (None on the gsplat backend: rendered each frame), shaded by
        the last `cast_shadows` where a shadow light is set."""
        self._lit_layer: StaticLayer | None = None
        """The ground layer without shadows."""
        self.shadow: ShadowCaster | None = None
        """The key light's shadows (`set_shadow`; None: none rendered)."""
        self.shadow_cover: Tensor | None = None
        """(C,H,W): the table's shadow coverage per pixel cast by the last `cast_shadows` (None: none cast)."""
        self._cast_at: tuple[np.ndarray, np.ndarray] | None = None
        """The body poses of the last `cast_shadows`."""
        self._shaded: tuple[tuple[np.ndarray, np.ndarray], Tensor] | None = None
        """The body poses of the last shading of the objects' colours in `moving`, and its factors (M,3)."""
        reach = np.zeros(model.nbody)
        np.maximum.at(reach, self.appearance.body_index, np.linalg.norm(self.appearance.local.means, axis=1))
        self._reach = reach
        """(nbody,) m: each body's farthest Gaussian from its origin."""
        self._render_static_layer()

    def _render_static_layer(self) -> None:
        if self.backend != "gsplat":
            self._lit_layer = render_static(
                *self.static.args(), self.Ks, self.X_WCs, self.width, self.height, self.backend, eps2d=self.eps2d
            )
            self.static_layer = self._lit_layer
        self._cast_at = None

    def set_shadow(self, light: ShadowLight | None) -> None:
        """Render `light`'s shadows from now on (None: none): on the objects' Gaussians in `moving`, and on the
        ground from the next `cast_shadows`. On the gsplat backend (no ground layer) only the objects are shaded."""
        self.shadow = None if light is None else ShadowCaster(self.local, self.body_index, self.object_mask, light)
        self.static_layer = self._lit_layer
        self.shadow_cover = None
        self._cast_at = None
        self._shaded = None

    def fit_shadow(
        self, xpos: np.ndarray, xquat: np.ndarray, images: Tensor, config: ShadowFitConfig = ShadowFitConfig()
    ) -> ShadowLight | None:
        """Fit the key light's shadow to real images (C,H,W,3) (uint8 or float in [0, 1]) of the moving bodies at
        poses xpos (nbody,3) m, xquat (nbody,4) wxyz (`fit_shadow_light`, over the pixels where the ground is in
        view with nothing in front of it) and render it from now on (`set_shadow`; None: no shadow found)."""
        self.set_shadow(None)
        geometry = ShadowCaster(self.local, self.body_index, self.object_mask)
        in_front = self.moving_alpha(xpos, xquat)
        with torch.no_grad():
            if self._lit_layer is not None:
                ground = self._lit_layer.alpha
            else:
                s = self.static
                _, ground, _ = rasterize(
                    *s.args(), self.Ks, self.X_WCs, self.width, self.height, None, self.backend, eps2d=self.eps2d
                )
        table = (ground > 0.95) & (in_front < 0.05)
        light = fit_shadow_light(geometry, xpos, xquat, table, images, self.Ks, self.X_WCs, config, self.backend)
        self.set_shadow(light)
        return light

    def cast_shadows(self, xpos: np.ndarray, xquat: np.ndarray, tolerance: float = 0.0) -> bool:
        """Shade the ground layer with the shadow the moving bodies cast at poses xpos (nbody,3) m, xquat (nbody,4)
        wxyz (the robot at the real arm's joints, the objects where the twin has them), unless no body moved by
        more than `tolerance` m since the last cast (a point of a body as far from its origin as its farthest
        Gaussian; with 0, unless the poses are the last cast's); a no-op without a shadow light or a ground layer.
        Returns whether it cast."""
        if self.shadow is None or self._lit_layer is None:
            return False
        pose = (np.array(xpos, dtype=np.float64), np.array(xquat, dtype=np.float64))
        if self._cast_at is not None and self._moved(self._cast_at, pose) <= tolerance:
            return False
        cover = self.shadow.table(xpos, xquat, self.Ks, self.X_WCs, self.width, self.height, self.backend)
        self.shadow_cover = cover
        self._cast_at = pose
        lit = self._lit_layer
        self.static_layer = StaticLayer(lit.rgb * self.shadow.light.shade(cover), lit.alpha, lit.depth_acc)
        return True

    def _moved(self, before: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray]) -> float:
        """The largest distance any point of a moving body's Gaussians moved between two sets of body poses, m
        (bound: the origin's shift plus the turn's angle times the body's reach)."""
        shift = np.linalg.norm(after[0] - before[0], axis=1)
        sign = np.where(np.sum(after[1] * before[1], axis=1) < 0.0, -1.0, 1.0)[:, None]
        chord = np.linalg.norm(after[1] - sign * before[1], axis=1)  # unit quaternions: 2 sin(angle / 4)
        angle = 4.0 * np.arcsin(np.clip(0.5 * chord, 0.0, 1.0))  # exactly 0 for the same poses
        return float(np.max(shift + angle * self._reach))

    def set_camera_poses(self, X_WCs: Tensor) -> None:
        """Replace the camera-to-world poses (C,4,4) (e.g. after calibration); re-renders the static layer."""
        self.set_cameras(X_WCs=X_WCs)

    def set_cameras(self, X_WCs: Tensor | None = None, Ks: Tensor | None = None) -> None:
        """Replace the camera-to-world poses (C,4,4) and/or intrinsics (C,3,3) (e.g. after calibration);
        re-renders the static layer."""
        for name, new, old in (("X_WCs", X_WCs, self.X_WCs), ("Ks", Ks, self.Ks)):
            if new is not None and tuple(new.shape) != tuple(old.shape):
                raise ValueError(f"{name}: expected shape {tuple(old.shape)}, got {tuple(new.shape)}")
            if new is not None and not bool(torch.isfinite(new).all()):
                raise ValueError(f"{name}: must be finite")
        if X_WCs is not None:
            self.X_WCs = X_WCs.detach().to(self.X_WCs)
        if Ks is not None:
            self.Ks = Ks.detach().to(self.Ks)
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

    def window(self, points: np.ndarray, margin: int, multiple: int = 16) -> ViewWindow:
        """The smallest common window around world points (N,3) m in every camera, grown by `margin` px on
        each side, its size rounded up to `multiple` px and clamped to the image (the full image when no
        point lies in front of a camera)."""
        pts = np.asarray(points, dtype=np.float64)
        boxes = []
        for K, X_WC in zip(self.Ks.double().cpu().numpy(), self.X_WCs.double().cpu().numpy()):
            p = (pts - X_WC[:3, 3]) @ X_WC[:3, :3]
            p = p[p[:, 2] > 1e-3]
            if len(p) == 0:
                boxes.append((0.0, 0.0, float(self.width), float(self.height)))
                continue
            u = K[0, 0] * p[:, 0] / p[:, 2] + K[0, 2]
            v = K[1, 1] * p[:, 1] / p[:, 2] + K[1, 2]
            boxes.append((u.min() - margin, v.min() - margin, u.max() + margin, v.max() + margin))
        b = np.asarray(boxes)
        b[:, [0, 2]] = b[:, [0, 2]].clip(0, self.width)
        b[:, [1, 3]] = b[:, [1, 3]].clip(0, self.height)
        round_up = lambda n, full: int(min(full, max(multiple, -(-int(np.ceil(n)) // multiple) * multiple)))  # noqa: E731
        width = round_up((b[:, 2] - b[:, 0]).max(), self.width)
        height = round_up((b[:, 3] - b[:, 1]).max(), self.height)
        centre = 0.5 * (b[:, :2] + b[:, 2:])
        x0 = tuple(int(np.clip(round(c - width / 2), 0, self.width - width)) for c in centre[:, 0])
        y0 = tuple(int(np.clip(round(c - height / 2), 0, self.height - height)) for c in centre[:, 1])
        Ks = self.Ks.clone()
        Ks[:, 0, 2] -= torch.tensor(x0, dtype=Ks.dtype, device=Ks.device)
        Ks[:, 1, 2] -= torch.tensor(y0, dtype=Ks.dtype, device=Ks.device)
        layer = None if self.static_layer is None else self.static_layer.crop(x0, y0, width, height)
        return ViewWindow(x0, y0, width, height, Ks, self.X_WCs, layer)

    def full_window(self) -> ViewWindow:
        """The whole image of every camera as a window."""
        n = len(self.cameras)
        return ViewWindow((0,) * n, (0,) * n, self.width, self.height, self.Ks, self.X_WCs, self.static_layer)

    def moving(self, xpos: np.ndarray, xquat: np.ndarray, shade_tolerance: float = 0.0) -> Gaussians:
        """World-frame Gaussians of everything that moves, for body poses (nbody,3) m and (nbody,4) wxyz; with a
        shadow light, the objects' colours shaded by the robot's shadow at those poses (the shading of the last
        call kept while no body moved more than `shade_tolerance` m since it was computed; see `cast_shadows`)."""
        pos = torch.as_tensor(np.asarray(xpos), dtype=torch.float32, device=self.device)
        quat = torch.as_tensor(np.asarray(xquat), dtype=torch.float32, device=self.device)
        means, quats = place(self.local.means, self.local.quats, self.body_index, pos, quat)
        colors = self.local.colors
        if self.shadow is not None:
            pose = (np.array(xpos, dtype=np.float64), np.array(xquat, dtype=np.float64))
            shaded = self._shaded
            if shaded is None or self._moved(shaded[0], pose) > shade_tolerance:
                shaded = self._shaded = (pose, self.shadow.object_factors(xpos, xquat))
            colors = colors * shaded[1].to(colors)
        return Gaussians(means, quats, self.local.scales, colors, self.local.opacities)

    def moving_alpha(self, xpos: np.ndarray, xquat: np.ndarray) -> Tensor:
        """(C,H,W) accumulated opacity of the moving bodies alone (robot, objects) at poses xpos (nbody,3) m, xquat
        (nbody,4) wxyz: where they stand in front of the ground in each camera."""
        with torch.no_grad():
            g = self.moving(xpos, xquat)
            _, alpha, _ = rasterize(
                *g.args(), self.Ks, self.X_WCs, self.width, self.height, None, self.backend, eps2d=self.eps2d
            )
        return alpha

    def render(self, data: mujoco.MjData) -> tuple[Tensor, Tensor, Tensor]:
        """rgb (C,H,W,3), alpha (C,H,W), depth (C,H,W) m of the twin in `data` (body poses must be current)."""
        return self.render_poses(data.xpos, data.xquat)

    def render_poses(self, xpos: np.ndarray, xquat: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
        """`render` for body poses xpos (nbody,3) m and xquat (nbody,4) wxyz instead of an MjData."""
        g = self.moving(xpos, xquat)
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
                eps2d=self.eps2d,
            )


def _identity(n: int) -> np.ndarray:
    q = np.zeros((n, 4))
    q[:, 0] = 1.0
    return q
