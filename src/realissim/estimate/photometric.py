"""What the visual correction (and the search) compare: images blurred alike, a robust photometric loss, and that
loss's weights for reweighted least squares (docs/decisions.md, "Huber loss")."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def blur_images(images: Tensor, sigma: float) -> Tensor:
    """Images (C,H,W,3) blurred by a separable Gaussian of σ `sigma` px (taps to 3σ, edges replicated); the
    images themselves for σ ≤ 0. Differentiable.

    Each pass is one matrix product with a banded (n, n) blur matrix whose edge rows fold the taps that fall off the
    image onto its first and last pixels (the replicated edge): for the correction's small windows that is several
    times faster than a grouped convolution, and it needs no permutes or padding."""
    if sigma <= 0:
        return images
    c, h, w, k = images.shape
    rows = _blur_matrix(h, float(sigma), images.dtype, images.device)
    cols = _blur_matrix(w, float(sigma), images.dtype, images.device)
    out = images.permute(0, 1, 3, 2).reshape(c * h * k, w) @ cols.T  # along each row
    out = rows @ out.reshape(c, h, k * w)  # along each column
    return out.reshape(c, h, k, w).permute(0, 1, 3, 2)


_BLUR_MATRICES: dict[tuple[int, float, torch.dtype, torch.device], Tensor] = {}


def _blur_matrix(n: int, sigma: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """(n, n): row i the Gaussian taps (σ px, to 3σ, normalised) centred on pixel i, those beyond the ends added to
    the end pixels (replicated edges). Cached per size, σ, dtype and device."""
    key = (n, sigma, dtype, device)
    matrix = _BLUR_MATRICES.get(key)
    if matrix is None:
        radius = max(1, int(np.ceil(3.0 * sigma)))
        x = np.arange(-radius, radius + 1, dtype=np.float64)
        taps = np.exp(-0.5 * (x / sigma) ** 2)
        taps /= taps.sum()
        dense = np.zeros((n, n))
        for i in range(n):
            np.add.at(dense[i], np.clip(i + np.arange(-radius, radius + 1), 0, n - 1), taps)
        matrix = torch.as_tensor(dense, dtype=dtype, device=device)
        if len(_BLUR_MATRICES) > 64:
            _BLUR_MATRICES.clear()
        _BLUR_MATRICES[key] = matrix
    return matrix


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
