"""Desync detection from what a real deployment has: the photometric residual, the visual force, and where
the cameras see the object.

The twin is out of sync when it no longer explains the camera images: the residual (the correction's
photometric loss) rises well above its own baseline, or the visual force stays saturated while the cameras do
not see the object where the twin has it, or the object the cameras see (`estimate.sighting`) stands away from the
twin's. All are judged from images, calibration and the twin, never from ground truth. A saturated force alone
is not evidence: under sustained contact the correction's integral reaches its cap whenever the twin's pusher
and the real one press the object a few millimetres apart, in sync. When the detector fires, the runtime makes
the follower hold the real arm; it re-arms once the residual has come back down and the seen object agrees with
the twin's again.

The baseline learns only from frames that look in sync (residual below `recover` × baseline and, when a
sighting is given, the object seen where the twin has it): a twin drifting away slowly must not teach the
detector that drifting is normal. One exception: when the detector re-arms on a re-acquisition's confirmation
with the residual still high (the twin is where the images show the object, but the images hold what the twin
does not render: shadows, the arm over the object), that residual becomes a floor under the baseline until the
residual comes back down to the baseline's level; otherwise it would fire again on the next frame. The shape
overlap has its own in-sync level and, after such a re-arm with the overlap still low, its own floor, cleared
once the overlap is back above its threshold.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from realissim.twin.physics import FRAME_RATE

log = logging.getLogger(__name__)

LOSS_DISTANCE = 0.02
"""m: an object of the twin more than this from the real one (planar) is lost: what the detector's sighting
fires on, what the search's alarm check vetoes within, and what the oracle's sync metrics count as a loss."""


@dataclass(frozen=True)
class DesyncConfig:
    """Thresholds of the desync detector; its times are in seconds (the detector counts them in the frames it is
    fed: `DesyncCounts`)."""

    warmup_s: float = 1.0
    """In-sync residuals learnt as the baseline before the detector can fire, s."""
    rise: float = 3.0
    """Fire when the residual exceeds this multiple of its baseline ..."""
    fire_s: float = 1.0 / 3.0
    """... for this long (or the force is saturated, with the sighting not agreeing, as long), s."""
    recover: float = 1.5
    """Re-arm once the residual has been below this multiple of the baseline for `fire_s`."""
    baseline_s: float = 5.0
    """In-sync residuals the baseline (their median) is taken over, s."""
    sight_distance: float = LOSS_DISTANCE
    """The seen object counts as elsewhere when it stands more than this from the twin's, m (a loss's distance,
    `LOSS_DISTANCE`) ..."""
    sight_s: float = 0.1
    """... for this long: fire, s."""
    min_overlap: float = 0.0
    """The seen object's shape disagrees with the twin's when their overlap (IoU, mean over the cameras) is below
    this (0: not used) ..."""
    overlap_drop: float = 0.75
    """... or below this × its in-sync baseline (the median overlap of the frames the residual's baseline learns
    from, less those already halfway down to this threshold; 0: not used). The sighting's centroids miss a fast
    turn about the object's middle, the overlap does not (docs/decisions.md, "A saturated force alone
    does not fire; the shape overlap does") ..."""
    overlap_s: float = 0.1
    """... for this long: fire, s."""

    def __post_init__(self) -> None:
        for name in ("warmup_s", "fire_s", "baseline_s", "sight_s", "overlap_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0 s, got {getattr(self, name)}")

    def counts(self, frame_dt: float) -> DesyncCounts:
        """The detector's frame counts when it is fed one frame every `frame_dt` s: each time over `frame_dt`,
        rounded up (at least 1; a time that is a whole number of frames, to float rounding, is that number)."""
        if not frame_dt > 0:
            raise ValueError(f"frame_dt: must be > 0 s, got {frame_dt}")

        def frames(seconds: float) -> int:
            return max(1, math.ceil(round(seconds / frame_dt, 6)))

        return DesyncCounts(frames(self.warmup_s), frames(self.fire_s), frames(self.baseline_s),
                            frames(self.sight_s), frames(self.overlap_s))  # fmt: skip


@dataclass(frozen=True)
class DesyncCounts:
    """`DesyncConfig`'s times as counts of the frames the detector is fed."""

    warmup: int
    frames: int
    """Consecutive frames of high residual (or unconfirmed saturated force) that fire; of low ones that re-arm."""
    baseline_window: int
    sight_frames: int
    overlap_frames: int


_REASONS = ("residual", "visual force", "sighting distance", "shape overlap")
"""The ways the detector fires, as its log names them (in `update`'s order)."""


