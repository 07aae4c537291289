"""Fit the twin's Gaussian colours to what the real cameras see (known geometry, unknown appearance).

With the twin and reality at the same, known initial state, the colours of every Gaussian (objects,
robot, ground) and a background colour per camera are optimised (Adam, colours through a sigmoid so
they stay in [0, 1]) to minimise the L2 photometric error against a few real frames. Lighting,
exposure and white balance of the real cameras are thereby absorbed into the colours. With `fill_unseen`,
Gaussians the cameras do not see (the ground under an object, the far side of a link) keep out of the fit and
take their neighbours' colours: fitted, their vanishing gradients paint them at random (Adam's steps do not
shrink with the gradient), and a moved object uncovers a ghost of itself.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial import cKDTree
from torch import Tensor

from realissim.render import rasterize
from realissim.render.gaussians import quat_rotate
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ColorFitConfig:
    """Colour fitting."""

    steps: int = 60
    """Adam steps."""
    lr: float = 0.1
    """Adam learning rate on the colour logits."""
    fill_unseen: bool = False
    """Leave the Gaussians the cameras do not see out of the fit and give them their neighbours' colours (below).
    Off by default: it helped at rest but threw a push corrected every other frame far off (docs/decisions.md,
    "The static bias")."""
    min_coverage: float = 0.25
    """With `fill_unseen`: a Gaussian whose summed blending weight over the cameras' pixels is below this is not
    seen (hidden behind others at the calibration pose): its colour is not fitted (Adam would take full steps on
    its vanishing gradient) but taken from its nearest seen neighbours on the same body."""
    smooth: float = 0.0
    """Weight of a smoothness penalty on the objects' colours: the mean squared colour difference between each
    object Gaussian and its `neighbours` nearest on the same face (same body, normals within ~25°), added to the
    photometric L2 (0: none). Off by default: it helped at rest but lost the T under contact (docs/decisions.md,
    "The static bias")."""
    neighbours: int = 6
    """With `smooth`: neighbours per Gaussian in the penalty."""
    smooth_edges: bool = False
    """Smooth the Gaussians along each face's border too (else only interior ones: the border's fitted colours
    compensate the Gaussians' soft edges, which the correction's pull needs during a push)."""
    min_ground_visible: float = 0.9
    """... likewise a ground Gaussian that shows no camera more than this fraction of what it shows with nothing
    on the ground (under an object, behind the robot)."""


def _logit(x: Tensor) -> Tensor:
    x = x.clamp(1e-3, 1 - 1e-3)
    return torch.log(x / (1 - x))


def fit_colors(
    views: TwinViews, xpos: np.ndarray, xquat: np.ndarray, images: Tensor, config: ColorFitConfig = ColorFitConfig()
) -> tuple[float, float]:
    """Fit `views`' colours to real images (F,C,H,W,3) (F frames at the body poses xpos, xquat; uint8 or
    float in [0, 1]); updates `views` in place and returns the L2 loss before and after."""
    target = images.to(torch.float32) / 255.0 if images.dtype == torch.uint8 else images.to(torch.float32)
    target = target.mean(dim=0)  # averaging frames removes most camera noise
    g = views.moving(xpos, xquat)
    n_moving = len(g)
    cat = [torch.cat([a, b]).detach() for a, b in zip(g.args(), views.static.args())]
    shade = torch.ones(len(cat[0]), 3)
    if views.shadow is not None:
        # Fit the colours in the light: the objects' Gaussians are rendered shaded by the shadow on them, and the
        # table's pixels in the shadow are brightened to what they would be lit (the table's Gaussians are coarser
        # than a shadow's edge).
        cat[3] = torch.cat([views.local.colors, views.static.colors]).detach()
        shade[:n_moving] = views.shadow.object_factors(xpos, xquat)
        target = unshadow_table(target, views, xpos, xquat, views.moving_alpha(xpos, xquat) < 0.5)
    shade = shade.to(cat[3])
    logits = _logit(cat[3]).requires_grad_()
    bg = _logit(views.background.expand(len(views.cameras), 3).clone()).requires_grad_()
    optimiser = torch.optim.Adam([logits, bg], lr=config.lr)
    seen: Tensor | None = None
    if config.fill_unseen:
        covered = _coverage(cat, views)
        seen = covered.sum(dim=0) >= config.min_coverage
        # The ground is also hidden where a camera sees it only through the objects' and the robot's edges:
        # compare with the ground rendered alone, camera by camera.
        alone = _coverage([t[n_moving:] for t in cat], views)
        ground = covered[:, n_moving:]
        seen[n_moving:] &= ((ground >= config.min_ground_visible * alone) & (ground > 0)).any(dim=0)
        log.info("colour fit: %d of %d Gaussians seen", int(seen.sum()), len(seen))

    pairs = _face_pairs(views, config.neighbours, config.smooth_edges) if config.smooth > 0 else None
    losses = []
    for _ in range(config.steps + 1):
        colors = torch.sigmoid(logits) * shade
        rgb, _, _ = rasterize(
            cat[0], cat[1], cat[2], colors, cat[4], views.Ks, views.X_WCs, views.width, views.height,
            torch.sigmoid(bg), views.backend, eps2d=views.eps2d,
        )  # fmt: skip
        loss = ((rgb - target) ** 2).mean()
        losses.append(float(loss.detach()))
        if pairs is not None:
            loss = loss + config.smooth * ((colors[pairs[0]] - colors[pairs[1]]) ** 2).sum(dim=-1).mean()
        if len(losses) > config.steps:
            break
        optimiser.zero_grad()
        loss.backward()
        if seen is not None:
            assert logits.grad is not None
            logits.grad[~seen] = 0.0  # Adam would otherwise take full steps on vanishing gradients
        optimiser.step()
    fitted = torch.sigmoid(logits).detach()
    if seen is not None:
        body = torch.cat([views.body_index, torch.full((len(views.static),), -1)])
        fitted = _fill_unseen(fitted, seen, cat[0], body)
    views.set_colors(fitted[:n_moving], fitted[n_moving:], torch.sigmoid(bg).detach())
    log.info("fitted colours: photometric L2 %.5f → %.5f", losses[0], losses[-1])
    return losses[0], losses[-1]


def unshadow_table(target: Tensor, views: TwinViews, xpos: np.ndarray, xquat: np.ndarray, table: Tensor) -> Tensor:
    """Images (C,H,W,3) in [0, 1] with the table's pixels in the shadow of `views.shadow` (cast at body poses xpos,
    xquat) brightened to what they would be lit: divided by the light's attenuation. A pixel counts as shadowed
    where the modelled shadow covers it (> 0.3) *and* it is darker than the geometric mean of the lit and the
    shadowed table's brightness: the modelled shadow's edge is softer than the real one's, and brightening a lit
    pixel by ~3× would paint a bright halo around every shadow. `table` (C,H,W) bool: pixels that see the table."""
    assert views.shadow is not None
    light = views.shadow.light
    cover = views.shadow.table(xpos, xquat, views.Ks, views.X_WCs, views.width, views.height, views.backend)
    luminance = target.mean(dim=-1)
    lit_pixels = table & (cover < 0.02)
    if not bool(lit_pixels.any()):
        return target
    threshold = float(luminance[lit_pixels].median()) / math.sqrt(max(light.contrast, 1.0))
    shadowed = table & (cover > 0.3) & (luminance < threshold)
    attenuation = torch.as_tensor(light.attenuation, dtype=target.dtype)
    return torch.where(shadowed[..., None], (target / attenuation).clamp(0.0, 1.0), target)


def _coverage(cat: list[Tensor], views: TwinViews) -> Tensor:
    """Each Gaussian's summed blending weight over each camera's pixels (C,N), for Gaussians given as `rasterize`'s
    first five arguments (world frame): how many pixels' worth of it each camera sees (0 for one hidden behind
    others)."""
    colors = cat[3].detach().clone().requires_grad_()
    rgb, _, _ = rasterize(
        cat[0], cat[1], cat[2], colors, cat[4], views.Ks, views.X_WCs, views.width, views.height,
        torch.zeros(len(views.cameras), 3), views.backend, eps2d=views.eps2d,
    )  # fmt: skip
    out = []
    for c in range(len(views.cameras)):
        (grad,) = torch.autograd.grad(rgb[c, ..., 0].sum(), colors, retain_graph=c + 1 < len(views.cameras))
        out.append(grad[:, 0].detach())
    return torch.stack(out)


def _normals(quats: Tensor, scales: Tensor, flatness: float = 0.5) -> Tensor:
    """Each Gaussian's normal (N,3) in the frame of its quaternion (N,4) wxyz: its local axis of smallest scale (N,3
    std-devs), for flat ones (smallest < `flatness` × middle: surface Gaussians, whose thin axis `assets.gaussians`
    points outward); zero rows for the rest."""
    ordered, axis = torch.sort(scales, dim=-1)
    normals = quat_rotate(quats, torch.nn.functional.one_hot(axis[:, 0], 3).to(quats))
    return torch.where((ordered[:, 0] < flatness * ordered[:, 1])[:, None], normals, torch.zeros_like(normals))


def _face_pairs(views: TwinViews, k: int, edges: bool) -> tuple[Tensor, Tensor]:
    """Index pairs (P,), (P,) into the moving Gaussians: each object Gaussian and its k nearest neighbours on the
    same body whose normals agree within ~25° (same face; Gaussians without a normal pair with none). Without
    `edges`, only pairs of interior Gaussians: those with all 8 grid neighbours on their face (within 1.5× the
    nearest one's distance), so the Gaussians along a face's border keep what they compensate there."""
    local = views.local
    normals = _normals(local.quats, local.scales).double().cpu().numpy()
    means = local.means.double().cpu().numpy()
    body = views.body_index.cpu().numpy()
    objects = views.object_mask.cpu().numpy()
    first, second = [], []
    for b in np.unique(body[objects]):
        mine = np.nonzero((body == b) & objects & (np.abs(normals).sum(axis=1) > 0))[0]
        if len(mine) < 2:
            continue
        dist, near = cKDTree(means[mine]).query(means[mine], k=min(len(mine), max(4 * k + 1, 17)))
        dist, near = np.asarray(dist).reshape(len(mine), -1), np.asarray(near).reshape(len(mine), -1)
        face = np.einsum("nkc,nc->nk", normals[mine][near], normals[mine]) > 0.9  # same face as the row's Gaussian
        face[:, 0] = False  # itself
        nearest = np.where(face, dist, np.inf).min(axis=1, keepdims=True)
        interior = (face & (dist <= 1.5 * nearest)).sum(axis=1) >= 8
        for r, i in enumerate(mine):
            same = [j for j in near[r][face[r]][:k] if edges or (interior[r] and interior[j])]
            first.extend([i] * len(same))
            second.extend(mine[same])
    return torch.as_tensor(first, dtype=torch.long), torch.as_tensor(second, dtype=torch.long)


def _fill_unseen(colors: Tensor, seen: Tensor, means: Tensor, body: Tensor, k: int = 16) -> Tensor:
    """Colours (N,3) where every Gaussian not `seen` takes the median colour of the k nearest seen Gaussians on its
    own body (`body` (N,) ids; world positions `means` (N,3)): the median, because the nearest ones border what
    hid it and may carry some of its colour. One on a body with none seen keeps its colour."""
    out = colors.clone()
    pts = means.detach().double().cpu().numpy()
    ids = body.cpu().numpy()
    s = seen.cpu().numpy()
    for b in np.unique(ids[~s]):
        mine = ids == b
        donors, takers = np.nonzero(mine & s)[0], np.nonzero(mine & ~s)[0]
        if len(donors) == 0:
            continue
        _, nearest = cKDTree(pts[donors]).query(pts[takers], k=min(k, len(donors)))
        nearest = donors[np.asarray(nearest).reshape(len(takers), -1)]
        out[torch.as_tensor(takers)] = colors[torch.as_tensor(nearest)].median(dim=1).values
    return out
