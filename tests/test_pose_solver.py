"""Levenberg–Marquardt on rigid pose changes: the free coordinates, and steps on a residual known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from realissim.estimate.correction_config import CorrectionConfig
from realissim.estimate.pose_solver import free_coordinates, solve_pose


def test_a_resting_body_moves_in_its_plane_and_turns_about_its_normal() -> None:
    support = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])  # body 0 on the table, body 1 free
    basis = free_coordinates(support, 2, (1e-3, 1e-2))
    assert basis.shape == (12, 3 + 6)
    resting = basis[:6, :3]
    assert np.allclose(resting[2], 0.0) and np.allclose(resting[3:5], 0.0)  # no lift, no tilt
    assert np.allclose(np.linalg.norm(resting[:3, :2], axis=0), 1e-3) and np.isclose(resting[5, 2], 1e-2)
    assert np.allclose(basis[:6, 3:], 0.0) and np.allclose(basis[6:, 3:], np.diag([1e-3] * 3 + [1e-2] * 3))


@pytest.mark.parametrize("loss", ["l2", "huber"])
def test_a_linear_residual_is_solved_to_its_root(loss: str) -> None:
    """r(x) = A·x − b over the pose change x (K,6): one step from the forward-difference Jacobian lands on the root in
    the free coordinates (within the step bound), and the losses reported are at zero and at the best change seen."""
    rng = np.random.default_rng(0)
    a = torch.as_tensor(rng.normal(size=(200, 12)), dtype=torch.float64) * 0.01
    truth = np.array([0.003, -0.002, 0.0, 0.0, 0.0, 0.02, 0.001, 0.002, -0.001, 0.01, -0.01, 0.005])
    b = a @ torch.as_tensor(truth)
    support = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    config = CorrectionConfig(loss=loss, gn_iterations=2, gn_damping=0.0)
    stages = {"forward": 0.0, "optimiser": 0.0}
    found, (before, after) = solve_pose(lambda x: a @ torch.as_tensor(x.ravel()) - b, free_coordinates(
        support, 2, config.gn_fd_step), config, stages)  # fmt: skip
    np.testing.assert_allclose(found.ravel(), truth, atol=1e-6)
    assert after < 1e-6 * before and stages["forward"] > 0


def test_a_step_is_bounded_per_body() -> None:
    a = torch.eye(6, dtype=torch.float64)
    b = torch.tensor([0.05, 0.0, 0.0, 0.0, 0.0, 0.5], dtype=torch.float64)  # 50 mm and 0.5 rad away
    config = CorrectionConfig(loss="l2", gn_iterations=1, gn_max_step=(0.008, 0.08))
    stages = {"forward": 0.0, "optimiser": 0.0}
    found, _ = solve_pose(lambda x: a @ torch.as_tensor(x.ravel()) - b, free_coordinates(None, 1, (1e-3, 1e-2)),
                          config, stages)  # fmt: skip
    assert np.linalg.norm(found[0, :3]) <= 0.008 + 1e-12 and np.linalg.norm(found[0, 3:]) <= 0.08 + 1e-12
    assert found[0, 0] > 0 and found[0, 5] > 0  # towards the root, scaled as one
