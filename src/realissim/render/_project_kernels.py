"""Numba kernels of the fast CPU rasteriser, part 1: EWA projection of Gaussians and its backward.

Same maths as `realissim.render.reference.project`, written out per Gaussian and camera so that
no small matrices are allocated. Gaussians run in parallel; each accumulates its own gradients over
the cameras, so results do not depend on the thread count. Symmetric 3×3 matrices are passed as
6-tuples (xx, xy, xz, yy, yz, zz); a symmetric gradient holds the derivative with respect to each
individual entry.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from realissim.render.common import FOV_CLAMP


@njit(cache=True, nogil=True, error_model="numpy")
def _rotmat(q0, q1, q2, q3):
    """Row-major rotation entries of the normalised quaternion wxyz, that unit quaternion, and |q|."""
    n = math.sqrt(q0 * q0 + q1 * q1 + q2 * q2 + q3 * q3)
    w, x, y, z = q0 / n, q1 / n, q2 / n, q3 / n
    r = (
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    )  # fmt: skip
    return r, (w, x, y, z), n


@njit(cache=True, nogil=True, error_model="numpy")
def _sandwich_nt(A, S):
    """A S Aᵀ as a 6-tuple, for a 3×3 array A and symmetric S as a 6-tuple."""
    s0, s1, s2, s3, s4, s5 = S
    a00, a01, a02 = A[0, 0], A[0, 1], A[0, 2]
    a10, a11, a12 = A[1, 0], A[1, 1], A[1, 2]
    a20, a21, a22 = A[2, 0], A[2, 1], A[2, 2]
    w00 = a00 * s0 + a01 * s1 + a02 * s2
    w01 = a00 * s1 + a01 * s3 + a02 * s4
    w02 = a00 * s2 + a01 * s4 + a02 * s5
    w10 = a10 * s0 + a11 * s1 + a12 * s2
    w11 = a10 * s1 + a11 * s3 + a12 * s4
    w12 = a10 * s2 + a11 * s4 + a12 * s5
    w20 = a20 * s0 + a21 * s1 + a22 * s2
    w21 = a20 * s1 + a21 * s3 + a22 * s4
    w22 = a20 * s2 + a21 * s4 + a22 * s5
    return (
        w00 * a00 + w01 * a01 + w02 * a02,
        w00 * a10 + w01 * a11 + w02 * a12,
        w00 * a20 + w01 * a21 + w02 * a22,
        w10 * a10 + w11 * a11 + w12 * a12,
        w10 * a20 + w11 * a21 + w12 * a22,
        w20 * a20 + w21 * a21 + w22 * a22,
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _sandwich_t(A, S):
    """Aᵀ S A as a 6-tuple, for a 3×3 array A and symmetric S as a 6-tuple."""
    s0, s1, s2, s3, s4, s5 = S
    a00, a01, a02 = A[0, 0], A[0, 1], A[0, 2]
    a10, a11, a12 = A[1, 0], A[1, 1], A[1, 2]
    a20, a21, a22 = A[2, 0], A[2, 1], A[2, 2]
    w00 = a00 * s0 + a10 * s1 + a20 * s2
    w01 = a00 * s1 + a10 * s3 + a20 * s4
    w02 = a00 * s2 + a10 * s4 + a20 * s5
    w10 = a01 * s0 + a11 * s1 + a21 * s2
    w11 = a01 * s1 + a11 * s3 + a21 * s4
    w12 = a01 * s2 + a11 * s4 + a21 * s5
    w20 = a02 * s0 + a12 * s1 + a22 * s2
    w21 = a02 * s1 + a12 * s3 + a22 * s4
    w22 = a02 * s2 + a12 * s4 + a22 * s5
    return (
        w00 * a00 + w01 * a10 + w02 * a20,
        w00 * a01 + w01 * a11 + w02 * a21,
        w00 * a02 + w01 * a12 + w02 * a22,
        w10 * a01 + w11 * a11 + w12 * a21,
        w10 * a02 + w11 * a12 + w12 * a22,
        w20 * a02 + w21 * a12 + w22 * a22,
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _limits(K, width, height):
    """FOV clamp limits (x+, x−, y+, y−) on x/z and y/z."""
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    return (
        (width - cx) / fx + FOV_CLAMP * 0.5 * width / fx,
        cx / fx + FOV_CLAMP * 0.5 * width / fx,
        (height - cy) / fy + FOV_CLAMP * 0.5 * height / fy,
        cy / fy + FOV_CLAMP * 0.5 * height / fy,
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _project_one(mean, q, s, R, t_cw, K, lims, eps2d):
    """Camera point, Σ_world, Σc, Jacobian, clamp flags and 2D covariance of one Gaussian in one camera."""
    t = (
        R[0, 0] * mean[0] + R[0, 1] * mean[1] + R[0, 2] * mean[2] + t_cw[0],
        R[1, 0] * mean[0] + R[1, 1] * mean[1] + R[1, 2] * mean[2] + t_cw[1],
        R[2, 0] * mean[0] + R[2, 1] * mean[1] + R[2, 2] * mean[2] + t_cw[2],
    )
    r, qn, qlen = _rotmat(q[0], q[1], q[2], q[3])
    s2 = (s[0] * s[0], s[1] * s[1], s[2] * s[2])
    sw = (
        r[0] * r[0] * s2[0] + r[1] * r[1] * s2[1] + r[2] * r[2] * s2[2],
        r[0] * r[3] * s2[0] + r[1] * r[4] * s2[1] + r[2] * r[5] * s2[2],
        r[0] * r[6] * s2[0] + r[1] * r[7] * s2[1] + r[2] * r[8] * s2[2],
        r[3] * r[3] * s2[0] + r[4] * r[4] * s2[1] + r[5] * r[5] * s2[2],
        r[3] * r[6] * s2[0] + r[4] * r[7] * s2[1] + r[5] * r[8] * s2[2],
        r[6] * r[6] * s2[0] + r[7] * r[7] * s2[1] + r[8] * r[8] * s2[2],
    )
    sc = _sandwich_nt(R, sw)
    tz = t[2]
    fx, fy = K[0, 0], K[1, 1]
    u, v = t[0] / tz, t[1] / tz
    cu, cv = min(max(u, -lims[1]), lims[0]), min(max(v, -lims[3]), lims[2])
    jx, jy = tz * cu, tz * cv
    J = (fx / tz, -fx * jx / (tz * tz), fy / tz, -fy * jy / (tz * tz))
    # T = J Σc rows (J has zeros at (0,1) and (1,0)).
    T0 = (J[0] * sc[0] + J[1] * sc[2], J[0] * sc[1] + J[1] * sc[4], J[0] * sc[2] + J[1] * sc[5])
    T1 = (J[2] * sc[1] + J[3] * sc[2], J[2] * sc[3] + J[3] * sc[4], J[2] * sc[4] + J[3] * sc[5])
    a = T0[0] * J[0] + T0[2] * J[1] + eps2d
    b = T0[1] * J[2] + T0[2] * J[3]
    d = T1[1] * J[2] + T1[2] * J[3] + eps2d
    return t, r, qn, qlen, sc, J, (jx, jy, cu != u, cv != v), T0, T1, (a, b, d)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def project_forward(
    means, quats, scales, R_CW, t_CW, Ks, width, height, near, far, eps2d, mean2d, conic, depth, radius
):
    """Fill mean2d (C,N,2) px, conic (C,N,3), depth (C,N) m and radius (C,N) int32 px (0 = culled)."""
    n_cams, n = depth.shape
    for i in prange(n):
        for c in range(n_cams):
            K = Ks[c]
            lims = _limits(K, width, height)
            t, _, _, _, _, _, _, _, _, cov = _project_one(
                means[i], quats[i], scales[i], R_CW[c], t_CW[c], K, lims, eps2d
            )
            tz = t[2]
            depth[c, i] = tz
            radius[c, i] = 0
            if not (tz > near and tz < far):
                continue
            a, b, d = cov
            det = a * d - b * b
            if not det > 0:
                continue
            mx = K[0, 0] * t[0] / tz + K[0, 2]
            my = K[1, 1] * t[1] / tz + K[1, 2]
            half = 0.5 * (a + d)
            rad = math.ceil(3.0 * math.sqrt(half + math.sqrt(max(half * half - det, 0.01))))
            if mx + rad <= 0 or mx - rad >= width or my + rad <= 0 or my - rad >= height:
                continue
            mean2d[c, i, 0], mean2d[c, i, 1] = mx, my
            conic[c, i, 0], conic[c, i, 1], conic[c, i, 2] = d / det, -b / det, a / det
            radius[c, i] = rad


@njit(cache=True, nogil=True, error_model="numpy")
def _grad_m(gs, r):
    """2 G_Σ Rq (row-major 9-tuple) from dL/dΣ_world gs (6-tuple): dL/dM = this · S for M = Rq S."""
    return (
        2.0 * (gs[0] * r[0] + gs[1] * r[3] + gs[2] * r[6]),
        2.0 * (gs[0] * r[1] + gs[1] * r[4] + gs[2] * r[7]),
        2.0 * (gs[0] * r[2] + gs[1] * r[5] + gs[2] * r[8]),
        2.0 * (gs[1] * r[0] + gs[3] * r[3] + gs[4] * r[6]),
        2.0 * (gs[1] * r[1] + gs[3] * r[4] + gs[4] * r[7]),
        2.0 * (gs[1] * r[2] + gs[3] * r[5] + gs[4] * r[8]),
        2.0 * (gs[2] * r[0] + gs[4] * r[3] + gs[5] * r[6]),
        2.0 * (gs[2] * r[1] + gs[4] * r[4] + gs[5] * r[7]),
        2.0 * (gs[2] * r[2] + gs[4] * r[5] + gs[5] * r[8]),
    )


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def project_backward(means, quats, scales, R_CW, t_CW, Ks, width, height, radius, conic, g_mean2d, g_conic, g_depth):
    """Gradients (N,3), (N,4), (N,3) for means, quats, scales from those of mean2d, conic and depth (the low-pass
    eps2d is a constant of the covariance: its gradient goes through `conic`, so it is not needed here)."""
    n_cams, n = radius.shape
    g_means = np.zeros((n, 3))
    g_quats = np.zeros((n, 4))
    g_scales = np.zeros((n, 3))
    for i in prange(n):
        for c in range(n_cams):
            if radius[c, i] <= 0:
                continue
            K, R = Ks[c], R_CW[c]
            fx, fy = K[0, 0], K[1, 1]
            t, r, qn, qlen, _, J, clamp, T0, T1, _ = _project_one(
                means[i], quats[i], scales[i], R, t_CW[c], K, _limits(K, width, height), 0.0
            )
            tx, ty, tz = t
            ca, cb, cc = conic[c, i, 0], conic[c, i, 1], conic[c, i, 2]
            ga, gb, gc = g_conic[c, i, 0], 0.5 * g_conic[c, i, 1], g_conic[c, i, 2]
            # dL/dV = -Q G_Q Q for the 2D covariance V and conic Q.
            p00, p01 = ca * ga + cb * gb, ca * gb + cb * gc
            p10, p11 = cb * ga + cc * gb, cb * gb + cc * gc
            v00, v01, v11 = -(p00 * ca + p01 * cb), -(p00 * cb + p01 * cc), -(p10 * cb + p11 * cc)
            # V = J Σc Jᵀ: dL/dJ = 2 G_V (J Σc), dL/dΣc = Jᵀ G_V J.
            gj00 = 2 * (v00 * T0[0] + v01 * T1[0])
            gj02 = 2 * (v00 * T0[2] + v01 * T1[2])
            gj11 = 2 * (v01 * T0[1] + v11 * T1[1])
            gj12 = 2 * (v01 * T0[2] + v11 * T1[2])
            u0 = (v00 * J[0], v01 * J[2], v00 * J[1] + v01 * J[3])
            u1 = (v01 * J[0], v11 * J[2], v01 * J[1] + v11 * J[3])
            g_sc = (
                J[0] * u0[0], J[0] * u0[1], J[0] * u0[2],
                J[2] * u1[1], J[2] * u1[2], J[1] * u0[2] + J[3] * u1[2],
            )  # fmt: skip
            jx, jy, clamped_x, clamped_y = clamp
            gtz = -gj00 * fx / (tz * tz) - gj11 * fy / (tz * tz)
            gtz += 2 * gj02 * fx * jx / (tz * tz * tz) + 2 * gj12 * fy * jy / (tz * tz * tz)
            g_jx, g_jy = -gj02 * fx / (tz * tz), -gj12 * fy / (tz * tz)
            gtx, gty = 0.0, 0.0
            if clamped_x:
                gtz += g_jx * jx / tz
            else:
                gtx += g_jx
            if clamped_y:
                gtz += g_jy * jy / tz
            else:
                gty += g_jy
            gm0, gm1 = g_mean2d[c, i, 0], g_mean2d[c, i, 1]
            gtx += gm0 * fx / tz
            gty += gm1 * fy / tz
            gtz += -(gm0 * fx * tx + gm1 * fy * ty) / (tz * tz) + g_depth[c, i]
            for k in range(3):
                g_means[i, k] += R[0, k] * gtx + R[1, k] * gty + R[2, k] * gtz
            gs = _sandwich_t(R, g_sc)
            s = (scales[i, 0], scales[i, 1], scales[i, 2])
            m = _grad_m(gs, r)
            g = (
                m[0] * s[0] * s[0], m[1] * s[1] * s[1], m[2] * s[2] * s[2],
                m[3] * s[0] * s[0], m[4] * s[1] * s[1], m[5] * s[2] * s[2],
                m[6] * s[0] * s[0], m[7] * s[1] * s[1], m[8] * s[2] * s[2],
            )  # fmt: skip
            g_scales[i, 0] += s[0] * (m[0] * r[0] + m[3] * r[3] + m[6] * r[6])
            g_scales[i, 1] += s[1] * (m[1] * r[1] + m[4] * r[4] + m[7] * r[7])
            g_scales[i, 2] += s[2] * (m[2] * r[2] + m[5] * r[5] + m[8] * r[8])
            w, x, y, z = qn
            gw = 2 * (-z * g[1] + y * g[2] + z * g[3] - x * g[5] - y * g[6] + x * g[7])
            gx = 2 * (y * g[1] + z * g[2] + y * g[3] - 2 * x * g[4] - w * g[5] + z * g[6] + w * g[7] - 2 * x * g[8])
            gy = 2 * (-2 * y * g[0] + x * g[1] + w * g[2] + x * g[3] + z * g[5] - w * g[6] + z * g[7] - 2 * y * g[8])
            gz = 2 * (-2 * z * g[0] - w * g[1] + x * g[2] + w * g[3] - 2 * z * g[4] + y * g[5] + x * g[6] + y * g[7])
            dot = w * gw + x * gx + y * gy + z * gz
            g_quats[i, 0] += (gw - w * dot) / qlen
            g_quats[i, 1] += (gx - x * dot) / qlen
            g_quats[i, 2] += (gy - y * dot) / qlen
            g_quats[i, 3] += (gz - z * dot) / qlen
    return g_means, g_quats, g_scales
