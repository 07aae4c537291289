"""Numba kernels of the fast CPU rasteriser, part 2: tile binning, compositing and its backward.

Image formation follows `realissim.render.common`; `realissim.render.reference` is the specification
these kernels are tested against. Work scales with the pixels each Gaussian covers: Gaussians are
binned into 16×16 tiles in depth order, and inside a tile each Gaussian only visits the pixels of its
own footprint. Tiles run in parallel; gradients are written per (tile, Gaussian) intersection and
reduced serially afterwards, so results do not depend on the thread count.

The backward pass walks front to back like the forward one, using for each pixel
dL/dαₖ = Tₖ (g·fₖ) − (g·F − Σ_{j≤k} Tⱼ αⱼ g·fⱼ) / (1 − αₖ), where F are the pixel's accumulated
features (RGB, depth, alpha) and g their incoming gradients; no division by transmittance is needed.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from realissim.render.common import ALPHA_MAX, ALPHA_MIN, T_MIN

TILE = 16
"""Tile edge, px."""
_FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}
"""LLVM fast-math flags that keep NaN and inf semantics (the static layer uses +inf depth)."""
N_GRAD = 10
"""Per-intersection gradient slots: mean2d x, y; conic a, b, c; opacity; r, g, b; depth."""


@njit(cache=True, nogil=True, error_model="numpy")
def _footprint(mx, my, rad, ca, cb, cc, opacity, width, height):
    """Inclusive pixel range (x0, x1, y0, y1) a Gaussian can touch: pixel centres in its square of
    half-size `rad`, tightened to the ellipse where its alpha can reach ALPHA_MIN (plus one pixel for
    rounding), clipped to the image. Empty when x0 > x1 or y0 > y1."""
    if opacity * 255.0 < 1.0:
        return 1, 0, 1, 0
    s_max = math.log(opacity * 255.0)
    det = ca * cc - cb * cb
    half_x = min(float(rad), math.sqrt(max(2.0 * s_max * cc / det, 0.0)) + 1.0)
    half_y = min(float(rad), math.sqrt(max(2.0 * s_max * ca / det, 0.0)) + 1.0)
    x0 = max(0, math.ceil(mx - half_x - 0.5))
    x1 = min(width - 1, math.floor(mx + half_x - 0.5))
    y0 = max(0, math.ceil(my - half_y - 0.5))
    y1 = min(height - 1, math.floor(my + half_y - 0.5))
    return x0, x1, y0, y1


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def bin_tiles(mean2d, conic, opac, radius, depth, width, height):
    """Bin visible Gaussians into tiles in depth order (ties by index).

    Returns offsets (C·tiles+1,) into ids (M,) of Gaussian indices, and rect (C,N,4) int32: each
    Gaussian's inclusive pixel range x0, x1, y0, y1 (empty when x0 > x1), see `_footprint`.
    """
    n_cams, n = depth.shape
    tiles_x = (width + TILE - 1) // TILE
    n_tiles = tiles_x * ((height + TILE - 1) // TILE)
    rect = np.empty((n_cams, n, 4), dtype=np.int32)
    counts = np.zeros(n_cams * n_tiles + 1, dtype=np.int64)
    orders = np.empty((n_cams, n), dtype=np.int64)
    for c in prange(n_cams):
        orders[c] = np.argsort(depth[c], kind="mergesort")
        for i in range(n):
            rect[c, i, 0], rect[c, i, 1] = 1, 0
            if radius[c, i] <= 0:
                continue
            x0, x1, y0, y1 = _footprint(
                mean2d[c, i, 0], mean2d[c, i, 1], radius[c, i], conic[c, i, 0], conic[c, i, 1], conic[c, i, 2],
                opac[i], width, height,
            )  # fmt: skip
            if x0 > x1 or y0 > y1:
                continue
            rect[c, i, 0], rect[c, i, 1], rect[c, i, 2], rect[c, i, 3] = x0, x1, y0, y1
            for ty in range(y0 // TILE, y1 // TILE + 1):
                for tx in range(x0 // TILE, x1 // TILE + 1):
                    counts[c * n_tiles + ty * tiles_x + tx + 1] += 1
    offsets = np.cumsum(counts)
    ids = np.empty(offsets[-1], dtype=np.int32)
    for c in prange(n_cams):
        cursor = offsets[c * n_tiles : (c + 1) * n_tiles].copy()
        for i in orders[c]:
            if rect[c, i, 0] > rect[c, i, 1]:
                continue
            for ty in range(rect[c, i, 2] // TILE, rect[c, i, 3] // TILE + 1):
                for tx in range(rect[c, i, 0] // TILE, rect[c, i, 1] // TILE + 1):
                    t = ty * tiles_x + tx
                    ids[cursor[t]] = i
                    cursor[t] += 1
    return offsets, ids, rect


def balanced_order(offsets: np.ndarray, n_threads: int) -> np.ndarray:
    """Tile processing order (tiles,) that gives each of `n_threads` equal contiguous chunks (numba's
    static schedule) a similar mix of heavy and light tiles; results do not depend on it."""
    work = np.diff(offsets)
    by_work = np.argsort(-work, kind="stable")
    return np.concatenate([by_work[i::n_threads] for i in range(n_threads)])


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_bounds(job, width, height):
    """Camera index and pixel bounds [x0, x1) × [y0, y1) of flat tile index `job`."""
    tiles_x = (width + TILE - 1) // TILE
    n_tiles = tiles_x * ((height + TILE - 1) // TILE)
    c = job // n_tiles
    t = job % n_tiles
    x0 = (t % tiles_x) * TILE
    y0 = (t // tiles_x) * TILE
    return c, x0, min(x0 + TILE, width), y0, min(y0 + TILE, height)


@njit(cache=True, nogil=True, error_model="numpy")
def _nearest_static(s_depth, c, px0, px1, py0, py1):
    """Smallest static-layer depth in a tile (+inf when the tile has none)."""
    near = np.inf
    for y in range(py0, py1):
        for x in range(px0, px1):
            near = min(near, s_depth[c, y, x])
    return near


@njit(cache=True, nogil=True, parallel=True, error_model="numpy", fastmath=_FAST)
def raster_forward(
    mean2d, conic, opac, colors, depth, rect, offsets, ids, order, s_alpha, s_feat, s_depth, acc, t_final
):
    """Composite every tile; fill acc (C,H,W,4: premultiplied RGB, depth) and t_final (C,H,W).

    s_alpha (C,H,W), s_feat (C,H,W,4), s_depth (C,H,W) describe the static layer (alpha 0 and depth
    +inf where there is none); it is composited once per pixel, before the first Gaussian deeper than it.
    A pixel's transmittance is stored negated once it has stopped compositing.
    """
    _, height, width = t_final.shape
    has_static = bool(np.any(s_alpha > 0))
    for j in prange(order.shape[0]):
        job = order[j]
        c, px0, px1, py0, py1 = _tile_bounds(job, width, height)
        trans = np.ones((TILE, TILE))
        feat = np.zeros((TILE, TILE, 4))
        placed = np.zeros((TILE, TILE), dtype=np.bool_)
        n_open = (px1 - px0) * (py1 - py0)
        s_near = _nearest_static(s_depth, c, px0, px1, py0, py1) if has_static else np.inf
        for k in range(offsets[job], offsets[job + 1]):
            if n_open == 0:
                break
            g = ids[k]
            o = opac[g]
            if o * 255.0 < 1.0:
                continue
            s_max = math.log(o * 255.0)  # alpha < ALPHA_MIN beyond this sigma: rejected before exp
            mx, my, z = mean2d[c, g, 0], mean2d[c, g, 1], depth[c, g]
            ca, cb, cc = conic[c, g, 0], conic[c, g, 1], conic[c, g, 2]
            cr, cg, cbl = colors[g, 0], colors[g, 1], colors[g, 2]
            check_static = z > s_near
            for y in range(max(rect[c, g, 2], py0), min(rect[c, g, 3], py1 - 1) + 1):
                ly = y - py0
                dy = my - (y + 0.5)
                for x in range(max(rect[c, g, 0], px0), min(rect[c, g, 1], px1 - 1) + 1):
                    lx = x - px0
                    t = trans[ly, lx]
                    if t < 0.0:
                        continue
                    if check_static and not placed[ly, lx] and z > s_depth[c, y, x]:
                        placed[ly, lx] = True
                        for ch in range(4):
                            feat[ly, lx, ch] += t * s_feat[c, y, x, ch]
                        t = t * (1.0 - s_alpha[c, y, x])
                        if t < T_MIN:
                            trans[ly, lx] = -t
                            n_open -= 1
                            continue
                        trans[ly, lx] = t
                    dx = mx - (x + 0.5)
                    sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
                    if sigma < 0.0 or sigma > s_max:
                        continue
                    alpha = min(ALPHA_MAX, o * math.exp(-sigma))
                    if alpha < ALPHA_MIN:
                        continue
                    t_next = t * (1.0 - alpha)
                    if t_next < T_MIN:
                        trans[ly, lx] = -t
                        n_open -= 1
                        continue
                    w = alpha * t
                    feat[ly, lx, 0] += w * cr
                    feat[ly, lx, 1] += w * cg
                    feat[ly, lx, 2] += w * cbl
                    feat[ly, lx, 3] += w * z
                    trans[ly, lx] = t_next
        for y in range(py0, py1):
            for x in range(px0, px1):
                ly, lx = y - py0, x - px0
                t = trans[ly, lx]
                if t >= 0.0 and not placed[ly, lx]:
                    for ch in range(4):
                        feat[ly, lx, ch] += t * s_feat[c, y, x, ch]
                    t = t * (1.0 - s_alpha[c, y, x])
                for ch in range(4):
                    acc[c, y, x, ch] = feat[ly, lx, ch]
                t_final[c, y, x] = abs(t)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy", fastmath=_FAST)
def raster_backward(
    mean2d,
    conic,
    opac,
    colors,
    depth,
    rect,
    offsets,
    ids,
    order,
    s_alpha,
    s_feat,
    s_depth,
    acc,
    t_final,
    g_acc,
    g_alpha,
):
    """Per-intersection gradients (M, N_GRAD) of the loss given g_acc (C,H,W,4) and g_alpha (C,H,W)."""
    _, height, width = t_final.shape
    grads = np.zeros((ids.shape[0], N_GRAD))
    has_static = bool(np.any(s_alpha > 0))
    for j in prange(order.shape[0]):
        job = order[j]
        c, px0, px1, py0, py1 = _tile_bounds(job, width, height)
        trans = np.ones((TILE, TILE))
        placed = np.zeros((TILE, TILE), dtype=np.bool_)
        g_sum = np.zeros((TILE, TILE))
        g_total = np.zeros((TILE, TILE))
        g_pix = np.zeros((TILE, TILE, 5))
        for y in range(py0, py1):
            for x in range(px0, px1):
                tot = g_alpha[c, y, x] * (1.0 - t_final[c, y, x])
                for ch in range(4):
                    tot += g_acc[c, y, x, ch] * acc[c, y, x, ch]
                    g_pix[y - py0, x - px0, ch] = g_acc[c, y, x, ch]
                g_pix[y - py0, x - px0, 4] = g_alpha[c, y, x]
                g_total[y - py0, x - px0] = tot
        n_open = (px1 - px0) * (py1 - py0)
        s_near = _nearest_static(s_depth, c, px0, px1, py0, py1) if has_static else np.inf
        for k in range(offsets[job], offsets[job + 1]):
            if n_open == 0:
                break
            g = ids[k]
            o = opac[g]
            if o * 255.0 < 1.0:
                continue
            s_max = math.log(o * 255.0)
            mx, my, z = mean2d[c, g, 0], mean2d[c, g, 1], depth[c, g]
            ca, cb, cc = conic[c, g, 0], conic[c, g, 1], conic[c, g, 2]
            cr, cg, cbl = colors[g, 0], colors[g, 1], colors[g, 2]
            check_static = z > s_near
            gmx = gmy = ga = gb = gc = go = gr = gg = gbl = gz = 0.0
            for y in range(max(rect[c, g, 2], py0), min(rect[c, g, 3], py1 - 1) + 1):
                ly = y - py0
                dy = my - (y + 0.5)
                for x in range(max(rect[c, g, 0], px0), min(rect[c, g, 1], px1 - 1) + 1):
                    lx = x - px0
                    t = trans[ly, lx]
                    if t < 0.0:
                        continue
                    if check_static and not placed[ly, lx] and z > s_depth[c, y, x]:
                        placed[ly, lx] = True
                        gf = g_pix[ly, lx, 4] * s_alpha[c, y, x]
                        for ch in range(4):
                            gf += g_pix[ly, lx, ch] * s_feat[c, y, x, ch]
                        g_sum[ly, lx] += t * gf
                        t = t * (1.0 - s_alpha[c, y, x])
                        if t < T_MIN:
                            trans[ly, lx] = -t
                            n_open -= 1
                            continue
                        trans[ly, lx] = t
                    dx = mx - (x + 0.5)
                    sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
                    if sigma < 0.0 or sigma > s_max:
                        continue
                    gauss = math.exp(-sigma)
                    raw = o * gauss
                    alpha = min(ALPHA_MAX, raw)
                    if alpha < ALPHA_MIN:
                        continue
                    t_next = t * (1.0 - alpha)
                    if t_next < T_MIN:
                        trans[ly, lx] = -t
                        n_open -= 1
                        continue
                    g0, g1, g2, g3 = g_pix[ly, lx, 0], g_pix[ly, lx, 1], g_pix[ly, lx, 2], g_pix[ly, lx, 3]
                    gf = g0 * cr + g1 * cg + g2 * cbl + g3 * z + g_pix[ly, lx, 4]
                    w = t * alpha
                    g_sum[ly, lx] += w * gf
                    d_alpha = t * gf - (g_total[ly, lx] - g_sum[ly, lx]) / (1.0 - alpha)
                    gr += w * g0
                    gg += w * g1
                    gbl += w * g2
                    gz += w * g3
                    if raw <= ALPHA_MAX:
                        go += d_alpha * gauss
                        d_sigma = -d_alpha * alpha
                        gmx += d_sigma * (ca * dx + cb * dy)
                        gmy += d_sigma * (cb * dx + cc * dy)
                        ga += d_sigma * 0.5 * dx * dx
                        gb += d_sigma * dx * dy
                        gc += d_sigma * 0.5 * dy * dy
                    trans[ly, lx] = t_next
            grads[k, 0], grads[k, 1], grads[k, 2], grads[k, 3], grads[k, 4] = gmx, gmy, ga, gb, gc
            grads[k, 5], grads[k, 6], grads[k, 7], grads[k, 8], grads[k, 9] = go, gr, gg, gbl, gz
    return grads


@njit(cache=True, nogil=True, error_model="numpy")
def reduce_grads(grads, offsets, ids, n_cams, n):
    """Sum per-intersection gradients per Gaussian in a fixed order.

    Returns g_mean2d (C,N,2), g_conic (C,N,3), g_depth (C,N), g_opac (N,), g_colors (N,3).
    """
    g_mean2d = np.zeros((n_cams, n, 2))
    g_conic = np.zeros((n_cams, n, 3))
    g_depth = np.zeros((n_cams, n))
    g_opac = np.zeros(n)
    g_colors = np.zeros((n, 3))
    n_tiles = (offsets.shape[0] - 1) // n_cams
    for job in range(offsets.shape[0] - 1):
        c = job // n_tiles
        for k in range(offsets[job], offsets[job + 1]):
            g = ids[k]
            g_mean2d[c, g, 0] += grads[k, 0]
            g_mean2d[c, g, 1] += grads[k, 1]
            g_conic[c, g, 0] += grads[k, 2]
            g_conic[c, g, 1] += grads[k, 3]
            g_conic[c, g, 2] += grads[k, 4]
            g_opac[g] += grads[k, 5]
            g_colors[g, 0] += grads[k, 6]
            g_colors[g, 1] += grads[k, 7]
            g_colors[g, 2] += grads[k, 8]
            g_depth[c, g] += grads[k, 9]
    return g_mean2d, g_conic, g_depth, g_opac, g_colors
