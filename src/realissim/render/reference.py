"""Plain-PyTorch reference rasteriser: dense over (pixel, Gaussian) pairs, autograd for gradients.

Written to be obviously correct rather than fast; the other backends are tested against it. Image
formation rules are those of `realissim.render.common`. Pixels are processed in chunks, each under
activation checkpointing when gradients are needed, so memory stays bounded on large images.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from realissim.render.common import ALPHA_MAX, ALPHA_MIN, EPS2D, FOV_CLAMP, T_MIN, StaticLayer, world_to_camera

CHUNK_ELEMENTS = 1 << 21
"""Pixel × Gaussian pairs per chunk."""


@dataclass(frozen=True)
class Projection:
    """Per camera and Gaussian: centre (C,N,2) px, conic (C,N,3) = (a, b, c) of Σ₂⁻¹ = [[a, b], [b, c]] px⁻²,
    camera z-depth (C,N) m, footprint half-size (C,N) px (0 = culled), and the 2D covariance (C,N,2,2) px²."""

    mean2d: Tensor
    conic: Tensor
    depth: Tensor
    radius: Tensor
    cov2d: Tensor


def quat_to_rotmat(quats: Tensor) -> Tensor:
    """Rotation matrices (...,3,3) from quaternions (...,4) wxyz, normalised first (differentiable)."""
    q = quats / quats.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]  # fmt: skip
    return torch.stack(rows, dim=-1).reshape(*q.shape[:-1], 3, 3)


def covariance(quats: Tensor, scales: Tensor) -> Tensor:
    """World/body-frame covariances (N,3,3) = R S Sᵀ Rᵀ from quats (N,4) wxyz and std-devs (N,3), m²."""
    M = quat_to_rotmat(quats) * scales[:, None, :]
    return M @ M.transpose(-1, -2)


def project(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    Ks: Tensor,
    X_WCs: Tensor,
    width: int,
    height: int,
    near: float,
    far: float,
    eps2d: float = EPS2D,
) -> Projection:
    """EWA-project world-frame Gaussians into C pinhole cameras (OpenCV axes, X_WC camera-to-world); `eps2d` px² is
    added to each 2D covariance."""
    R_CW, t_CW = world_to_camera(X_WCs)
    tc = torch.einsum("cij,nj->cni", R_CW, means) + t_CW[:, None, :]
    cov_c = torch.einsum("cij,njk,clk->cnil", R_CW, covariance(quats, scales), R_CW)
    tx, ty, tz = tc.unbind(-1)
    in_depth = (tz > near) & (tz < far)
    z = torch.where(in_depth, tz, torch.ones_like(tz))  # keeps culled entries finite (and their gradients zero)
    fx, fy = Ks[:, 0, 0, None], Ks[:, 1, 1, None]
    cx, cy = Ks[:, 0, 2, None], Ks[:, 1, 2, None]
    lim_xp = (width - cx) / fx + FOV_CLAMP * 0.5 * width / fx
    lim_xn = cx / fx + FOV_CLAMP * 0.5 * width / fx
    lim_yp = (height - cy) / fy + FOV_CLAMP * 0.5 * height / fy
    lim_yn = cy / fy + FOV_CLAMP * 0.5 * height / fy
    jx = z * torch.clamp(tx / z, min=-lim_xn, max=lim_xp)
    jy = z * torch.clamp(ty / z, min=-lim_yn, max=lim_yp)
    zero = torch.zeros_like(z)
    J = torch.stack([fx / z, zero, -fx * jx / (z * z), zero, fy / z, -fy * jy / (z * z)], dim=-1)
    J = J.reshape(*z.shape, 2, 3)
    cov2d = J @ cov_c @ J.transpose(-1, -2) + eps2d * torch.eye(2, dtype=means.dtype, device=means.device)
    a, b, c = cov2d[..., 0, 0], cov2d[..., 0, 1], cov2d[..., 1, 1]
    det = a * c - b * b
    ok = in_depth & (det > 0)
    det_safe = torch.where(ok, det, torch.ones_like(det))
    conic = torch.stack([c / det_safe, -b / det_safe, a / det_safe], dim=-1)
    mean2d = torch.stack([fx * tx / z + cx, fy * ty / z + cy], dim=-1)
    with torch.no_grad():
        half_trace = 0.5 * (a + c)
        lam = half_trace + torch.sqrt(torch.clamp(half_trace * half_trace - det, min=0.01))
        radius = torch.ceil(3.0 * torch.sqrt(lam))
        inside = (
            (mean2d[..., 0] + radius > 0)
            & (mean2d[..., 0] - radius < width)
            & (mean2d[..., 1] + radius > 0)
            & (mean2d[..., 1] - radius < height)
        )
        radius = torch.where(ok & inside, radius, torch.zeros_like(radius))
    return Projection(mean2d=mean2d, conic=conic, depth=tz, radius=radius, cov2d=cov2d)


def _composite_chunk(
    px: Tensor,
    py: Tensor,
    mean2d: Tensor,
    conic: Tensor,
    radius: Tensor,
    opac: Tensor,
    feat: Tensor,
    depth: Tensor,
    static_alpha: Tensor | None,
    static_feat: Tensor | None,
    static_depth: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Composite P pixels (centres px, py) over n depth-sorted Gaussians; returns acc (P,4), alpha (P,)."""
    dx = mean2d[None, :, 0] - px[:, None]
    dy = mean2d[None, :, 1] - py[:, None]
    sigma = 0.5 * (conic[None, :, 0] * dx * dx + conic[None, :, 2] * dy * dy) + conic[None, :, 1] * dx * dy
    alpha = torch.clamp(opac[None, :] * torch.exp(-sigma), max=ALPHA_MAX)
    in_box = (dx.abs() <= radius[None, :]) & (dy.abs() <= radius[None, :])
    alpha = torch.where(in_box & (sigma >= 0) & (alpha >= ALPHA_MIN), alpha, torch.zeros_like(alpha))
    weighted = alpha[..., None] * feat[None, :, :]
    is_static = torch.zeros_like(alpha, dtype=torch.bool)
    if static_alpha is not None:
        keys = torch.cat([depth[None, :].expand(px.shape[0], -1), static_depth[:, None]], dim=1)
        order = torch.sort(keys, dim=1, stable=True).indices
        alpha = torch.gather(torch.cat([alpha, static_alpha[:, None]], dim=1), 1, order)
        weighted = torch.cat([weighted, static_feat[:, None, :]], dim=1)
        weighted = torch.gather(weighted, 1, order[..., None].expand(-1, -1, weighted.shape[-1]))
        is_static = order == depth.shape[0]
    t_incl = torch.cumprod(1.0 - alpha, dim=1)
    t_excl = torch.cat([torch.ones_like(t_incl[:, :1]), t_incl[:, :-1]], dim=1)
    # A Gaussian is composited only if it keeps T ≥ T_MIN; the static layer whenever the pixel is still open.
    keep = torch.where(is_static, t_excl >= T_MIN, t_incl >= T_MIN)
    weight = torch.where(keep, t_excl, torch.zeros_like(t_excl))
    acc = (weight[..., None] * weighted).sum(dim=1)
    return acc, (weight * alpha).sum(dim=1)


