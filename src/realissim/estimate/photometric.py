"""What the visual correction (and the search) compare: images blurred alike, a robust photometric loss, and that
loss's weights for reweighted least squares (docs/decisions.md, "Huber loss")."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def blur_images(images: Tensor, sigma: float) -> Tensor:
    """Images (C,H,W,3) blurred by a separable Gaussian of σ `sigma` px (taps to 3σ, edges replicated); the
    images themselves for σ ≤ 0. Differentiable."""
    if sigma <= 0:
        return images
    radius = max(1, int(np.ceil(3.0 * sigma)))
    x = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
    taps = torch.exp(-0.5 * (x / sigma) ** 2)
    taps = taps / taps.sum()
    out = images.permute(0, 3, 1, 2)
    out = torch.nn.functional.pad(out, (radius, radius, radius, radius), mode="replicate")
    out = torch.nn.functional.conv2d(out, taps.view(1, 1, 1, -1).expand(3, 1, 1, -1), groups=3)
    out = torch.nn.functional.conv2d(out, taps.view(1, 1, -1, 1).expand(3, 1, -1, 1), groups=3)
    return out.permute(0, 2, 3, 1)


def photometric_loss(rgb: Tensor, target: Tensor, kind: str, delta: float) -> Tensor:
    """Mean per-pixel-and-channel loss between rendered rgb and target images (C,H,W,3) in [0, 1]."""
    diff = rgb - target
    if kind == "l2":
        return (diff * diff).mean()
    if kind == "l1":
        return diff.abs().mean()
    return torch.nn.functional.huber_loss(rgb, target, delta=delta)


def robust_weights(residual: Tensor, kind: str, delta: float) -> Tensor:
    """Per-element weights (same shape as `residual`) that make weighted least squares take the steps of
    `photometric_loss`'s `kind` at `residual` (iteratively reweighted): "l2" 1; "l1" 1/|r|; Huber 1 inside `delta`,
    δ/|r| outside."""
    a = residual.abs()
    if kind == "l2":
        return torch.ones_like(residual)
    if kind == "l1":
        return 1.0 / a.clamp_min(1e-6)
    return torch.clamp(delta / a.clamp_min(1e-12), max=1.0)
