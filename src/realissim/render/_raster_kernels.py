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


@njit(cache=True, error_model="numpy")
def bin_tiles(mean2d, radius, depth, width, height):
    """Bin visible Gaussians into tiles in depth order (ties by index).

    Returns offsets (C·tiles+1,) into ids (M,) of Gaussian indices, and rect (C,N,4) int32: each
    Gaussian's inclusive pixel range x0, x1, y0, y1 (empty when x0 > x1).
    """
    n_cams, n = depth.shape
    tiles_x = (width + TILE - 1) // TILE
    n_tiles = tiles_x * ((height + TILE - 1) // TILE)
    rect = np.empty((n_cams, n, 4), dtype=np.int32)
    counts = np.zeros(n_cams * n_tiles + 1, dtype=np.int64)
    orders = np.empty((n_cams, n), dtype=np.int64)
    for c in range(n_cams):
        orders[c] = np.argsort(depth[c], kind="mergesort")
        for i in range(n):
            rect[c, i, 0], rect[c, i, 1] = 1, 0
            rad = radius[c, i]
            if rad <= 0:
                continue
            x0 = max(0, math.ceil(mean2d[c, i, 0] - rad - 0.5))
            x1 = min(width - 1, math.floor(mean2d[c, i, 0] + rad - 0.5))
            y0 = max(0, math.ceil(mean2d[c, i, 1] - rad - 0.5))
            y1 = min(height - 1, math.floor(mean2d[c, i, 1] + rad - 0.5))
            if x0 > x1 or y0 > y1:
                continue
            rect[c, i, 0], rect[c, i, 1], rect[c, i, 2], rect[c, i, 3] = x0, x1, y0, y1
            for ty in range(y0 // TILE, y1 // TILE + 1):
                for tx in range(x0 // TILE, x1 // TILE + 1):
                    counts[c * n_tiles + ty * tiles_x + tx + 1] += 1
    offsets = np.cumsum(counts)
    cursor = offsets[:-1].copy()
    ids = np.empty(offsets[-1], dtype=np.int32)
    for c in range(n_cams):
        for i in orders[c]:
            if rect[c, i, 0] > rect[c, i, 1]:
                continue
            for ty in range(rect[c, i, 2] // TILE, rect[c, i, 3] // TILE + 1):
                for tx in range(rect[c, i, 0] // TILE, rect[c, i, 1] // TILE + 1):
                    job = c * n_tiles + ty * tiles_x + tx
                    ids[cursor[job]] = i
                    cursor[job] += 1
    return offsets, ids, rect


@njit(cache=True, error_model="numpy")
def _tile_bounds(job, width, height):
    """Camera index and pixel bounds [x0, x1) × [y0, y1) of flat tile index `job`."""
    tiles_x = (width + TILE - 1) // TILE
    n_tiles = tiles_x * ((height + TILE - 1) // TILE)
    c = job // n_tiles
    t = job % n_tiles
    x0 = (t % tiles_x) * TILE
    y0 = (t // tiles_x) * TILE
    return c, x0, min(x0 + TILE, width), y0, min(y0 + TILE, height)


@njit(cache=True, error_model="numpy")
def _row_span(mx, dy, ca, cb, cc, s_max, x0, x1):
    """Pixels [xa, xb] of a row (offset dy from the centre) where sigma ≤ s_max, within [x0, x1], widened by
    one pixel so that rounding never drops a pixel; every pixel is still tested exactly afterwards."""
    disc = (cb * dy) * (cb * dy) - ca * (cc * dy * dy - 2.0 * s_max)
    if disc < 0.0:
        return 1, 0
    root = math.sqrt(disc)
    lo = mx - 0.5 - (-cb * dy + root) / ca
    hi = mx - 0.5 - (-cb * dy - root) / ca
    return max(x0, math.floor(lo) - 1), min(x1, math.ceil(hi) + 1)


@njit(cache=True, parallel=True, error_model="numpy", fastmath=_FAST)
def raster_forward(mean2d, conic, opac, colors, depth, rect, offsets, ids, s_alpha, s_feat, s_depth, acc, t_final):
    """Composite every tile; fill acc (C,H,W,4: premultiplied RGB, depth) and t_final (C,H,W).

    s_alpha (C,H,W), s_feat (C,H,W,4), s_depth (C,H,W) describe the static layer (alpha 0 and depth
    +inf where there is none); it is composited once per pixel, before the first Gaussian deeper than it.
    """
    _, height, width = t_final.shape
    has_static = bool(np.any(s_alpha > 0))
    for job in prange(offsets.shape[0] - 1):
        c, px0, px1, py0, py1 = _tile_bounds(job, width, height)
        trans = np.ones((TILE, TILE))
        feat = np.zeros((TILE, TILE, 4))
        done = np.zeros((TILE, TILE), dtype=np.bool_)
        placed = np.zeros((TILE, TILE), dtype=np.bool_)
        for k in range(offsets[job], offsets[job + 1]):
            g = ids[k]
            x0, x1 = max(rect[c, g, 0], px0), min(rect[c, g, 1], px1 - 1)
            y0, y1 = max(rect[c, g, 2], py0), min(rect[c, g, 3], py1 - 1)
            mx, my, z, o = mean2d[c, g, 0], mean2d[c, g, 1], depth[c, g], opac[g]
            ca, cb, cc = conic[c, g, 0], conic[c, g, 1], conic[c, g, 2]
            cr, cg, cbl = colors[g, 0], colors[g, 1], colors[g, 2]
            if o * 255.0 < 1.0:
                continue
            s_max = math.log(o * 255.0)
            for y in range(y0, y1 + 1):
                ly = y - py0
                dy = my - (y + 0.5)
                xa, xb = _row_span(mx, dy, ca, cb, cc, s_max, x0, x1)
                for x in range(xa, xb + 1):
                    lx = x - px0
                    if done[ly, lx]:
                        continue
                    if has_static and not placed[ly, lx] and z > s_depth[c, y, x]:
                        placed[ly, lx] = True
                        t = trans[ly, lx]
                        for ch in range(4):
                            feat[ly, lx, ch] += t * s_feat[c, y, x, ch]
                        trans[ly, lx] = t * (1.0 - s_alpha[c, y, x])
                        if trans[ly, lx] < T_MIN:
                            done[ly, lx] = True
                            continue
                    dx = mx - (x + 0.5)
                    sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
                    if sigma < 0.0:
                        continue
                    alpha = min(ALPHA_MAX, o * math.exp(-sigma))
                    if alpha < ALPHA_MIN:
                        continue
                    t = trans[ly, lx]
                    t_next = t * (1.0 - alpha)
                    if t_next < T_MIN:
                        done[ly, lx] = True
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
                if not done[ly, lx] and not placed[ly, lx]:
                    for ch in range(4):
                        feat[ly, lx, ch] += t * s_feat[c, y, x, ch]
                    t = t * (1.0 - s_alpha[c, y, x])
                for ch in range(4):
                    acc[c, y, x, ch] = feat[ly, lx, ch]
                t_final[c, y, x] = t


@njit(cache=True, parallel=True, error_model="numpy", fastmath=_FAST)
def raster_backward(
    mean2d, conic, opac, colors, depth, rect, offsets, ids, s_alpha, s_feat, s_depth, acc, t_final, g_acc, g_alpha
):
    """Per-intersection gradients (M, N_GRAD) of the loss given g_acc (C,H,W,4) and g_alpha (C,H,W)."""
    _, height, width = t_final.shape
    grads = np.zeros((ids.shape[0], N_GRAD))
    has_static = bool(np.any(s_alpha > 0))
    for job in prange(offsets.shape[0] - 1):
        c, px0, px1, py0, py1 = _tile_bounds(job, width, height)
        trans = np.ones((TILE, TILE))
        done = np.zeros((TILE, TILE), dtype=np.bool_)
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
        for k in range(offsets[job], offsets[job + 1]):
            g = ids[k]
            x0, x1 = max(rect[c, g, 0], px0), min(rect[c, g, 1], px1 - 1)
            y0, y1 = max(rect[c, g, 2], py0), min(rect[c, g, 3], py1 - 1)
            mx, my, z, o = mean2d[c, g, 0], mean2d[c, g, 1], depth[c, g], opac[g]
            ca, cb, cc = conic[c, g, 0], conic[c, g, 1], conic[c, g, 2]
            cr, cg, cbl = colors[g, 0], colors[g, 1], colors[g, 2]
            gmx = gmy = ga = gb = gc = go = gr = gg = gbl = gz = 0.0
            if o * 255.0 < 1.0:
                continue
            s_max = math.log(o * 255.0)
            for y in range(y0, y1 + 1):
                ly = y - py0
                dy = my - (y + 0.5)
                xa, xb = _row_span(mx, dy, ca, cb, cc, s_max, x0, x1)
                for x in range(xa, xb + 1):
                    lx = x - px0
                    if done[ly, lx]:
                        continue
                    if has_static and not placed[ly, lx] and z > s_depth[c, y, x]:
                        placed[ly, lx] = True
                        t = trans[ly, lx]
                        gf = g_alpha[c, y, x] * s_alpha[c, y, x]
                        for ch in range(4):
                            gf += g_acc[c, y, x, ch] * s_feat[c, y, x, ch]
                        g_sum[ly, lx] += t * gf
                        trans[ly, lx] = t * (1.0 - s_alpha[c, y, x])
                        if trans[ly, lx] < T_MIN:
                            done[ly, lx] = True
                            continue
                    dx = mx - (x + 0.5)
                    sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
                    if sigma < 0.0:
                        continue
                    gauss = math.exp(-sigma)
                    raw = o * gauss
                    alpha = min(ALPHA_MAX, raw)
                    if alpha < ALPHA_MIN:
                        continue
                    t = trans[ly, lx]
                    t_next = t * (1.0 - alpha)
                    if t_next < T_MIN:
                        done[ly, lx] = True
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


@njit(cache=True, error_model="numpy")
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
