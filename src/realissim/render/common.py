"""Conventions shared by every rasteriser backend, input checks and the final image composition.

All backends implement the same image formation (standard 3DGS, as in gsplat's "classic" mode):

* EWA projection: the camera-frame covariance is mapped through the perspective Jacobian, whose
  x/y are clamped to 1.3× the field of view as in 3DGS, and `EPS2D` px² is added to the 2D
  covariance (a low-pass filter of about 0.3 px).
* Footprint: a Gaussian can only touch pixels whose centre lies within the square of half-size
  `ceil(3 * sqrt(largest eigenvalue of the 2D covariance))` px around its projected centre.
* Pixel (x, y) is sampled at its centre (x + 0.5, y + 0.5) in K's coordinates.
* Alpha: `min(ALPHA_MAX, opacity * exp(-½ dᵀ Σ₂⁻¹ d))`; contributions below `ALPHA_MIN` are skipped.
* Gaussians are composited front to back in order of their centre's camera depth (ties by index);
  a pixel stops as soon as a Gaussian would bring its transmittance below `T_MIN` (that Gaussian
  is not composited).
* Accumulated features: RGB and camera z-depth, each weighted by `T·alpha`; the background (if any)
  is composited behind, and depth is returned normalised by the accumulated alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

ALPHA_MAX = 0.99
"""Clamp of a single Gaussian's alpha (3DGS)."""
ALPHA_MIN = 1.0 / 255.0
"""Alphas below this are skipped."""
T_MIN = 1e-4
"""Transmittance below which a pixel stops compositing."""
EPS2D = 0.3
"""Added to the diagonal of each 2D covariance, px²."""
FOV_CLAMP = 0.3
"""The perspective Jacobian is evaluated with x/z, y/z clamped to the image plus this fraction of the half-FOV."""
DEFAULT_NEAR = 0.01
"""m; Gaussians whose centre is nearer than this (or behind the camera) are culled."""
DEFAULT_FAR = 100.0
"""m; Gaussians whose centre is farther than this are culled."""


