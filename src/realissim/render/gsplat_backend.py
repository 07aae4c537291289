"""The CUDA path: gsplat's fused rasteriser (optional dependency, needs an NVIDIA GPU).

gsplat follows the same 3DGS conventions as `realissim.render.common` with two small differences,
covered by the parity tolerances: it clamps a Gaussian's alpha at 0.999 instead of 0.99, and it
tests Gaussians against whole 16×16 tiles rather than against each pixel's footprint square.
Static layers are not supported here: on a GPU, render the static Gaussians with the others.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import Tensor

from realissim.render.common import EPS2D


def gsplat_available() -> bool:
    """True when gsplat is importable and a CUDA device is present."""
    return torch.cuda.is_available() and importlib.util.find_spec("gsplat") is not None


def rasterize_gsplat(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    colors: Tensor,
    opacities: Tensor,
    Ks: Tensor,
    X_WCs: Tensor,
    width: int,
    height: int,
    near: float,
    far: float,
    eps2d: float = EPS2D,
) -> tuple[Tensor, Tensor]:
    """Accumulated features acc (C,H,W,4: premultiplied RGB, alpha-weighted depth) and alpha (C,H,W)."""
    if not gsplat_available():
        raise RuntimeError("backend 'gsplat' needs the gsplat package and a CUDA device")
    if means.device.type != "cuda":
        raise ValueError(f"backend 'gsplat' needs CUDA tensors, got {means.device}")
    from gsplat import rasterization

    f32 = torch.float32
    acc, alpha, _ = rasterization(
        means.to(f32),
        quats.to(f32),
        scales.to(f32),
        opacities.to(f32),
        colors.to(f32),
        torch.linalg.inv(X_WCs.to(f32)),
        Ks.to(f32),
        int(width),
        int(height),
        near_plane=float(near),
        far_plane=float(far),
        eps2d=float(eps2d),
        packed=False,
        render_mode="RGB+D",
        rasterize_mode="classic",
    )
    return acc.to(means.dtype), alpha[..., 0].to(means.dtype)
