"""How well the twin tracks reality: object position and yaw error against the oracle (evaluation only)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from realissim.geometry import quat_yaw

RECOVERED_M = 0.005
"""An object counts as re-converged once its position error stays below this, m."""


@dataclass
class SyncRecorder:
    """Per-frame twin-vs-truth errors of one object: time s, position error m (xyz), yaw error rad."""

    times: list[float] = field(default_factory=list)
    pos_err: list[float] = field(default_factory=list)
    yaw_err: list[float] = field(default_factory=list)

    def add(
        self, time: float, twin_pos: ArrayLike, twin_quat: ArrayLike, true_pos: ArrayLike, true_quat: ArrayLike
    ) -> None:
        """Record one frame: the twin's and the true pose of the object (pos (3,) m, quat (4,) wxyz)."""
        self.times.append(float(time))
        self.pos_err.append(float(np.linalg.norm(np.asarray(twin_pos) - np.asarray(true_pos))))
        d = quat_yaw(np.asarray(twin_quat)) - quat_yaw(np.asarray(true_quat))
        self.yaw_err.append(abs(math.atan2(math.sin(d), math.cos(d))))

    def recovery(self, event_time: float, threshold: float = RECOVERED_M) -> float:
        """Seconds after `event_time` until the position error falls below `threshold` and stays there;
        inf if it never does."""
        t = np.asarray(self.times)
        err = np.asarray(self.pos_err)
        after = t >= event_time
        if not after.any():
            return math.inf
        bad = np.nonzero(after & (err >= threshold))[0]
        if len(bad) == 0:
            return 0.0
        last_bad = bad[-1]
        return math.inf if last_bad == len(t) - 1 else float(t[last_bad + 1] - event_time)

    def summary(self, events: tuple[float, ...] = ()) -> dict[str, float]:
        """Median and p95 of the position error (mm) and yaw error (deg), and the worst re-convergence time
        (s) after the given event times."""
        pos = 1e3 * np.asarray(self.pos_err)
        yaw = np.degrees(np.asarray(self.yaw_err))
        out = {
            "pos_err_median_mm": float(np.median(pos)),
            "pos_err_p95_mm": float(np.percentile(pos, 95)),
            "yaw_err_median_deg": float(np.median(yaw)),
            "yaw_err_p95_deg": float(np.percentile(yaw, 95)),
        }
        if events:
            out["recovery_s"] = max(self.recovery(e) for e in events)
        return out
