"""Calibrate the twin's cameras from images of a known dot board lying on the table.

The photometric refinement (`realissim.estimate.camera_refine`) matches the twin's rendered scene, whose colours
were fitted to the same images, so the fitted colours absorb about a pixel of misregistration and the cameras
cannot be found more closely than that (docs/decisions.md, "Calibration"). A printed board has an appearance
known in advance — black dots of known radius on white, at known positions — so its image depends on the
camera alone. Each camera's pose and intrinsics are fitted to it by least squares on a model of the image:

- every pixel centre's ray through the camera meets the board's face at a point q in the board's frame;
- the pixel's darkness is the dot coverage there: a logistic of (radius − distance from q to the nearest dot
  centre), its width `softness` pixels' worth of board (the pixel's footprint: depth / focal length);
- the image is gray = white(u, v) · (1 − coverage) + black · coverage, with white a plane over the image
  (uneven light) and black a constant, both fitted with the camera: exposure, white balance and shading
  need not be known.

Only pixels that see the board's face (its edge, the table and the arm and objects the twin knows of left
out, dilated by `guard` px) enter the fit. The camera is parametrised as in `refine_cameras`: X_WC ← X_WC · Δ
with Δ = [R(rotation vector) | translation] in the camera's frame, focal lengths × exp(log scale), principal
point + offset px; weak priors on each keep the fit well posed (a flat board leaves depth and focal length
nearly interchangeable, which costs nothing on the table).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.ndimage import binary_dilation, maximum_filter, uniform_filter
from scipy.optimize import least_squares
from torch import Tensor

from realissim.geometry import project_points
from realissim.spec.board import DotBoard
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)

N_CAMERA = 9
"""Camera parameters: rotation vector (3), translation (3), log focal scale (1), principal offset (2)."""
N_SHADE = 4
"""Photometric parameters: white level, its slopes along u and v (per image width / height), black level."""


@dataclass(frozen=True)
class BoardCalibrationConfig:
    """Camera calibration from a dot board."""

    softness: tuple[float, ...] = (1.0, 0.5, 0.25)
    """Edge widths of the dots' image model, px, fitted in turn (coarse to fine: a wide basin first)."""
    shift_search: float = 4.0
    """Before the fit, the told camera's image is searched for the best-matching shift of the dots within ± this
    many px (the principal point moved; 0: no search), and the fit starts there. The fit's basin is about half a
    dot spacing: at 160 × 90 a camera told ~1.8 px off fell into the dots' gaps (white and black swapped) and kept
    its told calibration (sweep profile 03's front camera)."""
    shift_step: float = 0.5
    """Step of that search, px."""
    guard: int = 1
    """Pixels kept clear around the board's edge and around anything the twin knows is in front of it."""
    min_dots: int = 6
    """A camera that sees fewer whole dots than this keeps its told calibration (logged)."""
    min_contrast: float = 0.15
    """A camera whose fitted white − black level (gray, 0–1) ends below this keeps its told calibration."""
    max_rms: float = 0.35
    """... as does one whose residual RMS ends above this fraction of that contrast (the model does not explain
    the image: the board is not where it is told to lie, or mostly hidden)."""
    local_white: bool = True
    """A camera rejected by those two tests is fitted once more to its image divided by the image's local white
    level (the brightest pixel within about one dot spacing), which a shadow across the board leaves near 1 where
    the plane of `white` cannot follow it. Corner profile x3 (key light 40° up, the arm's shadow across a third of
    the board): the left camera, rejected at residual RMS 0.243 > 0.35 × contrast 0.628, was kept at its told
    calibration (twice the default error) and its sighting was 12.7 mm off (docs/decisions.md). Cameras that pass
    at first are fitted as before."""
    prior_rotation: float = 0.02
    """Prior standard deviation of the rotation correction, rad."""
    prior_translation: float = 0.01
    """Prior standard deviation of the translation correction, m."""
    prior_focal: float = 0.03
    """Prior standard deviation of the log focal scale."""
    prior_principal: float = 5.0
    """Prior standard deviation of the principal point offset, px (at the views' size)."""
    noise: float = 0.1
    """Expected gray-level residual (0–1): the priors' weight against one pixel's."""
    max_sigmas: float = 3.0
    """A correction larger than this many prior standard deviations in any of its parts (rotation, translation,
    focal scale, principal point) is refused: the board is more likely not where it is told to lie."""