class DesyncDetector:
    """Feed it every frame's residual and force; `desynced` says whether the twin is out of sync."""

    def __init__(self, config: DesyncConfig = DesyncConfig(), frame_dt: float = 1.0 / FRAME_RATE) -> None:
        """`frame_dt`: the period of the frames it is fed, s (a runtime correcting every n-th frame feeds one
        frame in n: n × the physics frame)."""
        self.config = config
        self.counts = config.counts(frame_dt)
        """The config's times in frames of `frame_dt`."""
        self._baseline: deque[float] = deque(maxlen=self.counts.baseline_window)
        self._overlaps: deque[float] = deque(maxlen=self.counts.baseline_window)
        self._high = self._pulled = self._low = self._away = self._skewed = 0
        self.desynced = False
        self._confirmed = False
        self.sight_slack = 0.0
        """m added to the sighting's thresholds: its error where the twin is known to be right (set at
        calibration; under shade and shadows the colour sighting is off by up to ~2 cm there)."""
        self.events: list[tuple[int, str]] = []
        """(frame, "fired" | "re-armed") in order."""
        self.vetoes: list[int] = []
        """Frames at which the evidence would have fired but the check given to `update` found the twin right."""
        self._frame = 0
        self._floor = self._overlap_floor = 0.0
        self._recent: deque[float] = deque(maxlen=self.counts.frames)
        self._recent_overlap: deque[float] = deque(maxlen=self.counts.frames)

    def set_period(self, frame_dt: float) -> None:
        """Count the config's times in frames of `frame_dt` s from now on (a correction beside the loop feeds the
        detector at the rate it manages, which it measures): the baselines and recent values keep their latest
        entries, the running counts carry on."""
        counts = self.config.counts(frame_dt)
        if counts == self.counts:
            return
        self.counts = counts
        self._baseline = deque(self._baseline, maxlen=counts.baseline_window)
        self._overlaps = deque(self._overlaps, maxlen=counts.baseline_window)
        self._recent = deque(self._recent, maxlen=counts.frames)
        self._recent_overlap = deque(self._recent_overlap, maxlen=counts.frames)

    def restart(self) -> None:
        """A new episode: in sync, no events, counters cleared; the learned baseline (a property of the cameras
        and the scene's look, not of the episode) is kept."""
        self._high = self._pulled = self._low = self._away = self._skewed = self._frame = 0
        self.desynced = self._confirmed = False
        self.events = []
        self.vetoes = []
        self._floor = self._overlap_floor = 0.0
        self._recent.clear()
        self._recent_overlap.clear()

    def confirm(self) -> None:
        """While out of sync: a re-acquisition has put the twin's objects where the images show them (or found
        them there). Until it re-arms, the detector then re-arms on the sighting's agreement alone (`frames`
        frames of it), without waiting for the residual to reach its baseline: that was learned with the
        objects elsewhere in the images, and the residual's level depends on where they are (what the arm
        hides, the table under them). No-op while in sync."""
        self._confirmed = self.desynced

    @property
    def suspicion(self) -> float:
        """How far the evidence against sync has come towards firing: the largest of the four ways' consecutive
        counts, each over the count that fires it (0: no evidence; ≥ 1 fires). 0 while out of sync."""
        if self.desynced:
            return 0.0
        n = self.counts
        return max(self._high / n.frames, self._pulled / n.frames, self._away / n.sight_frames,
                   self._skewed / n.overlap_frames)  # fmt: skip

    def clear(self) -> None:
        """In sync: the twin's objects were just put where the images show them (an early search,
        `SupervisionConfig.early_search`), so the evidence gathered against their old pose no longer holds; the
        firing counts start afresh. The baselines are kept. No-op while out of sync."""
        if not self.desynced:
            self._high = self._pulled = self._away = self._skewed = 0

    @property
    def baseline(self) -> float:
        """The median in-sync residual (inf during warm-up)."""
        return float(np.median(self._baseline)) if len(self._baseline) >= self.counts.warmup else float("inf")

    @property
    def overlap_baseline(self) -> float:
        """The median in-sync shape overlap (NaN until `warmup` frames with a measured overlap)."""
        return float(np.median(self._overlaps)) if len(self._overlaps) >= self.counts.warmup else float("nan")

    @property
    def floor(self) -> float:
        """The residual level confirmed as in sync at the last re-arm on a confirmation (0: none): the rise is
        measured from max(baseline, floor). Cleared once the residual is back below `recover` × baseline."""
        return self._floor

    def update(
        self,
        residual: float,
        force_saturated: bool = False,
        distance: float | None = None,
        overlap: float | None = None,
        check: Callable[[], bool] | None = None,
        frame: int | None = None,
    ) -> bool:
        """Add one frame: the photometric residual, whether the visual force hit its cap, and (optional) how
        far the seen object stands from the twin's, m, and how well their shapes overlap (IoU in [0, 1]) (None
        or NaN: not seen, no evidence either way). Returns `desynced`.

        `check` (optional) is asked only when this frame's evidence would fire: it returns whether the loss is
        confirmed (the runtime searches the images: `SupervisionConfig.alarm_check`). When it returns False the
        detector stays in sync, records the frame in `vetoes` and starts its firing counts afresh, as `clear`
        does: the evidence must build again before the next check. `frame` numbers this frame in `events`, `vetoes`
        and the log (the loop's frames since the reset, before this one; None: the count of updates since the
        restart, which is the same while every frame is fed).

        Each way to fire (residual, force, distance, overlap) counts its own consecutive frames. A fire starts the
        re-arm count afresh and a re-arm the firing counts: a re-arm needs `frames` agreeing frames after the
        fire, and a new fire needs fresh evidence after the re-arm. While a low overlap lasts the detector stays
        fired until a search confirms the twin (as with the distance)."""
        if frame is not None:
            self._frame = frame
        cfg = self.config
        base = self.baseline
        d = float("nan") if distance is None else float(distance)
        o = float("nan") if overlap is None else float(overlap)
        away = d > cfg.sight_distance + self.sight_slack  # False for NaN: not seen is no evidence
        shape = self.overlap_baseline
        if self._overlap_floor and o >= cfg.overlap_drop * shape:  # (False for NaN: not seen is no evidence)
            self._overlap_floor = 0.0  # the shapes overlap as in sync again
        shape = min(shape, self._overlap_floor) if self._overlap_floor else shape
        skewed = o < cfg.min_overlap or o < cfg.overlap_drop * shape  # False for NaN
        agrees = not d > 0.5 * cfg.sight_distance + self.sight_slack and (not skewed or self._confirmed)
        if self._floor and residual < cfg.recover * base:
            self._floor = 0.0  # the images look as the baseline knows them again
        self._recent.append(float(residual))
        self._recent_overlap.append(o)
        high = residual > cfg.rise * max(base, self._floor)
        # A capped pull while the cameras see the object where the twin has it (or do not see it) is the contact
        # fighting the integral, not a loss (docs/decisions.md, "A saturated force alone does not fire").
        pulled = force_saturated and not agrees
        low = (residual < cfg.recover * base or self._confirmed) and agrees
        self._high = self._high + 1 if high else 0
        self._pulled = self._pulled + 1 if pulled else 0
        self._away = self._away + 1 if away else 0
        self._skewed = self._skewed + 1 if skewed else 0
        self._low = self._low + 1 if low else 0
        n = self.counts
        hits = (
            self._high >= n.frames,
            self._pulled >= n.frames,
            self._away >= n.sight_frames,
            self._skewed >= n.overlap_frames,
        )
        vetoed = not self.desynced and any(hits) and check is not None and not check()
        if vetoed:
            self.vetoes.append(self._frame)
            self._high = self._pulled = self._away = self._skewed = 0
            log.info("desync evidence at frame %d not confirmed by the check: in sync", self._frame)
        elif not self.desynced and any(hits):
            self.desynced = True
            self._low = 0
            self.events.append((self._frame, "fired"))
            why = [name for name, hit in zip(_REASONS, hits, strict=True) if hit]
            log.info("desync fired at frame %d (%s): residual %.3g (baseline %.3g), seen %.1f mm away, overlap %.2f",
                     self._frame, ", ".join(why), residual, base, 1e3 * d, o)  # fmt: skip
        elif self.desynced and self._low >= n.frames:
            if self._confirmed and not residual < cfg.recover * base:
                # Re-armed on the search's and the sighting's word, not the residual's: its level now is what
                # in sync looks like here.
                self._floor = float(np.median(self._recent))
            if self._confirmed:  # likewise the overlap's, judged on the last `frames` frames (not one)
                recent = np.asarray(self._recent_overlap)
                recent = recent[np.isfinite(recent)]
                level = float(np.median(recent)) if recent.size else float("nan")
                if level < cfg.overlap_drop * self.overlap_baseline:
                    self._overlap_floor = max(level, 1e-9)
            self.desynced = self._confirmed = False
            self._high = self._pulled = self._away = self._skewed = 0
            self.events.append((self._frame, "re-armed"))
        warming = len(self._baseline) < n.warmup
        if not self.desynced and not high and agrees and (warming or residual < cfg.recover * base):
            self._baseline.append(float(residual))
            if np.isfinite(o) and (warming or not o < 0.5 * (1.0 + cfg.overlap_drop) * self.overlap_baseline):
                self._overlaps.append(o)  # (not from frames halfway to the threshold: a slow drift must not teach it)
        self._frame += 1
        return self.desynced
