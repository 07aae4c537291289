"""Statistics of evaluation results: the Wilson 95 % interval of a success rate, the agreement of a claimed
success with the ground truth (confusion matrix, Cohen's κ), and how well offline success ranks policies as online
success does (Pearson, Spearman, SIMPLER's MMRV, with bootstrap intervals)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest, pearsonr, spearmanr


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """(low, high) Wilson score interval of k successes in n trials at `confidence`; (nan, nan) when n = 0."""
    if not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 ≤ k ≤ n, got k={k}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


def rate_text(k: int, n: int) -> str:
    """ "k/n = r % [low, high]" with the Wilson 95 % interval, for tables."""
    if n == 0:
        return "0/0"
    low, high = wilson(k, n)
    return f"{k}/{n} = {100 * k / n:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


@dataclass(frozen=True)
class Agreement:
    """How well a claimed success (e.g. the policy's progress > 0.9) agrees with the ground truth.

    `matrix[t][c]`: episodes with truth t and claim c (0 = failure, 1 = success); `kappa`: Cohen's κ (1 perfect,
    0 chance level, nan when both raters are constant and equal — κ is undefined there)."""

    matrix: tuple[tuple[int, int], tuple[int, int]]
    kappa: float

    @property
    def n(self) -> int:
        return sum(map(sum, self.matrix))

    @property
    def observed(self) -> float:
        """Fraction of episodes where truth and claim agree."""
        return (self.matrix[0][0] + self.matrix[1][1]) / self.n if self.n else math.nan


def agreement(truth: Sequence[bool], claimed: Sequence[bool]) -> Agreement:
    """Confusion matrix and Cohen's κ of `claimed` against `truth` (equal-length boolean sequences)."""
    t, c = np.asarray(truth, dtype=bool), np.asarray(claimed, dtype=bool)
    if t.shape != c.shape or t.ndim != 1:
        raise ValueError(f"agreement: need two equal-length 1-D sequences, got {t.shape} and {c.shape}")
    m = ((int(np.sum(~t & ~c)), int(np.sum(~t & c))), (int(np.sum(t & ~c)), int(np.sum(t & c))))
    n = len(t)
    if n == 0:
        return Agreement(m, math.nan)
    po = (m[0][0] + m[1][1]) / n
    pe = (np.mean(t) * np.mean(c)) + (np.mean(~t) * np.mean(~c))
    kappa = math.nan if pe >= 1.0 else float((po - pe) / (1.0 - pe))
    return Agreement(m, kappa)


def mmrv(offline: Sequence[float], online: Sequence[float]) -> float:
    """Mean maximum rank violation (SIMPLER) of an offline ranking against online success rates.

    For each policy i: the largest |online_i − online_j| over the policies j that the offline rates order
    differently from the online ones (strict comparisons; a tie on one side only counts as a different order);
    averaged over i. 0 when the orders agree; at most 1 (rates in [0, 1])."""
    off, on = np.asarray(offline, dtype=np.float64), np.asarray(online, dtype=np.float64)
    if off.shape != on.shape or off.ndim != 1 or len(off) == 0:
        raise ValueError(f"mmrv: need two equal-length non-empty 1-D sequences, got {off.shape} and {on.shape}")
    wrong = (off[:, None] < off[None, :]) != (on[:, None] < on[None, :])
    gap = np.abs(on[:, None] - on[None, :])
    return float(np.max(np.where(wrong, gap, 0.0), axis=1).mean())


@dataclass(frozen=True)
class Estimate:
    """A statistic with a bootstrap 95 % percentile interval (nan where undefined, e.g. constant inputs)."""

    value: float
    low: float
    high: float

    def as_list(self) -> list[float]:
        return [self.value, self.low, self.high]


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(pearsonr(x, y).statistic)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(spearmanr(x, y).statistic)


def compare_rankings(
    offline: Sequence[float], online: Sequence[float], resamples: int = 2000, seed: int = 0
) -> dict[str, Estimate]:
    """Pearson and Spearman correlation and MMRV of offline against online success rates of the same policies
    (checkpoints), each with a bootstrap interval over policies (`resamples` draws with replacement, seeded)."""
    off, on = np.asarray(offline, dtype=np.float64), np.asarray(online, dtype=np.float64)
    if off.shape != on.shape or off.ndim != 1 or len(off) < 2:
        raise ValueError(f"compare_rankings: need ≥ 2 policies rated both ways, got {off.shape} and {on.shape}")
    stats = {"pearson": _pearson, "spearman": _spearman, "mmrv": mmrv}
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(off), size=(resamples, len(off)))
    out = {}
    for name, fn in stats.items():
        boot = np.array([fn(off[i], on[i]) for i in draws])
        boot = boot[np.isfinite(boot)]
        low, high = np.percentile(boot, [2.5, 97.5]) if len(boot) else (math.nan, math.nan)
        out[name] = Estimate(float(fn(off, on)), float(low), float(high))
    return out
