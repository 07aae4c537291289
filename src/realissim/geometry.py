"""Rotations, poses and pinhole cameras in the project's conventions (docs/design.md §2).

Quaternions are [w, x, y, z]; arrays may carry any leading batch shape. Cameras use OpenCV axes:
x right, y down, z forward. Nothing here depends on the rest of realissim.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike


def quat_to_mat(quat: ArrayLike) -> np.ndarray:
    """Rotation matrices (..., 3, 3) from quaternions (..., 4) [w, x, y, z] (normalised first)."""
    q = np.asarray(quat, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


def mat_to_quat(mat: ArrayLike) -> np.ndarray:
    """Unit quaternion [w, x, y, z] with w ≥ 0 from one rotation matrix (3, 3)."""
    m = np.asarray(mat, dtype=np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0:
        s = 2.0 * math.sqrt(trace + 1.0)
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    out = np.asarray(q)
    out /= np.linalg.norm(out)
    return out if out[0] >= 0 else -out


def axis_angle_quat(axis: ArrayLike, angle: float) -> np.ndarray:
    """Quaternion [w, x, y, z] rotating by `angle` (rad) about `axis` (normalised)."""
    a = np.asarray(axis, dtype=np.float64)
    a = a / np.linalg.norm(a)
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * a])


def yaw_quat(yaw: float) -> tuple[float, float, float, float]:
    """Quaternion [w, x, y, z] for a rotation by `yaw` (rad) about world z."""
    return (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))


def planar_rotation(angle: float) -> np.ndarray:
    """The (2, 2) matrix turning plane vectors by `angle` rad (counter-clockwise)."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]])


def quat_yaw(quat: ArrayLike) -> np.ndarray:
    """Heading (rad, in (-π, π]) of the body x axis projected on the world xy plane; shape (...)."""
    r = quat_to_mat(quat)
    return np.arctan2(r[..., 1, 0], r[..., 0, 0])


def quat_mul(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Hamilton product a ⊗ b of quaternions (..., 4) [w, x, y, z]."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def pose_matrix(pos: ArrayLike, quat: ArrayLike) -> np.ndarray:
    """4×4 homogeneous transform from translation (3,) m and quaternion (4,) [w, x, y, z]."""
    out = np.eye(4)
    out[:3, :3] = quat_to_mat(quat)
    out[:3, 3] = np.asarray(pos, dtype=np.float64)
    return out


def look_at(eye: ArrayLike, target: ArrayLike, up: ArrayLike = (0.0, 0.0, 1.0)) -> np.ndarray:
    """Camera pose X_WC (4, 4), OpenCV axes, at `eye` looking at `target` with world `up` on top."""
    eye = np.asarray(eye, dtype=np.float64)
    z = np.asarray(target, dtype=np.float64) - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, np.asarray(up, dtype=np.float64))
    if np.linalg.norm(x) < 1e-9:
        raise ValueError("look_at: viewing direction is parallel to `up`")
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    out = np.eye(4)
    out[:3, 0], out[:3, 1], out[:3, 2], out[:3, 3] = x, y, z, eye
    return out


def intrinsics_from_fov(width: int, height: int, fovy: float) -> np.ndarray:
    """K (3, 3) for square pixels, principal point at the image centre, vertical field of view `fovy` rad."""
    f = 0.5 * height / math.tan(0.5 * fovy)
    return np.array([[f, 0.0, 0.5 * width], [0.0, f, 0.5 * height], [0.0, 0.0, 1.0]])


def project_points(points_W: ArrayLike, K: ArrayLike, X_WC: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Project world points (N, 3) into a camera: returns pixels (N, 2) in K's coordinates and depths (N,)."""
    p = np.asarray(points_W, dtype=np.float64)
    X_CW = np.linalg.inv(np.asarray(X_WC, dtype=np.float64))
    p_C = p @ X_CW[:3, :3].T + X_CW[:3, 3]
    depth = p_C[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = (p_C @ np.asarray(K, dtype=np.float64).T)[:, :2] / depth[:, None]
    return uv, depth
