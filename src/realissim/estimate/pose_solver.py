"""Levenberg–Marquardt on rigid bodies' pose changes from a rendered residual (the correction's "gauss_newton" solver,
`estimate.correction.VisualCorrection`; docs/decisions.md, "Gauss–Newton on the pose").

Nothing here renders: the caller gives a function from the bodies' pose changes to the residual between their render
and the real images. The Jacobian is taken once, at zero change, by forward differences (one residual per free
coordinate) and reused for every step (the chord method), so each step after the first costs one residual.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import scipy.linalg
import torch
from torch import Tensor

from realissim.estimate.correction_config import CorrectionConfig
from realissim.estimate.photometric import photometric_loss, robust_weights


def free_coordinates(support: np.ndarray | None, bodies: int, fd_step: tuple[float, float]) -> np.ndarray:
    """The bodies' free coordinates as a block matrix (6K, d) from the stacked coordinates u (d,) to the pose changes
    (K,6) [translation m, rotation vector rad], world frame, flattened: each column one forward-difference step
    (`fd_step`: m, rad) along one coordinate. A body resting on a support (a row of `support` (K,3), its unit normal;
    zero rows and None for none) has three, its in-plane translation and its turn about the normal; otherwise six."""
    h_t, h_r = fd_step
    blocks = []
    for i in range(bodies):
        n = np.zeros(3) if support is None else np.asarray(support[i], dtype=np.float64)
        if np.linalg.norm(n) > 0.5:
            n = n / np.linalg.norm(n)
            t1 = np.cross(n, [1.0, 0.0, 0.0] if abs(n[0]) < 0.9 else [0.0, 1.0, 0.0])
            t1 /= np.linalg.norm(t1)
            block = np.zeros((6, 3))
            block[:3, 0], block[:3, 1], block[3:, 2] = h_t * t1, h_t * np.cross(n, t1), h_r * n
        else:
            block = np.diag([h_t] * 3 + [h_r] * 3)
        blocks.append(block)
    return scipy.linalg.block_diag(*blocks)


def solve_pose(
    residual: Callable[[np.ndarray], Tensor],
    basis: np.ndarray,
    config: CorrectionConfig,
    stages: dict[str, float],
) -> tuple[np.ndarray, tuple[float, float]]:
    """The bodies' pose changes (K,6) [translation m, rotation vector rad], world frame, that bring `residual` (pose
    changes (K,6) → the residual (n,) float64 of their render against the real images) down, by Levenberg–Marquardt on
    the free coordinates `basis` (6K, d) (`free_coordinates`); and the loss at zero change and the least over the
    changes evaluated (a step that made it worse is taken back, so the last evaluated need not be the best).

    `config`: `loss` and `huber_delta` (the robust loss, met by reweighting: Huber 1 inside δ and δ/|r| outside),
    `gn_iterations` steps (each but the last checked with one residual; a step that made the loss worse is halved
    back towards the best seen), `gn_damping` (Marquardt's λ relative to the normal matrix's diagonal) and
    `gn_max_step` (m, rad: the most one step may move a body). The time spent is added to `stages` ("forward": the
    residuals; "optimiser": the solves)."""
    clock, cfg = time.perf_counter, config
    k = basis.shape[0] // 6
    owner = np.abs(basis).reshape(k, 6, -1).sum(axis=1).argmax(axis=0)  # (d,) the body each coordinate moves

    def pose(u: np.ndarray) -> np.ndarray:
        return (basis @ u).reshape(k, 6)

    def evaluate(u: np.ndarray) -> tuple[Tensor, float, Tensor]:
        """The residual (n,) at coordinates u, its loss and its robust weights (n,)."""
        t0 = clock()
        r = residual(pose(u))
        stages["forward"] += clock() - t0
        loss = float(photometric_loss(r, torch.zeros_like(r), cfg.loss, cfg.huber_delta))
        return r, loss, robust_weights(r, cfg.loss, cfg.huber_delta)

    u0 = np.zeros(basis.shape[1])
    r0, loss0, w0 = evaluate(u0)
    t0 = clock()
    columns = [residual(pose(e)) - r0 for e in np.eye(len(u0))]
    stages["forward"] += clock() - t0
    jac = torch.stack(columns, dim=1)  # (n, d)

    def step(u: np.ndarray, r: Tensor, w: Tensor) -> np.ndarray:
        """The next coordinates from u, where the residual is r with weights w: one damped step, bounded per body."""
        t0 = clock()
        wj = jac * w[:, None]
        normal = jac.T @ wj
        diag = torch.diagonal(normal)
        normal = normal + torch.diag(cfg.gn_damping * diag + 1e-12 * (1.0 + float(diag.max())))
        delta = -torch.linalg.solve(normal, wj.T @ r).numpy()
        if not np.all(np.isfinite(delta)):  # a degenerate system: no step (the renderer no longer checks each render)
            delta = np.zeros_like(delta)
        moved = pose(delta)
        scale = np.minimum(
            cfg.gn_max_step[0] / np.maximum(np.linalg.norm(moved[:, :3], axis=1), 1e-12),
            cfg.gn_max_step[1] / np.maximum(np.linalg.norm(moved[:, 3:], axis=1), 1e-12),
        ).clip(max=1.0)
        stages["optimiser"] += clock() - t0
        return u + delta * scale[owner]

    best, best_loss = u0, loss0
    candidate = step(u0, r0, w0)
    for _ in range(cfg.gn_iterations - 1):
        r, loss, w = evaluate(candidate)
        if loss < best_loss:
            best, best_loss = candidate, loss
            candidate = step(best, r, w)
        else:
            candidate = 0.5 * (best + candidate)
    return pose(candidate), (loss0, best_loss)