@dataclass(frozen=True)
class StaticLayer:
    """Pre-rendered Gaussians that never move, per camera, composited at their own depth.

    rgb (C,H,W,3) premultiplied colour (rendered on a black background), alpha (C,H,W) accumulated
    opacity, depth_acc (C,H,W) alpha-weighted camera z-depth in m (premultiplied like rgb).
    The layer is treated as one surface per pixel at depth `depth_acc / alpha`; no gradient flows
    into it.
    """

    rgb: Tensor
    alpha: Tensor
    depth_acc: Tensor
    _numpy: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """Cache of `numpy(dtype)`: the layer never changes, and it is read on every rasterisation."""

    def numpy(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The layer as contiguous numpy arrays of `dtype`: alpha (C,H,W), features (C,H,W,4), depth (C,H,W)."""
        key = np.dtype(dtype).str
        if key not in self._numpy:
            as_np = lambda t: np.ascontiguousarray(t.detach().cpu().to(torch.float64).numpy(), dtype=dtype)  # noqa: E731
            self._numpy[key] = (as_np(self.alpha), as_np(self.features()), as_np(self.depth))
        return self._numpy[key]

    @property
    def depth(self) -> Tensor:
        """(C,H,W) expected depth of the layer, m; +inf where the layer is empty."""
        empty = self.alpha <= 0
        return torch.where(
            empty, torch.full_like(self.alpha, float("inf")), self.depth_acc / self.alpha.clamp_min(1e-12)
        )

    def features(self) -> Tensor:
        """(C,H,W,4) premultiplied RGB and depth."""
        return torch.cat([self.rgb, self.depth_acc[..., None]], dim=-1)

    def crop(self, x0: Sequence[int], y0: Sequence[int], width: int, height: int) -> StaticLayer:
        """The layer cut to one window of width × height px per camera, camera c's starting at pixel
        (x0[c], y0[c]) (for rendering a crop: the same camera with its principal point moved by −x0, −y0).
        Cached numpy conversions are cut too, so the crop costs no conversion."""
        if len(x0) != self.alpha.shape[0] or len(y0) != self.alpha.shape[0]:
            raise ValueError(f"x0, y0: one offset per camera ({self.alpha.shape[0]}), got {len(x0)} and {len(y0)}")
        h, w = self.alpha.shape[1:]
        for c, (x, y) in enumerate(zip(x0, y0)):
            if not (0 <= x <= w - width and 0 <= y <= h - height):
                raise ValueError(f"crop of camera {c}: {width}x{height} at ({x}, {y}) leaves the {w}x{h} layer")
        windows = list(zip(x0, y0))

        def cut(t: Tensor | np.ndarray) -> Tensor | np.ndarray:
            parts = [t[c, y : y + height, x : x + width] for c, (x, y) in enumerate(windows)]
            return torch.stack(parts) if isinstance(t, Tensor) else np.ascontiguousarray(np.stack(parts))

        out = StaticLayer(cut(self.rgb), cut(self.alpha), cut(self.depth_acc))  # type: ignore[arg-type]
        for key, arrays in self._numpy.items():
            out._numpy[key] = tuple(cut(a) for a in arrays)
        return out

    def select(self, cameras: Sequence[int]) -> StaticLayer:
        """The layer of some cameras only, in the order given (cached numpy conversions kept)."""
        index = list(cameras)
        out = StaticLayer(self.rgb[index], self.alpha[index], self.depth_acc[index])
        for key, arrays in self._numpy.items():
            out._numpy[key] = tuple(np.ascontiguousarray(a[index]) for a in arrays)
        return out


def check_inputs(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    colors: Tensor,
    opacities: Tensor,
    Ks: Tensor,
    X_WCs: Tensor,
    width: int,
    height: int,
) -> None:
    """Raise ValueError naming the first argument with a wrong shape, dtype, device or a non-finite value."""
    n = means.shape[0] if means.ndim == 2 else -1
    expected = {
        "means": (means, (n, 3)),
        "quats": (quats, (n, 4)),
        "scales": (scales, (n, 3)),
        "colors": (colors, (n, 3)),
        "opacities": (opacities, (n,)),
    }
    if n < 0:
        raise ValueError(f"means: expected shape (N, 3), got {tuple(means.shape)}")
    for name, (tensor, shape) in expected.items():
        if not isinstance(tensor, Tensor):
            raise ValueError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(tensor.shape)}")
    c = Ks.shape[0] if Ks.ndim == 3 else -1
    if c < 1 or tuple(Ks.shape) != (c, 3, 3):
        raise ValueError(f"Ks: expected shape (C, 3, 3), got {tuple(Ks.shape)}")
    if tuple(X_WCs.shape) != (c, 4, 4):
        raise ValueError(f"X_WCs: expected shape ({c}, 4, 4) to match Ks, got {tuple(X_WCs.shape)}")
    if int(width) < 1 or int(height) < 1:
        raise ValueError(f"width, height: must be ≥ 1, got {width}×{height}")
    tensors = {"means": means, "quats": quats, "scales": scales, "colors": colors, "opacities": opacities}
    tensors |= {"Ks": Ks, "X_WCs": X_WCs}
    for name, tensor in tensors.items():
        if not tensor.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point tensor, got {tensor.dtype}")
        if tensor.dtype != means.dtype or tensor.device != means.device:
            raise ValueError(
                f"{name}: dtype/device {tensor.dtype}/{tensor.device} differ from means' {means.dtype}/{means.device}"
            )
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name}: contains NaN or inf")
    if bool((scales <= 0).any()):
        raise ValueError("scales: must be > 0")
    if bool(((opacities < 0) | (opacities > 1)).any()):
        raise ValueError("opacities: must lie in [0, 1]")
    if bool((Ks[:, 0, 0] <= 0).any() or (Ks[:, 1, 1] <= 0).any()):
        raise ValueError("Ks: focal lengths fx, fy must be > 0")
    if bool((quats.norm(dim=-1) < 1e-8).any()):
        raise ValueError("quats: zero-length quaternion")


def background_image(background: Tensor | None, c: int, height: int, width: int, like: Tensor) -> Tensor | None:
    """The background as (C,H,W,3) or (C,1,1,3) broadcastable image, from None, (3,), (C,3) or (C,H,W,3)."""
    if background is None:
        return None
    bg = background.to(dtype=like.dtype, device=like.device)
    if bg.shape == (3,):
        return bg.expand(c, 1, 1, 3)
    if bg.shape == (c, 3):
        return bg[:, None, None, :]
    if bg.shape == (c, height, width, 3):
        return bg
    raise ValueError(f"background: expected shape (3,), ({c}, 3) or ({c}, {height}, {width}, 3), got {tuple(bg.shape)}")


def compose(acc: Tensor, alpha: Tensor, background: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Final images from accumulated features acc (C,H,W,4: premultiplied RGB, depth) and alpha (C,H,W).

    Returns rgb (C,H,W,3) with the background composited behind, alpha (C,H,W) and depth (C,H,W),
    the alpha-normalised camera z-depth in m (0 where alpha is 0).
    """
    rgb = acc[..., :3]
    if background is not None:
        rgb = rgb + (1.0 - alpha)[..., None] * background
    covered = alpha > 0
    depth = torch.where(covered, acc[..., 3] / alpha.clamp_min(1e-10), torch.zeros_like(alpha))
    return rgb, alpha, depth


def world_to_camera(X_WCs: Tensor) -> tuple[Tensor, Tensor]:
    """Rotation R_CW (C,3,3) and translation t_CW (C,3) that map world points into camera frames."""
    R_CW = X_WCs[:, :3, :3].transpose(-1, -2)
    t_CW = -(R_CW @ X_WCs[:, :3, 3:4])[..., 0]
    return R_CW, t_CW


def may_cover(means: Tensor, extent: Tensor, Ks: Tensor, X_WCs: Tensor, width: int, height: int) -> Tensor:
    """(N,) bool: which Gaussians (world means (N,3) m, extent (N,) m, e.g. 3× their largest scale) may cover a
    pixel of some camera's width × height image (intrinsics Ks (C,3,3), poses X_WCs (C,4,4)); conservative: a
    bounding circle of the projected extent, 2 px wider. The others cannot change the render."""
    K = Ks.to(means)
    X_CW = torch.linalg.inv(X_WCs.to(means))
    p = torch.einsum("cij,nj->cni", X_CW[:, :3, :3], means) + X_CW[:, None, :3, 3]
    z = p[..., 2].clamp_min(1e-6)
    u = K[:, None, 0, 0] * p[..., 0] / z + K[:, None, 0, 2]
    v = K[:, None, 1, 1] * p[..., 1] / z + K[:, None, 1, 2]
    r = K[:, None, 0, 0].maximum(K[:, None, 1, 1]) * extent[None] / z + 2.0
    inside = (u + r > 0) & (u - r < width) & (v + r > 0) & (v - r < height)
    return ((p[..., 2] > 0) & inside).any(dim=0)