@dataclass(frozen=True)
class BoardFit:
    """One camera's calibration from the board."""

    name: str
    used: bool
    """False: the board was not seen well enough (`reason`); the camera kept its told calibration."""
    correction: np.ndarray
    """(9,): rotation vector rad, translation m (camera frame), log focal scale, principal offset px."""
    pixels: int
    """Pixels in the fit."""
    dots: int
    """Whole dots in view, unoccluded."""
    rms: float
    """Gray-level residual RMS after the fit (0–1)."""
    contrast: float
    """Fitted white − black level."""
    reason: str = ""


def _rotvec_matrix(r: Tensor) -> Tensor:
    """Rotation matrix (3,3) of a rotation vector (3,) (Rodrigues; exact, differentiable, safe at 0)."""
    theta = torch.sqrt((r * r).sum() + 1e-24)
    k = r / theta
    K = torch.stack(
        [
            torch.stack([torch.zeros_like(k[0]), -k[2], k[1]]),
            torch.stack([k[2], torch.zeros_like(k[0]), -k[0]]),
            torch.stack([-k[1], k[0], torch.zeros_like(k[0])]),
        ]
    )
    return torch.eye(3, dtype=r.dtype) + torch.sin(theta) * K + (1 - torch.cos(theta)) * (K @ K)


