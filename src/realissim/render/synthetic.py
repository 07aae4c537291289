"""Deterministic synthetic Gaussian scenes and cameras, for tests, benchmarks and checking an install."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def random_gaussians(
    n: int, seed: int, dtype: torch.dtype = torch.float32, depth: tuple[float, float] = (1.5, 2.5), spread: float = 0.6
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """n Gaussians in front of a camera at the origin looking along +z: means, quats, scales, colors, opacities."""
    g = torch.Generator().manual_seed(seed)
    z = depth[0] + (depth[1] - depth[0]) * torch.rand(n, generator=g, dtype=torch.float64)
    xy = (2 * torch.rand(n, 2, generator=g, dtype=torch.float64) - 1) * spread * z[:, None]
    means = torch.cat([xy * torch.tensor([1.0, 0.75], dtype=torch.float64), z[:, None]], dim=1)
    quats = torch.randn(n, 4, generator=g, dtype=torch.float64)
    quats = quats / quats.norm(dim=-1, keepdim=True)
    scales = 0.01 + 0.04 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    colors = torch.rand(n, 3, generator=g, dtype=torch.float64)
    opacities = 0.3 + 0.65 * torch.rand(n, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype) for t in (means, quats, scales, colors, opacities))  # type: ignore[return-value]


def cameras(
    n: int, width: int, height: int, dtype: torch.dtype = torch.float32, fov_x: float = math.radians(65)
) -> tuple[Tensor, Tensor]:
    """n cameras Ks (n,3,3), X_WCs (n,4,4) near the origin, looking roughly along +z with small offsets."""
    f = 0.5 * width / math.tan(0.5 * fov_x)
    K = torch.tensor([[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]], dtype=torch.float64)
    poses = []
    for i in range(n):
        angle = 0.08 * i
        c, s = math.cos(angle), math.sin(angle)
        X = torch.eye(4, dtype=torch.float64)
        X[:3, :3] = torch.tensor([[c, 0, s], [0, 1, 0], [-s, 0, c]], dtype=torch.float64)
        X[:3, 3] = torch.tensor([-0.1 * i, 0.03 * i, 0.0])
        poses.append(X)
    return K.expand(n, 3, 3).to(dtype).clone(), torch.stack(poses).to(dtype)
