"""The fast CPU rasteriser: numba kernels behind a `torch.autograd.Function` with a hand-written backward.

Cost scales with the pixels each Gaussian covers (16×16 tiles, per-Gaussian footprints), not with
Gaussians × pixels. Kernels are compiled on first use and cached next to the package (about 20 s
once per machine and dtype). They run on as many threads as torch is set to use, on numba's OpenMP
layer, which (like any GNU OpenMP program) must not be used again in a child forked after it ran:
start worker processes with the "spawn" method.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numba
import numpy as np
import torch
from torch import Tensor

from realissim.render import _project_kernels as pk
from realissim.render import _raster_kernels as rk
from realissim.render.common import EPS2D, StaticLayer, world_to_camera

log = logging.getLogger(__name__)
_warm = False


def _np(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _set_threads() -> None:
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))


def _static_arrays(static: StaticLayer | None, shape: tuple[int, int, int], dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """Static layer as numpy (alpha, features, depth); an empty layer (alpha 0, depth +inf) when None."""
    if static is None:
        return np.zeros(shape, dtype), np.zeros((*shape, 4), dtype), np.full(shape, np.inf, dtype)
    for name, t, want in (("rgb", static.rgb, (*shape, 3)), ("alpha", static.alpha, shape)):
        if tuple(t.shape) != want:
            raise ValueError(f"static.{name}: expected shape {want}, got {tuple(t.shape)}")
    return static.numpy(dtype)


_last_cameras: tuple[Tensor, int, Tensor, int, np.ndarray, np.ndarray, np.ndarray] | None = None
"""The last cameras converted by `_cameras`: the tensors, their versions and the float64 arrays."""


def _cameras(Ks: Tensor, X_WCs: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R_CW (C,3,3), t_CW (C,3) and Ks (C,3,3) as float64 arrays, reused while the same camera tensors come again
    unchanged (the same tensors, not modified in place): a correction renders one window five times."""
    global _last_cameras
    last = _last_cameras  # (one read: another thread may replace it)
    if last is not None and last[0] is Ks and last[1] == Ks._version and last[2] is X_WCs and last[3] == X_WCs._version:
        return last[4], last[5], last[6]
    R_CW, t_CW = (_np(x.to(torch.float64)) for x in world_to_camera(X_WCs))
    Ks64 = _np(Ks.to(torch.float64))
    _last_cameras = (Ks, Ks._version, X_WCs, X_WCs._version, R_CW, t_CW, Ks64)
    return R_CW, t_CW, Ks64


class _Rasterize(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
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
        static: StaticLayer | None,
        eps2d: float,
    ) -> tuple[Tensor, Tensor]:
        _set_threads()
        dtype = _np(means).dtype
        n_cams, n = Ks.shape[0], means.shape[0]
        R_CW, t_CW, Ks64 = _cameras(Ks, X_WCs)
        arrays = [_np(x) for x in (means, quats, scales, colors, opacities)]
        mean2d = np.zeros((n_cams, n, 2), dtype)
        conic = np.zeros((n_cams, n, 3), dtype)
        depth = np.zeros((n_cams, n), dtype)
        radius = np.zeros((n_cams, n), np.int32)
        pk.project_forward(*arrays[:3], R_CW, t_CW, Ks64, width, height, near, far, eps2d, mean2d, conic, depth, radius)
        offsets, ids, rect = rk.bin_tiles(mean2d, conic, arrays[4], radius, depth, width, height)
        order = rk.balanced_order(offsets, numba.get_num_threads())
        statics = _static_arrays(static, (n_cams, height, width), dtype)
        acc = np.empty((n_cams, height, width, 4), dtype)
        t_final = np.empty((n_cams, height, width), dtype)
        rk.raster_forward(mean2d, conic, arrays[4], arrays[3], depth, rect, offsets, ids, order, *statics, acc, t_final)
        ctx.arrays = (arrays, R_CW, t_CW, Ks64, mean2d, conic, depth, radius, offsets, ids, rect, statics, acc, t_final)
        ctx.size = (width, height)
        return torch.from_numpy(acc), torch.from_numpy(1.0 - t_final)

    @staticmethod
    def backward(ctx: Any, g_acc: Tensor, g_alpha: Tensor) -> tuple[Tensor | None, ...]:
        _set_threads()
        arrays, R_CW, t_CW, Ks64, mean2d, conic, depth, radius, offsets, ids, rect, statics, acc, t_final = ctx.arrays
        width, height = ctx.size
        means, quats, scales, colors, opac = arrays
        dtype = means.dtype
        g_acc_np = _np(g_acc).astype(dtype, copy=False)
        g_alpha_np = _np(g_alpha).astype(dtype, copy=False)
        order = rk.balanced_order(offsets, numba.get_num_threads())
        grads = rk.raster_backward(
            mean2d, conic, opac, colors, depth, rect, offsets, ids, order, *statics, acc, t_final, g_acc_np, g_alpha_np
        )
        g_mean2d, g_conic, g_depth, g_opac, g_colors = rk.reduce_grads(
            grads, offsets, ids, depth.shape[0], depth.shape[1]
        )
        g_means, g_quats, g_scales = pk.project_backward(
            means, quats, scales, R_CW, t_CW, Ks64, width, height, radius, conic, g_mean2d, g_conic, g_depth
        )
        out = [torch.from_numpy(g.astype(dtype, copy=False)) for g in (g_means, g_quats, g_scales, g_colors, g_opac)]
        needs = ctx.needs_input_grad
        return (*(o if needs[i] else None for i, o in enumerate(out)), None, None, None, None, None, None, None, None)


def rasterize_cpu(
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
    global _warm
    if means.device.type != "cpu":
        raise ValueError(f"backend 'cpu' needs CPU tensors, got {means.device}")
    if means.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"means: backend 'cpu' supports float32 and float64, got {means.dtype}")
    if Ks.requires_grad or X_WCs.requires_grad:
        raise ValueError("Ks, X_WCs: backend 'cpu' has no camera gradients; use backend='reference' for them")
    if not _warm:
        start = time.perf_counter()
        log.info("compiling the CPU rasteriser kernels (cached after the first run)")
    result = _Rasterize.apply(
        means, quats, scales, colors, opacities, Ks, X_WCs, width, height, near, far, static, float(eps2d)
    )
    if not _warm:
        _warm = True
        log.info("CPU rasteriser ready in %.1f s", time.perf_counter() - start)
    return result