class _BoardImage:
    """The image model of one camera looking at the board (float64 torch)."""

    def __init__(self, board: DotBoard, K: np.ndarray, X_WC: np.ndarray, width: int, height: int) -> None:
        f8 = torch.float64
        self.board, self.width, self.height = board, width, height
        self.K0 = torch.as_tensor(K, dtype=f8)
        self.X0 = torch.as_tensor(X_WC, dtype=f8)
        c, s = math.cos(board.yaw), math.sin(board.yaw)
        self.R_BW = torch.tensor([[c, s], [-s, c]], dtype=f8)  # world xy → board xy
        self.center = torch.tensor(board.center, dtype=f8)
        self.half = torch.tensor(board.half_size, dtype=f8)
        self.grid_half = torch.tensor([(board.rows - 1) / 2, (board.cols - 1) / 2], dtype=f8)
        v, u = np.mgrid[0:height, 0:width].astype(np.float64) + 0.5
        self.u_all, self.v_all = torch.as_tensor(u.ravel()), torch.as_tensor(v.ravel())
        self.u, self.v = self.u_all, self.v_all

    def select(self, keep: np.ndarray) -> None:
        """Use only the pixels where `keep` (H·W,) bool."""
        idx = torch.as_tensor(np.flatnonzero(keep))
        self.u, self.v = self.u_all[idx], self.v_all[idx]

    def camera(self, theta: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """fx, fy, cx, cy and X_WC (4,4) of camera parameters θ (9,)."""
        R = self.X0[:3, :3] @ _rotvec_matrix(theta[:3])
        t = self.X0[:3, 3] + self.X0[:3, :3] @ theta[3:6]
        scale = torch.exp(theta[6])
        fx, fy = self.K0[0, 0] * scale, self.K0[1, 1] * scale
        cx, cy = self.K0[0, 2] + theta[7], self.K0[1, 2] + theta[8]
        bottom = torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
        X = torch.cat([torch.cat([R, t[:, None]], dim=1), bottom])
        return torch.stack([fx, fy, cx, cy]), R, t, X

    def hit(self, theta: Tensor, u: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Board-frame points (N,2) m where pixels (u, v) see the board's face, and each pixel's footprint there
        (N,) m per px (inf where the ray misses the face's plane)."""
        intr, R, t, _ = self.camera(theta)
        d_C = torch.stack([(u - intr[2]) / intr[0], (v - intr[3]) / intr[1], torch.ones_like(u)], dim=-1)
        d_W = d_C @ R.T
        lam = (self.board.thickness - t[2]) / d_W[:, 2]
        p = t[:2] + lam[:, None] * d_W[:, :2]
        q = (p - self.center) @ self.R_BW.T
        footprint = torch.where(lam > 0, lam / intr[0], torch.full_like(lam, math.inf))
        return q, footprint

    def coverage(self, theta: Tensor, softness: float) -> Tensor:
        """Dot coverage (N,) in [0, 1] of the selected pixels."""
        q, footprint = self.hit(theta, self.u, self.v)
        cell = torch.clamp(torch.round(q / self.board.spacing + self.grid_half), min=0 * self.grid_half)
        cell = torch.minimum(cell, 2 * self.grid_half)
        nearest = (cell - self.grid_half) * self.board.spacing
        dist = torch.linalg.norm(q - nearest, dim=-1)
        return torch.sigmoid((self.board.radius - dist) / (softness * footprint))

    def image(self, theta: Tensor, shade: Tensor, softness: float) -> Tensor:
        """Modelled gray levels (N,) of the selected pixels; shade = (white, slope u, slope v, black)."""
        cov = self.coverage(theta, softness)
        white = shade[0] + shade[1] * (self.u / self.width - 0.5) + shade[2] * (self.v / self.height - 0.5)
        return white * (1 - cov) + shade[3] * cov


def _gray(image: np.ndarray | Tensor) -> np.ndarray:
    """Gray levels (H,W) in [0, 1] of an RGB image (H,W,3), uint8 or float in [0, 1]."""
    a = image.numpy() if isinstance(image, Tensor) else np.asarray(image)
    a = a.astype(np.float64) / 255.0 if a.dtype == np.uint8 else a.astype(np.float64)
    return a @ np.array([0.299, 0.587, 0.114])


def _dilate(mask: np.ndarray, r: int) -> np.ndarray:
    """Binary dilation of an (H,W) bool mask by a (2r+1)² square (r ≤ 0: the mask itself)."""
    if r <= 0:
        return mask
    return binary_dilation(mask, structure=np.ones((2 * r + 1, 2 * r + 1), dtype=bool))


def _solve(model: _BoardImage, target: Tensor, prior_w: Tensor, x0: np.ndarray, softness: float, f_scale: float) -> Any:
    """Robust least squares (scipy, soft L1) of the image model's residuals and the camera priors from x0;
    the Jacobian by forward-mode autodiff. Returns scipy's result."""

    def residual(p: Tensor) -> Tensor:
        return torch.cat([model.image(p[:N_CAMERA], p[N_CAMERA:], softness) - target, prior_w * p[:N_CAMERA]])

    def fun(p: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return residual(torch.as_tensor(p)).numpy()

    def jac(p: np.ndarray) -> np.ndarray:
        return torch.func.jacfwd(residual)(torch.as_tensor(p)).numpy()

    return least_squares(fun, x0, jac=jac, loss="soft_l1", f_scale=f_scale, max_nfev=50, x_scale="jac")


def _best_shift(model: _BoardImage, target: Tensor, half: float, step: float, softness: float) -> np.ndarray:
    """The principal-point offset (2,) px within ±`half` (grid of `step`) whose dot coverage correlates best with
    the darkness of the selected pixels' gray levels `target` (N,): where the dots lie in the image, as a start
    for the fit. Ties go to the offset nearest the told camera."""
    offsets = np.arange(-half, half + 1e-9, step)
    dark = target.mean() - target
    dark = dark / dark.norm().clamp_min(1e-12)
    theta = torch.zeros(N_CAMERA, dtype=torch.float64)
    best, best_score = np.zeros(2), -math.inf
    with torch.no_grad():
        for du, dv in sorted(((a, b) for a in offsets for b in offsets), key=lambda o: o[0] ** 2 + o[1] ** 2):
            theta[N_CAMERA - 2], theta[N_CAMERA - 1] = du, dv
            cov = model.coverage(theta, softness)
            cov = cov - cov.mean()
            score = float((cov * dark).sum() / cov.norm().clamp_min(1e-12))
            if score > best_score + 1e-9:
                best, best_score = np.array([du, dv]), score
    return best


def fit_camera_to_board(
    board: DotBoard,
    K: np.ndarray,
    X_WC: np.ndarray,
    image: np.ndarray | Tensor,
    occluded: np.ndarray | None = None,
    config: BoardCalibrationConfig = BoardCalibrationConfig(),
    name: str = "camera",
) -> BoardFit:
    """Fit one camera, told intrinsics K (3,3) px and pose X_WC (4,4) (OpenCV axes, world frame), to its image
    (H,W,3) of `board` lying at its told pose; `occluded` (H,W) bool marks pixels where something the twin knows
    of stands in front of the board. Returns the correction (see `BoardFit`); `used` is False, with the reason,
    when the board is not seen well enough, and the correction is then zero."""
    gray = _gray(image)
    fit = _fit_gray(board, K, X_WC, gray, occluded, config, name)
    poor = fit.contrast < config.min_contrast or fit.rms > config.max_rms * fit.contrast  # the image unexplained
    if fit.used or not config.local_white or not poor:
        return fit
    # A shadow across the board (a low key light, the arm between it and the board) breaks the white plane: fit
    # again to the image divided by its local white level (the brightest pixel within about one dot spacing).
    _, depth = project_points(board.dots_world(), K, X_WC)
    ahead = depth[depth > 0]
    spacing = board.spacing * K[0, 0] / float(np.median(ahead)) if len(ahead) else 5.0
    retry = _fit_gray(board, K, X_WC, gray / _local_white(gray, spacing), occluded, config, name)
    if retry.used:
        log.info("camera %s: calibrated from the board with its white level taken locally (%s at first)", name,
                 fit.reason)  # fmt: skip
        return retry
    return fit


def _local_white(gray: np.ndarray, spacing: float) -> np.ndarray:
    """(H,W): the white level around each pixel of a board image `gray` (H,W): the brightest pixel within about
    `spacing` px (one dot spacing: a gap between dots always lies within it), averaged over as much again."""
    size = max(3, round(spacing) | 1)
    return np.maximum(uniform_filter(maximum_filter(gray, size=size), size=size), 1e-3)


def _fit_gray(
    board: DotBoard,
    K: np.ndarray,
    X_WC: np.ndarray,
    gray: np.ndarray,
    occluded: np.ndarray | None,
    config: BoardCalibrationConfig,
    name: str,
) -> BoardFit:
    """`fit_camera_to_board` on the gray levels (H,W) of the image."""
    h, w = gray.shape
    model = _BoardImage(board, K, X_WC, w, h)
    zero = torch.zeros(N_CAMERA, dtype=torch.float64)
    with torch.no_grad():
        q, footprint = model.hit(zero, model.u_all, model.v_all)
        margin = (config.guard + 0.5) * footprint
        inside = ((q.abs() < model.half - margin[:, None]).all(dim=-1) & torch.isfinite(footprint)).numpy()
    keep = inside.reshape(h, w) & ~_dilate(~inside.reshape(h, w), config.guard)
    if occluded is not None:
        keep &= ~_dilate(np.asarray(occluded, dtype=bool), config.guard)
    # Dots in view: at least half of each dot's disk (at the told camera) on kept pixels.
    uv, depth = project_points(board.dots_world(), K, X_WC)
    dots = 0
    us, vs = model.u_all.numpy().reshape(h, w), model.v_all.numpy().reshape(h, w)
    for (u, v), z in zip(uv, depth, strict=True):
        if not (z > 0 and 0 <= u < w and 0 <= v < h):
            continue
        r = board.radius * K[0, 0] / z
        disk = (us - u) ** 2 + (vs - v) ** 2 < r * r
        if disk.any() and keep[disk].mean() >= 0.5:
            dots += 1
    pixels = int(keep.sum())
    if dots < config.min_dots:
        reason = f"{dots} whole dots in view (need {config.min_dots})"
        return BoardFit(name, False, np.zeros(N_CAMERA), pixels, dots, math.nan, math.nan, reason)
    model.select(keep.ravel())
    target = torch.as_tensor(gray.ravel()[keep.ravel()])
    lo, hi = np.percentile(target.numpy(), [5, 90])
    x = np.concatenate([np.zeros(N_CAMERA), [hi, 0.0, 0.0, lo]])
    sigma = np.array([config.prior_rotation] * 3 + [config.prior_translation] * 3
                     + [config.prior_focal] + [config.prior_principal] * 2)  # fmt: skip
    prior_w = torch.as_tensor(config.noise / sigma)

    if config.shift_search > 0:
        x[N_CAMERA - 2 : N_CAMERA] = _best_shift(model, target, config.shift_search, config.shift_step,
                                                 config.softness[0])  # fmt: skip
    result = None
    for softness in config.softness:
        result = _solve(model, target, prior_w, x, softness, 3 * config.noise)
        x = result.x
    assert result is not None
    n = len(target)
    if not (np.isfinite(result.x).all() and np.isfinite(result.fun[:n]).all()):
        reason = "the fit did not converge to finite values (the board seen nearly edge-on?)"
        return BoardFit(name, False, np.zeros(N_CAMERA), pixels, dots, math.nan, math.nan, reason)
    rms = float(np.sqrt(np.mean(result.fun[:n] ** 2)))
    contrast = float(x[N_CAMERA] - x[N_CAMERA + 3])
    if contrast < config.min_contrast:
        reason = f"white − black level {contrast:.3f} after the fit (need {config.min_contrast})"
        return BoardFit(name, False, np.zeros(N_CAMERA), pixels, dots, rms, contrast, reason)
    sigmas = np.abs(x[:N_CAMERA]) / sigma
    parts = {
        "rotation": sigmas[:3],
        "translation": sigmas[3:6],
        "focal scale": sigmas[6:7],
        "principal point": sigmas[7:],
    }
    worst = max(parts, key=lambda k: float(np.linalg.norm(parts[k])))
    if float(np.linalg.norm(parts[worst])) > config.max_sigmas:
        reason = (f"the {worst} correction is {float(np.linalg.norm(parts[worst])):.1f} prior standard deviations "
                  f"(limit {config.max_sigmas}): is the board where it is told to lie?")  # fmt: skip
        return BoardFit(name, False, np.zeros(N_CAMERA), pixels, dots, rms, contrast, reason)
    if rms > config.max_rms * contrast:
        reason = f"residual RMS {rms:.3f} above {config.max_rms} × the contrast {contrast:.3f} after the fit"
        return BoardFit(name, False, np.zeros(N_CAMERA), pixels, dots, rms, contrast, reason)
    return BoardFit(name, True, x[:N_CAMERA].copy(), pixels, dots, rms, contrast)


def occluders(views: TwinViews, xpos: np.ndarray, xquat: np.ndarray, threshold: float = 0.05) -> np.ndarray:
    """(C,H,W) bool: where the twin's moving bodies (arm, objects) at body poses xpos (nbody,3) m, xquat
    (nbody,4) wxyz cover each camera of `views` with opacity above `threshold`."""
    return (views.moving_alpha(xpos, xquat) > threshold).cpu().numpy()


def calibrate_from_board(
    views: TwinViews,
    board: DotBoard,
    xpos: np.ndarray,
    xquat: np.ndarray,
    images: Tensor | np.ndarray,
    config: BoardCalibrationConfig = BoardCalibrationConfig(),
) -> list[BoardFit]:
    """Calibrate every camera of `views` (pose and intrinsics) from its image in `images` (C,H,W,3) (uint8 or
    float in [0, 1]) of `board` lying at its told pose, with the twin's bodies at xpos (nbody,3) m, xquat
    (nbody,4) wxyz (what stands in front of the board is left out of the fit). Updates `views` in place (the
    cameras that did not see the board keep their calibration) and returns each camera's fit."""
    images = np.asarray(images.cpu() if isinstance(images, Tensor) else images)
    if images.shape[0] != len(views.cameras) or images.shape[1:3] != (views.height, views.width):
        raise ValueError(
            f"images: expected ({len(views.cameras)}, {views.height}, {views.width}, 3), got {images.shape}"
        )
    hidden = occluders(views, xpos, xquat)
    Ks, Xs = views.Ks.double().cpu().numpy(), views.X_WCs.double().cpu().numpy()
    new_K, new_X = Ks.copy(), Xs.copy()
    fits = []
    for c, cam in enumerate(views.cameras):
        fit = fit_camera_to_board(board, Ks[c], Xs[c], images[c], hidden[c], config, cam.name)
        fits.append(fit)
        if not fit.used:
            log.warning("camera %s: not calibrated from the board: %s", cam.name, fit.reason)
            continue
        model = _BoardImage(board, Ks[c], Xs[c], views.width, views.height)
        intr, _, _, X = model.camera(torch.as_tensor(fit.correction))
        new_X[c] = X.numpy()
        new_K[c][0, 0], new_K[c][1, 1], new_K[c][0, 2], new_K[c][1, 2] = intr.numpy()
        corr = fit.correction
        log.info(
            "camera %s: from the board (%d dots, %d px, rms %.3f): %.2f mrad, %.1f mm, focal ×%.4f, "
            "principal %+.2f, %+.2f px", cam.name, fit.dots, fit.pixels, fit.rms, 1e3 * np.linalg.norm(corr[:3]),
            1e3 * np.linalg.norm(corr[3:6]), math.exp(corr[6]), corr[7], corr[8],
        )  # fmt: skip
    views.set_cameras(X_WCs=torch.as_tensor(new_X), Ks=torch.as_tensor(new_K))
    return fits


__all__ = ["BoardCalibrationConfig", "BoardFit", "calibrate_from_board", "fit_camera_to_board", "occluders"]
