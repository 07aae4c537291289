"""Fit the twin's Gaussian colours to what the real cameras see (known geometry, unknown appearance).

With the twin and reality at the same, known initial state, the colours of every Gaussian (objects,
robot, ground) and a background colour per camera are optimised (Adam, colours through a sigmoid so
they stay in [0, 1]) to minimise the L2 photometric error against a few real frames. Lighting,
exposure and white balance of the real cameras are thereby absorbed into the colours.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from realissim.render import rasterize
from realissim.twin.views import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ColorFitConfig:
    """Colour fitting."""

    steps: int = 60
    """Adam steps."""
    lr: float = 0.1
    """Adam learning rate on the colour logits."""


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
    logits = _logit(cat[3]).requires_grad_()
    bg = _logit(views.background.expand(len(views.cameras), 3).clone()).requires_grad_()
    optimiser = torch.optim.Adam([logits, bg], lr=config.lr)
    losses = []
    for _ in range(config.steps + 1):
        rgb, _, _ = rasterize(
            cat[0], cat[1], cat[2], torch.sigmoid(logits), cat[4], views.Ks, views.X_WCs, views.width, views.height,
            torch.sigmoid(bg), views.backend,
        )  # fmt: skip
        loss = ((rgb - target) ** 2).mean()
        losses.append(float(loss.detach()))
        if len(losses) > config.steps:
            break
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    colors = torch.sigmoid(logits).detach()
    views.set_colors(colors[:n_moving], colors[n_moving:], torch.sigmoid(bg).detach())
    log.info("fitted colours: photometric L2 %.5f → %.5f", losses[0], losses[-1])
    return losses[0], losses[-1]
