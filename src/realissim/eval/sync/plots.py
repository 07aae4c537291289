"""PNG plots of sync runs (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from realissim.eval.sync.metrics import RECOVERED_M

FLOOR_MM = 0.1
"""Position errors are drawn on a log scale, floored here, mm."""


def plot_errors(
    runs: Mapping[str, Mapping[str, Sequence[float]]],
    path: str | Path,
    events: Sequence[float] = (),
    desync: Mapping[str, Sequence[float]] | None = None,
    title: str = "",
) -> None:
    """Position error (mm) and yaw error (deg) against time (s), one line per run.

    `runs[name]` holds "time" s, "pos_err" m and "yaw_err" rad per frame; `events` are disturbance times
    (dashed lines); `desync[name]` are times the desync detector fired (marked on that run's line)."""
    if not runs:
        raise ValueError("runs: nothing to plot")
    fig, (ax_pos, ax_yaw) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, constrained_layout=True)
    for name, series in runs.items():
        t = np.asarray(series["time"])
        pos_mm = np.maximum(1e3 * np.asarray(series["pos_err"]), FLOOR_MM)
        (line,) = ax_pos.plot(t, pos_mm, label=name, linewidth=1.2)
        ax_yaw.plot(t, np.degrees(np.asarray(series["yaw_err"])), label=name, linewidth=1.2, color=line.get_color())
        for when in (desync or {}).get(name, ()):
            ax_pos.axvline(when, color=line.get_color(), linestyle=":", linewidth=1)
    for when in events:
        for ax in (ax_pos, ax_yaw):
            ax.axvline(when, color="0.4", linestyle="--", linewidth=1)
    ax_pos.axhline(1e3 * RECOVERED_M, color="0.6", linewidth=0.8)
    ax_pos.set_ylabel("position error (mm)")
    ax_yaw.set_ylabel("yaw error (deg)")
    ax_yaw.set_xlabel("time (s)")
    ax_pos.set_yscale("log")
    ax_pos.legend(loc="upper left")
    ax_pos.grid(alpha=0.3)
    ax_yaw.grid(alpha=0.3)
    if title:
        ax_pos.set_title(title)
    fig.savefig(Path(path), dpi=110)
    plt.close(fig)
