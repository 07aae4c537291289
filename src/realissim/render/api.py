"""`rasterize`: one entry point over the three rasteriser backends."""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from realissim.render.common import (
    DEFAULT_FAR,
    DEFAULT_NEAR,
    EPS2D,
    StaticLayer,
    background_image,
    check_inputs,
    compose,
)
from realissim.render.cpu import rasterize_cpu
from realissim.render.gsplat_backend import gsplat_available, rasterize_gsplat
from realissim.render.reference import rasterize_reference

Backend = Literal["auto", "reference", "cpu", "gsplat"]


def resolve_backend(backend: Backend, device_type: str) -> Literal["reference", "cpu", "gsplat"]:
    """The backend "auto" picks for tensors on `device_type`: gsplat on CUDA when installed, the
    numba path on CPU, the reference otherwise."""
    if backend != "auto":
        if backend not in ("reference", "cpu", "gsplat"):
            raise ValueError(f"backend: expected 'auto', 'reference', 'cpu' or 'gsplat', got {backend!r}")
        return backend
    if device_type == "cuda":
        return "gsplat" if gsplat_available() else "reference"
    return "cpu" if device_type == "cpu" else "reference"


def _accumulate(
    args: tuple, backend: Backend, static: StaticLayer | None, eps2d: float = EPS2D, validate: bool = True
) -> tuple[Tensor, Tensor]:
    """Check the inputs (unless `validate` is False), pick the backend and return its accumulated features
    (C,H,W,4) and alpha (C,H,W)."""
    if validate:
        check_inputs(*args[:9])
    chosen = resolve_backend(backend, args[0].device.type)
    if chosen == "gsplat":
        if static is not None:
            raise ValueError("static layers are not supported by the gsplat backend; render static Gaussians too")
        return rasterize_gsplat(*args, eps2d=eps2d)
    if chosen == "cpu":
        return rasterize_cpu(*args, static=static, eps2d=eps2d)
    return rasterize_reference(*args, static=static, eps2d=eps2d)


def rasterize(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    colors: Tensor,
    opacities: Tensor,
    Ks: Tensor,
    X_WCs: Tensor,
    width: int,
    height: int,
    background: Tensor | None = None,
    backend: Backend = "auto",
    *,
    near: float = DEFAULT_NEAR,
    far: float = DEFAULT_FAR,
    static: StaticLayer | None = None,
    eps2d: float = EPS2D,
    validate: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Render world-frame 3D Gaussians into C pinhole cameras (differentiable).

    Args:
        means: (N,3) Gaussian centres in the world frame, m.
        quats: (N,4) rotations wxyz, body-to-world of each Gaussian's principal axes (normalised here).
        scales: (N,3) standard deviations along those axes, m (> 0).
        colors: (N,3) RGB in [0, 1].
        opacities: (N,) in [0, 1].
        Ks: (C,3,3) intrinsics, px; pixel (x, y) is sampled at (x + 0.5, y + 0.5).
        X_WCs: (C,4,4) camera-to-world poses, OpenCV axes (x right, y down, z forward).
        width, height: image size, px.
        background: composited behind: None (black, i.e. premultiplied output), a colour (3,) or (C,3),
            or per-camera images (C,H,W,3).
        backend: "reference" (plain PyTorch, dense), "cpu" (numba, tiled), "gsplat" (CUDA) or "auto".
        near, far: Gaussians whose centre's camera depth is outside (near, far), m, are culled.
        static: a pre-rendered layer of static Gaussians (see `render_static`), composited at its own
            depth; not supported by the gsplat backend.
        eps2d: px² added to every projected Gaussian's 2D covariance (a low-pass, as in 3DGS): the default keeps a
            Gaussian smaller than a pixel from falling between pixel centres; smaller values render hard edges
            harder (the twin's views, `TwinViews.eps2d`).
        validate: check the inputs' shapes, dtypes and values first (ValueError naming the first wrong one);
            False skips it, for a caller rendering the same checked Gaussians again, moved by finite amounts
            (the visual correction's Jacobian and steps).

    Returns:
        rgb (C,H,W,3), alpha (C,H,W) accumulated opacity in [0, 1], and depth (C,H,W): the
        alpha-normalised camera z-depth in m (0 where alpha is 0). Gradients flow to means, quats,
        scales, colors and opacities (and to `background`); not into `static`.
    """
    args = (means, quats, scales, colors, opacities, Ks, X_WCs, int(width), int(height), float(near), float(far))
    acc, alpha = _accumulate(args, backend, static, eps2d, validate)
    bg = background_image(background, Ks.shape[0], int(height), int(width), acc)
    return compose(acc, alpha, bg)


def render_static(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    colors: Tensor,
    opacities: Tensor,
    Ks: Tensor,
    X_WCs: Tensor,
    width: int,
    height: int,
    backend: Backend = "auto",
    *,
    near: float = DEFAULT_NEAR,
    far: float = DEFAULT_FAR,
    eps2d: float = EPS2D,
) -> StaticLayer:
    """Pre-render Gaussians that never move (ground, table) into a per-camera layer for `rasterize(static=...)`.

    Exact as long as no moving Gaussian sits between static ones along a ray (e.g. objects resting on
    a table); otherwise the layer is composited as one surface at its expected depth. `eps2d` as in `rasterize`.
    """
    args = (means, quats, scales, colors, opacities, Ks, X_WCs, int(width), int(height), float(near), float(far))
    acc, alpha = _accumulate(args, backend, None, eps2d)
    acc, alpha = acc.detach(), alpha.detach()
    return StaticLayer(rgb=acc[..., :3], alpha=alpha, depth_acc=acc[..., 3])
