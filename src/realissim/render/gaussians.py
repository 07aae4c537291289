"""Gaussians attached rigidly to bodies, as torch tensors, and their differentiable world placement."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Gaussians:
    """N 3D Gaussians: means (N,3) m, quats (N,4) wxyz, scales (N,3) std-dev m, colors (N,3) RGB in [0,1],
    opacities (N,) in [0,1]; the frame (world or a body's) is whatever the holder says."""

    means: Tensor
    quats: Tensor
    scales: Tensor
    colors: Tensor
    opacities: Tensor

    def __post_init__(self) -> None:
        n = self.means.shape[0]
        for f, width in (("means", 3), ("quats", 4), ("scales", 3), ("colors", 3), ("opacities", None)):
            t = getattr(self, f)
            want = (n,) if width is None else (n, width)
            if tuple(t.shape) != want:
                raise ValueError(f"{f}: expected shape {want}, got {tuple(t.shape)}")

    def __len__(self) -> int:
        return self.means.shape[0]

    @staticmethod
    def from_arrays(arrays: object, dtype: torch.dtype = torch.float32) -> Gaussians:
        """From any object with numpy attributes means, quats, scales, colors, opacities (e.g. GaussianArrays)."""
        return Gaussians(
            **{f.name: torch.tensor(np.asarray(getattr(arrays, f.name)), dtype=dtype) for f in fields(Gaussians)}
        )

    def select(self, index: Tensor) -> Gaussians:
        """The subset given by a boolean mask or index tensor (N,)."""
        return Gaussians(**{f.name: getattr(self, f.name)[index] for f in fields(Gaussians)})

    def args(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(means, quats, scales, colors, opacities), the order `rasterize` takes them."""
        return self.means, self.quats, self.scales, self.colors, self.opacities


def quat_multiply(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product a ⊗ b of quaternions (...,4) wxyz (differentiable, broadcasting)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def quat_rotate(q: Tensor, v: Tensor) -> Tensor:
    """Rotate vectors v (...,3) by unit quaternions q (...,4) wxyz (differentiable, broadcasting)."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.linalg.cross(u, v, dim=-1)
    return v + w * t + torch.linalg.cross(u, t, dim=-1)


def place(
    local_means: Tensor, local_quats: Tensor, body_index: Tensor, body_pos: Tensor, body_quat: Tensor
) -> tuple[Tensor, Tensor]:
    """World means (N,3) and quats (N,4) of Gaussians attached to bodies.

    local_means (N,3) m and local_quats (N,4) wxyz are in each Gaussian's body frame; body_index (N,) long
    picks its body in body_pos (B,3) m and body_quat (B,4) wxyz (unit), the bodies' world poses.
    Differentiable with respect to every floating-point input.
    """
    q = body_quat[body_index]
    return body_pos[body_index] + quat_rotate(q, local_means), quat_multiply(q, local_quats)