def rasterize_reference(
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
    static: StaticLayer | None = None,
    eps2d: float = EPS2D,
) -> tuple[Tensor, Tensor]:
    """Accumulated features acc (C,H,W,4: premultiplied RGB, alpha-weighted depth) and alpha (C,H,W)."""
    proj = project(means, quats, scales, Ks, X_WCs, width, height, near, far, eps2d)
    n_cams = Ks.shape[0]
    ys, xs = torch.meshgrid(
        torch.arange(height, dtype=means.dtype, device=means.device),
        torch.arange(width, dtype=means.dtype, device=means.device),
        indexing="ij",
    )
    px, py = xs.reshape(-1) + 0.5, ys.reshape(-1) + 0.5
    accs, alphas = [], []
    for cam in range(n_cams):
        visible = torch.nonzero(proj.radius[cam] > 0).squeeze(-1)
        order = visible[torch.sort(proj.depth[cam, visible].detach(), stable=True).indices]
        depth = proj.depth[cam, order]
        args = (proj.mean2d[cam, order], proj.conic[cam, order], proj.radius[cam, order], opacities[order])
        feat = torch.cat([colors[order], depth[:, None]], dim=-1)
        statics = _static_pixels(static, cam)
        chunk = max(1, CHUNK_ELEMENTS // max(1, order.numel()))
        acc_cam, alpha_cam = [], []
        for start in range(0, px.shape[0], chunk):
            sl = slice(start, start + chunk)
            chunk_static = tuple(s[sl] if s is not None else None for s in statics)
            inputs = (px[sl], py[sl], *args, feat, depth.detach(), *chunk_static)
            if torch.is_grad_enabled():
                acc, alpha = checkpoint(_composite_chunk, *inputs, use_reentrant=False)
            else:
                acc, alpha = _composite_chunk(*inputs)
            acc_cam.append(acc)
            alpha_cam.append(alpha)
        accs.append(torch.cat(acc_cam).reshape(height, width, 4))
        alphas.append(torch.cat(alpha_cam).reshape(height, width))
    return torch.stack(accs), torch.stack(alphas)


def _static_pixels(static: StaticLayer | None, cam: int) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """The static layer of one camera flattened to pixels: alpha (P,), features (P,4), depth (P,)."""
    if static is None:
        return None, None, None
    alpha = static.alpha[cam].reshape(-1).detach()
    feat = static.features()[cam].reshape(-1, 4).detach()
    return alpha, feat, static.depth[cam].reshape(-1).detach()
