"""How well the twin tracks reality: object position and yaw error against the oracle (evaluation only)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from realissim.geometry import quat_to_mat
from realissim.runtime.desync import LOSS_DISTANCE

RECOVERED_M = 0.005
"""An object counts as re-converged once its position error stays below this, m."""


def pose_errors(
    twin_pos: ArrayLike, twin_quat: ArrayLike, true_pos: ArrayLike, true_quat: ArrayLike
) -> tuple[float, float]:
    """An object's position error, m (3D distance), and yaw error, rad in [0, π], twin against truth (pos (3,)
    m, quat (4,) wxyz).

    The yaw error is the smaller of the differences in heading of the body x axes and of the body y axes (each
    projected on the table). For two bodies the same way up both are equal; for one turned upside down (a T the
    pusher flipped over about its stem axis: the same footprint, but body x reversed) only the axis it turned
    about still compares the footprints, and x alone would report 180°."""
    twin_R, true_R = quat_to_mat(np.asarray(twin_quat)), quat_to_mat(np.asarray(true_quat))
    errors = []
    for axis in (0, 1):
        d = math.atan2(twin_R[1, axis], twin_R[0, axis]) - math.atan2(true_R[1, axis], true_R[0, axis])
        errors.append(abs(math.atan2(math.sin(d), math.cos(d))))
    return float(np.linalg.norm(np.asarray(twin_pos) - np.asarray(true_pos))), min(errors)


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
        pos_err, yaw_err = pose_errors(twin_pos, twin_quat, true_pos, true_quat)
        self.times.append(float(time))
        self.pos_err.append(pos_err)
        self.yaw_err.append(yaw_err)

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
        (s) after the given event times, below `RECOVERED_M` and below twice it."""
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
            out["recovery_10mm_s"] = max(self.recovery(e, 2 * RECOVERED_M) for e in events)
        return out


LOSS_MIN_S = 0.25
"""An oracle desync episode must last longer than this, s, and the detector must fire within it of its start."""
YAW_LOST_RAD = math.radians(10.0)
"""For `detector_score`'s pose variant of false alarms: a yaw error above this counts as lost too (turning the
PushT T by 10° about its centre moves the ends of its bar by 1.7 cm)."""


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index ranges where `flags` is True."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.nonzero(edges == 1)[0].tolist(), np.nonzero(edges == -1)[0].tolist()))


def detector_score(
    times: np.ndarray,
    pos_err: np.ndarray,
    desynced: np.ndarray,
    threshold: float = LOSS_DISTANCE,
    min_duration: float = 0.0,
    within: float | None = None,
    yaw_err: np.ndarray | None = None,
    yaw_threshold: float = YAW_LOST_RAD,
) -> dict[str, float | int | list]:
    """The desync detector judged against the oracle (evaluation only).

    An oracle episode is a run of frames with position error > `threshold` m lasting more than `min_duration`
    s; the detector hits it if it reports desync at a frame of the episode — within `within` s of its start,
    if given (a detector already firing when the episode starts hits it). A detector alarm (a run of frames it
    reports desync) is false if the oracle error stays ≤ `threshold` throughout it and, given `within`, over the
    `within` s before it (a loss the alarm's re-acquisition ended at once leaves no error during the alarm).
    Also returns the recall (hits / episodes; 1 when there are none), false alarms per minute of in-sync
    running, the frames of each kind, the length (s) of each missed episode, and the silent loss: seconds with
    error > `threshold` while the detector said in sync (in all, and the longest such stretch). Given the yaw
    error (rad, per frame), also `false_alarms_pose` and its rate per minute: the alarms that are false even with
    a yaw error over `yaw_threshold` counted as lost (an object turned about its centre is lost, though the
    position error, which alone defines the oracle's episodes, does not say so)."""
    times, pos_err, desynced = np.asarray(times), np.asarray(pos_err), np.asarray(desynced, dtype=bool)
    dt = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    bad = pos_err > threshold
    episodes = [e for e in _runs(bad) if (e[1] - e[0]) * dt > min_duration]
    alarms = _runs(desynced)
    window = len(times) if within is None else max(1, round(within / dt) + 1) if dt > 0 else 1

    def hit(e: tuple[int, int]) -> bool:
        return bool(desynced[e[0] : min(e[1], e[0] + window)].any())

    hits = [e for e in episodes if hit(e)]
    missed = [e for e in episodes if not hit(e)]
    # An alarm is false when the error stays within the threshold throughout it and over the `within` window
    # before it (an alarm raised on a loss that its own re-acquisition ended at once is a hit, not a false one).
    lead = 0 if within is None else window - 1
    false = [a for a in alarms if not bad[max(0, a[0] - lead) : a[1]].any()]
    silent = bad & ~desynced
    in_sync_min = float((~bad).sum()) * dt / 60.0
    pose: dict[str, float | int] = {}
    if yaw_err is not None:
        lost = bad | (np.asarray(yaw_err) > yaw_threshold)
        n = len([a for a in false if not lost[max(0, a[0] - lead) : a[1]].any()])
        minutes = float((~lost).sum()) * dt / 60.0
        pose = {"false_alarms_pose": n, "false_alarms_pose_per_min": n / minutes if minutes > 0 else 0.0}
    return {
        "oracle_episodes": len(episodes),
        "hits": len(hits),
        "misses": len(missed),
        "recall": len(hits) / len(episodes) if episodes else 1.0,
        "false_alarms": len(false),
        "false_alarms_per_min": len(false) / in_sync_min if in_sync_min > 0 else 0.0,
        "alarms": len(alarms),
        "frames_out_of_sync": int(bad.sum()),
        "frames_flagged": int(desynced.sum()),
        "frames_flagged_in_sync": int((desynced & ~bad).sum()),
        "missed_episode_s": [round((e - s) * dt, 3) for s, e in missed],
        "silent_loss_s": float(silent.sum()) * dt,
        "longest_silent_loss_s": max(((e - s) * dt for s, e in _runs(silent)), default=0.0),
        **pose,
    }


def fault_outcome(
    times: np.ndarray,
    pos_err: np.ndarray,
    desynced: np.ndarray,
    start: float,
    end: float,
    threshold: float = LOSS_DISTANCE,
    grace: float = 1.0,
) -> dict[str, float | int | str]:
    """What a fault lasting [start, end) s did, judged over it and the `grace` s after it (evaluation only).

    Returns the largest position error (mm), the frames the detector reported desync (the follower held the
    real arm), the seconds after the fault until the error was back ≤ `threshold` (inf if never; 0 if it
    never left), and the verdict: "tracked" (the error stayed ≤ `threshold`), "held" (it did not, and the
    detector fired and the follower held), "recovered" (it did not, unnoticed, but was back within `grace`
    s of the fault's end: the cameras could not show the change until then), or "diverged"."""
    times, pos_err, desynced = np.asarray(times), np.asarray(pos_err), np.asarray(desynced, dtype=bool)
    window = (times >= start) & (times < end + grace)
    if not window.any():
        return {"max_err_mm": math.nan, "held_frames": 0, "back_in_sync_s": math.nan, "verdict": "not reached"}
    worst = float(pos_err[window].max())
    held = int(desynced[window].sum())
    after = np.nonzero((times >= end) & (pos_err <= threshold))[0]
    back = 0.0 if worst <= threshold else (float(times[after[0]] - end) if len(after) else math.inf)
    if worst <= threshold:
        verdict = "tracked"
    elif held:
        verdict = "held"
    else:
        verdict = "recovered" if back <= grace else "diverged"
    return {"max_err_mm": 1e3 * worst, "held_frames": held, "back_in_sync_s": back, "verdict": verdict}
