"""Calibration: fit the twin's views to the real cameras while twin and world are known to agree (right after a
reset): each camera's pose and intrinsics from the world's calibration board where it has one, else from the
images; the key light's shadow; the Gaussians' colours (docs/design.md §4)."""

from __future__ import annotations

import contextlib
import logging
import time

import numpy as np
import torch

from realissim.estimate.board_calibration import BoardFit, calibrate_from_board
from realissim.estimate.camera_refine import refine_cameras
from realissim.estimate.color_fit import fit_colors
from realissim.real.interfaces import RealWorld
from realissim.runtime.config import CalibrationConfig
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)


def calibrate_views(
    views: TwinViews, world: RealWorld, xpos: np.ndarray, xquat: np.ndarray, config: CalibrationConfig
) -> tuple[list[BoardFit], torch.Tensor]:
    """Fit `views` to `world`'s cameras, the twin's bodies at world poses `xpos` (nbody, 3) m and `xquat`
    (nbody, 4) wxyz (what the world shows now). Returns each camera's board fit (empty: no board used) and the
    images the fit used, (1, C, H, W, 3) uint8."""
    t0 = time.perf_counter()
    board = world.calibration_board if config.use_board else None
    fits: list[BoardFit] = []
    unseen = list(range(len(views.cameras)))
    if board is not None:
        try:
            world.show_board(True)
            board_images = np.stack([cam.read().image for cam in world.cameras])
        except BaseException:
            with contextlib.suppress(Exception):  # take the board away if it can; the first error is the one
                world.show_board(False)
            raise
        world.show_board(False)
        fits = calibrate_from_board(views, board, xpos, xquat, board_images, config.board)
        unseen = [c for c, fit in enumerate(fits) if not fit.used]
    images = torch.from_numpy(np.stack([cam.read().image for cam in world.cameras]))[None]
    views.set_shadow(None)
    if config.shadows.enabled:
        views.fit_shadow(xpos, xquat, images[0], config.shadows)
    if config.fit_colors:
        fit_colors(views, xpos, xquat, images, config.color_fit)
    if config.refine_cameras and unseen:
        refine_cameras(views, xpos, xquat, images[0], config.camera_refine, only=unseen)
        if config.fit_colors:
            fit_colors(views, xpos, xquat, images, config.color_fit)
    views.cast_shadows(xpos, xquat)
    log.info("calibrated the twin's appearance to the cameras in %.2f s", time.perf_counter() - t0)
    return fits, images
