"""Statistics of evaluation results: the Wilson 95 % interval of a success rate."""

from __future__ import annotations

import math

from scipy.stats import binomtest


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
