"""Evaluation statistics against hand-computed cases: agreement (κ), MMRV, rank correlations."""

from __future__ import annotations

import math

import pytest

from realissim.eval.stats import agreement, compare_rankings, mmrv


def test_kappa_and_confusion_matrix_by_hand() -> None:
    truth = [1, 1, 1, 0, 0, 0, 0, 0, 1, 1]
    claim = [1, 1, 0, 0, 0, 1, 0, 0, 1, 1]
    a = agreement([bool(t) for t in truth], [bool(c) for c in claim])
    assert a.matrix == ((4, 1), (1, 4)) and a.n == 10 and a.observed == pytest.approx(0.8)
    assert a.kappa == pytest.approx(0.6)  # po 0.8, pe 0.5·0.5 + 0.5·0.5 = 0.5
    assert agreement([True, False, True], [True, False, True]).kappa == pytest.approx(1.0)


def test_a_progress_that_always_claims_success_agrees_only_by_chance() -> None:
    truth = [True] * 30 + [False] * 70
    lying = agreement(truth, [True] * 100)
    assert lying.matrix == ((0, 70), (0, 30))
    assert lying.kappa == pytest.approx(0.0)  # 30 % observed agreement is exactly chance
    assert math.isnan(agreement([True] * 5, [True] * 5).kappa)  # both constant: κ undefined, not 1
    with pytest.raises(ValueError, match="equal-length"):
        agreement([True], [True, False])


def test_mmrv_zero_for_identical_rankings_and_known_value_for_a_swapped_pair() -> None:
    assert mmrv([0.1, 0.5, 0.9], [0.2, 0.4, 0.8]) == 0.0
    # Offline orders 1 below 2; online has them the other way round (0.6 > 0.4): each suffers |0.6 − 0.4|.
    assert mmrv([0.1, 0.5, 0.9], [0.2, 0.6, 0.4]) == pytest.approx(0.4 / 3)
    # Argument order matters: the violation is measured in online rates.
    assert mmrv([0.2, 0.6, 0.4], [0.1, 0.5, 0.9]) == pytest.approx(0.8 / 3)
    with pytest.raises(ValueError):
        mmrv([], [])


def test_rank_comparison_reports_correlations_with_intervals() -> None:
    off = [0.1, 0.3, 0.5, 0.7, 0.9, 0.6]
    on = [0.15, 0.25, 0.55, 0.65, 0.95, 0.6]
    out = compare_rankings(off, on, resamples=500, seed=1)
    assert out["spearman"].value == pytest.approx(1.0) and out["mmrv"].value == 0.0
    assert 0.95 < out["pearson"].value <= 1.0
    assert out["pearson"].low <= out["pearson"].value <= out["pearson"].high
    worse = compare_rankings(off, list(reversed(on)), resamples=500, seed=1)
    assert worse["spearman"].value < 0 and worse["mmrv"].value > 0.2
