"""LeRobot's per-feature statistics (`meta/stats.json` and the episodes' `stats/...` columns): `feature_stats` of
vector features and `ImageStats` of camera frames, each with min, max, mean, std, quantiles q01 … q99 and count.
"""

from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
"""The quantiles of stats.json, as keys q01, q10, q50, q90, q99."""


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's stats of one feature's frames (N, ...) over the frame axis: min, max, mean, std (population),
    q01 … q99 (linear interpolation), each shaped like one frame ((1,) for scalars), and count (1,) = N."""
    x = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    shape = np.shape(values)[1:] or (1,)
    stats = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    stats |= {_qkey(q): v for q, v in zip(QUANTILES, np.quantile(x, QUANTILES, axis=0))}
    return {k: v.reshape(shape) for k, v in stats.items()} | {"count": np.array([len(x)])}


class ImageStats:
    """Per-channel stats of uint8 RGB frames, on [0, 1], from exact 256-bin histograms: LeRobot's image
    stats, each shaped (3, 1, 1); quantiles are the inverted-CDF ones (the smallest level reaching q)."""

    def __init__(self) -> None:
        self.hist = np.zeros((3, 256), dtype=np.int64)
        self.frames = 0

    def add(self, frames: np.ndarray) -> None:
        """Count frames uint8 (N, H, W, 3)."""
        for c in range(3):
            self.hist[c] += np.bincount(frames[..., c].ravel(), minlength=256)
        self.frames += len(frames)

    def __iadd__(self, other: ImageStats) -> ImageStats:
        self.hist += other.hist
        self.frames += other.frames
        return self

    def stats(self) -> dict[str, np.ndarray]:
        levels = np.arange(256) / 255.0
        total = self.hist.sum(1)
        mean = self.hist @ levels / total
        stats = {
            "min": levels[np.argmax(self.hist > 0, axis=1)],
            "max": levels[255 - np.argmax(self.hist[:, ::-1] > 0, axis=1)],
            "mean": mean,
            "std": np.sqrt(np.maximum(self.hist @ levels**2 / total - mean**2, 0.0)),
        }
        cdf = self.hist.cumsum(1)
        for q in QUANTILES:
            stats[_qkey(q)] = levels[[np.searchsorted(cdf[c], q * total[c]) for c in range(3)]]
        return {k: v.reshape(3, 1, 1) for k, v in stats.items()} | {"count": np.array([self.frames])}


def _qkey(q: float) -> str:
    return f"q{round(q * 100):02d}"
