"""`Normalizer`: a per-dimension affine map of a feature to a standard range, fitted on training data and
stored with the policy's weights (its statistics are module buffers, so they travel in every checkpoint).

Two modes:
- "minmax" maps [min, max] to [−1, 1]. The default for actions: flow matching starts from N(0, I) noise, so
  targets spanning a fixed, known box of about that size are what Diffusion Policy and π0 train on, and
  every waypoint value the data holds stays representable (no outlier is squashed).
- "meanstd" maps to zero mean and unit variance: for features with long tails, where a few extreme
  samples would otherwise compress the bulk into a small part of [−1, 1].

A dimension that does not vary in the data (a joint the demonstrations never move) gets the half-range
`min_scale` instead of zero, so it maps to ≈ 0 and back exactly rather than dividing by zero.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from realissim.learn.config import NormMode


class Normalizer(nn.Module):
    """x ↦ (x − center) / scale per dimension of the last axis (D,); `unnormalize` is the exact inverse map
    (equal to float rounding). Fit with `fit`; an unfitted normaliser is the identity."""

    def __init__(self, dim: int, mode: NormMode = "minmax", min_scale: float = 1e-3) -> None:
        super().__init__()
        if mode not in ("minmax", "meanstd"):
            raise ValueError(f"Normalizer.mode: must be 'minmax' or 'meanstd', got {mode!r}")
        if not min_scale > 0:
            raise ValueError(f"Normalizer.min_scale: must be > 0, got {min_scale}")
        self.mode, self.min_scale = mode, min_scale
        self.register_buffer("center", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("scale", torch.ones(dim, dtype=torch.float64))

    @property
    def dim(self) -> int:
        """D."""
        return int(self.center.shape[0])

    def fit(self, x: Tensor) -> Normalizer:
        """Fit to samples x (..., D) (statistics over every axis but the last, in float64); returns self."""
        flat = x.detach().reshape(-1, self.dim).to(torch.float64)
        if flat.shape[0] == 0 or not torch.isfinite(flat).all():
            raise ValueError(f"Normalizer.fit: need ≥ 1 finite sample of {self.dim} values, got {tuple(x.shape)}")
        if self.mode == "minmax":
            lo, hi = flat.min(dim=0).values, flat.max(dim=0).values
            center, scale = (hi + lo) / 2, (hi - lo) / 2
        else:
            center, scale = flat.mean(dim=0), flat.std(dim=0, correction=0)
        self.center.copy_(center)
        self.scale.copy_(scale.clamp_min(self.min_scale))
        return self

    def normalize(self, x: Tensor) -> Tensor:
        """x (..., D) in data units → normalised, in x's dtype."""
        return ((x.to(torch.float64) - self.center) / self.scale).to(x.dtype)

    def unnormalize(self, y: Tensor) -> Tensor:
        """y (..., D) normalised → data units, in y's dtype."""
        return (y.to(torch.float64) * self.scale + self.center).to(y.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, mode={self.mode!r}"
