"""Supervision: what watches the corrected twin against the images and acts when they part (docs/design.md §4).

Every corrected frame `Supervisor.update` sights the objects in the images, feeds the desync detector (whose alarm
the search may veto: the alarm check), and, while the detector fires, searches the objects and puts the twin's
where the images show them (re-acquisition); with `early_search`, it searches on the detector's suspicion while
still in sync. Its state is one small machine:

- in sync: nothing held; an early search may place an object and then hold both arms for `early_hold` frames;
- fired (`lost`): both arms hold and the correction's wrench is withheld (`withholding`) until a search has placed
  or confirmed every object; searched again after `retry_frames` (nothing placed) or `recheck_frames` (placed but
  the detector has not re-armed);
- placed or confirmed, not yet re-armed: the arms still hold; the correction tracks again.

It never reads the oracle. What it does to the twin (moving the twin arm to the real one, placing an object) it
does itself; what the loop must do after (reset the correction, hold the arm where it was moved, restart the lead
bound) it reports in its `Supervision`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import partial

import numpy as np

from realissim.estimate.correction import CorrectionResult
from realissim.estimate.placement import Placement, place_object
from realissim.estimate.search import ObjectSearch, SearchResult, TippedPose
from realissim.estimate.sighting import ObjectSighting, Sighting
from realissim.geometry import quat_yaw
from realissim.runtime.config import SupervisionConfig
from realissim.runtime.desync import DesyncDetector
from realissim.twin.physics import TwinPhysics
from realissim.twin.state import TwinState
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reacquisition:
    """One re-acquisition attempt of one object: the search, and where the twin's object was put (None: not
    placed, because the search found nothing reliable or the twin's pose already explains the images as well)."""

    frame: int
    """Frames since the reset, this one included."""
    object: int
    """The object's index (the scene's order)."""
    search: SearchResult
    placement: Placement | None
    early: bool = False
    """Made in sync, on the detector's suspicion (`SupervisionConfig.early_search`), not after it fired."""
    check: bool = False
    """The alarm check's search (`SupervisionConfig.alarm_check`) that found the twin right: no alarm, nothing
    placed."""

    @property
    def placed(self) -> bool:
        return self.placement is not None and self.placement.placed


@dataclass(frozen=True)
class Supervision:
    """What one corrected frame's supervision saw and did."""

    sightings: tuple[ObjectSighting, ...]
    """Where the cameras saw each object."""
    attempts: tuple[Reacquisition, ...] = ()
    """Re-acquisition attempts (searches with their placements) made this frame."""
    placed: bool = False
    """An object was placed: the correction's accumulated state belonged to the lost pose (reset it)."""
    arm_at: np.ndarray | None = None
    """(J,) rad: where a placement moved the twin arm (the real arm's joints); the arm holds there."""
    restart_lead: bool = False
    """An early placement starts a hold: the lead bound's path restarts from the held arm."""


class Supervisor:
    """The detector, the sighting and (with `reacquire`) the search over the twin's views of the real cameras,
    with their state between frames. The detector is fed one frame in `correct_every` (its counts are scaled so
    its times in seconds stay the same)."""

    def __init__(self, views: TwinViews, twin: TwinPhysics, config: SupervisionConfig, correct_every: int) -> None:
        self.config, self.twin = config, twin
        self.detector = DesyncDetector(config.desync, frame_dt=twin.dt * correct_every)
        self.sighting = Sighting(views, twin.model, config.sighting)
        self.search: ObjectSearch | None = (
            ObjectSearch(views, twin.model, config.search, self.sighting) if config.reacquire else None
        )
        self.reacquisitions: list[Reacquisition] = []
        """This episode's re-acquisition attempts, in order."""
        self.tipped: dict[int, TippedPose] = {}
        """Objects the latest search of each recognised standing on a side (`SearchConfig.tipped`), by index: the
        twin's objects lie flat and cannot follow them, so the detector holds the arm until each is found lying."""
        self.restart()

    def restart(self) -> None:
        """A new episode: in sync (the detector keeps its learned baseline), nothing held or searched."""
        self.detector.restart()
        self.reacquisitions = []
        self.tipped = {}
        self._frame = self._next_search = self._next_early = self._settle_left = 0
        self._lost = False
        self._checked: tuple[list[SearchResult], float] | None = None

    @property
    def desynced(self) -> bool:
        """Whether the detector currently says the twin is out of sync with reality."""
        return self.detector.desynced

    @property
    def withholding(self) -> bool:
        """The correction's wrench is not to be applied: fired, and nothing placed or confirmed since
        (`rest_while_held`)."""
        return self._lost and self.config.rest_while_held

    def hold_this_frame(self) -> bool:
        """Whether both arms hold this frame: while the detector fires, and for `early_hold` frames after an early
        placement (counted down by this call: once per frame)."""
        settling = self._settle_left > 0 and not self.desynced
        if settling:
            self._settle_left -= 1
        return self.desynced or settling

    def update(
        self, frame: int, result: CorrectionResult, q_real: np.ndarray, images: np.ndarray, timing: dict[str, float]
    ) -> Supervision:
        """A corrected frame, `frame` frames since the reset (this one included): sight the objects in `images`
        (C,H,W,3) uint8 against the twin (the real arm at `q_real` (J,) rad), update the detector with the
        correction's residual and saturation, and search where due. Adds "sight" (and "check", "reacquire" when
        they ran) to `timing`, s."""
        self._frame = frame
        t0 = time.perf_counter()
        sightings = tuple(self.sighting.observe(self.twin, q_real, images))
        self._checked = None
        was = self.desynced
        checking = self.config.alarm_check is not None and self.search is not None
        check = partial(self._loss_confirmed, q_real, images) if checking else None
        self.detector.update(result.residual, result.saturated, *_evidence(sightings), check=check, frame=frame - 1)
        if self.desynced and not was:
            self._lost = True
        elif not self.desynced:
            self._lost = False
        timing["sight"] = time.perf_counter() - t0
        if not self.desynced:
            self._next_search = 0  # the next time it fires, search at once
        if self._checked is not None:
            checked, seconds = self._checked
            timing["check"] = seconds  # the alarm check's search (inside the detector's update)
            timing["sight"] -= seconds
            if not self.desynced:
                self.reacquisitions.extend(
                    Reacquisition(self._frame, k, found, None, check=True) for k, found in enumerate(checked)
                )
        if self.search is None:
            return Supervision(sightings)
        early = (
            self.config.early_search > 0
            and self.detector.suspicion >= self.config.early_search
            and self._frame >= self._next_early
        )
        if not ((self.desynced and self._frame >= self._next_search) or (not self.desynced and early)):
            return Supervision(sightings)
        t0 = time.perf_counter()
        supervision = self._reacquire(sightings, q_real, images, early=not self.desynced)
        timing["reacquire"] = time.perf_counter() - t0
        return supervision

    def _reacquire(
        self, sightings: tuple[ObjectSighting, ...], q_real: np.ndarray, images: np.ndarray, early: bool
    ) -> Supervision:
        """Search every object in this frame's images; put each found one where the search found it (the twin arm
        first moved to the real arm's joints), unless the twin's pose scores as well (then the twin was right
        about it). An object neither placed nor confirmed is searched again after `retry_frames`. `early`: in
        sync, on the detector's suspicion: a placement starts the detector's evidence afresh, and the next early
        search waits `early_every` frames."""
        assert self.search is not None
        attempts, arm_at = [], None
        settled = True  # every object placed where the images show it, or found where the twin has it
        checked = self._checked[0] if self._checked is not None else None
        for k in range(len(self.sighting.object_bodies)):
            # (the alarm check searched this frame's images already, the twin unchanged since)
            found = checked[k] if checked is not None else self.search.search(self.twin, q_real, images, k)
            # Placed only when the found pose explains clearly more of the images than the twin's (the loss
            # they remove from the object-absent loss); else the twin was right about the object.
            gain = found.empty_score - found.score
            better = found.found and (found.empty_score - found.current_score) < self.config.confirm_fraction * gain
            placement = None
            if better:
                # The twin arm to the real one first (they are held together), so the object is placed clear of
                # where the real arm is, not of where the twin's ran ahead to.
                arm_at = self.twin.set_robot(q_real)
                placement = place_object(self.twin, k, found.pos, found.quat, self.config.placement)
            self._note_tipped(k, found)
            attempt = Reacquisition(self._frame, k, found, placement, early)
            settled &= attempt.placed or (found.found and not better)
            attempts.append(attempt)
        placed = any(a.placed for a in attempts)
        restart_lead = False
        if early:
            self._next_early = self._frame + self.config.early_every
            if placed:
                self.detector.clear()
                if self.config.early_hold:
                    self._settle_left = self.config.early_hold
                    restart_lead = True
        else:
            if settled:
                self.detector.confirm()
            if settled or placed:
                self._lost = False  # the twin's objects are where the images show them: the correction may track
            # Unsettled (not seen, nothing reliable, blocked): searched again soon; settled: only if the detector
            # has not re-armed a while later.
            self._next_search = self._frame + (self.config.recheck_frames if settled else self.config.retry_frames)
        if placed:
            log.info("%s at frame %d: %s", "placed early" if early else "re-acquired", self._frame,
                     ", ".join(f"object {a.object} → ({a.search.pos[0]:.3f}, {a.search.pos[1]:.3f}) m, "
                               f"{np.degrees(a.search.yaw):.0f}°" for a in attempts if a.placed))  # fmt: skip
        self.reacquisitions.extend(attempts)
        return Supervision(sightings, tuple(attempts), placed, arm_at, restart_lead)

    def _note_tipped(self, k: int, found: SearchResult) -> None:
        """`tipped` after a search of object `k`: set (a warning the first time) when it saw the object standing on a
        side, cleared when it found the object lying."""
        if found.tipped is not None:
            if k not in self.tipped:
                t = found.tipped
                log.warning("frame %d: object %d is standing on a side (%s, at (%.3f, %.3f) m): the twin's objects lie "
                            "flat and cannot follow it; the arm stays held until it lies flat again", self._frame, k,
                            t.rest, t.pos[0], t.pos[1])  # fmt: skip
            self.tipped[k] = found.tipped
        elif found.found and self.tipped.pop(k, None) is not None:
            log.info("frame %d: object %d lies flat again", self._frame, k)

    def _loss_confirmed(self, q_real: np.ndarray, images: np.ndarray) -> bool:
        """The alarm check (`SupervisionConfig.alarm_check`): search every object in this frame's images (near the
        twin's pose first: `alarm_check_near`); the loss is confirmed unless each is found within the check's distance
        and yaw of the twin's pose. The searches are kept for this frame's re-acquisition."""
        assert self.search is not None and self.config.alarm_check is not None
        t0 = time.perf_counter()
        state = self.twin.state()  # the objects' poses the search compares against (from qpos, as it does)
        results = []
        for k in range(len(self.sighting.object_bodies)):
            near = None
            if self.config.alarm_check_near is not None:  # clearly found where the twin has it: no global search
                near = self.search.search_near(self.twin, q_real, images, k)
                explained = 1.0 - near.score / near.empty_score if near.found and near.empty_score > 0 else 0.0
                if explained < self.config.alarm_check_near or self._far(*self._offset(near, state, k)):
                    near = None  # the global search decides (and, if the alarm stands, places from its pose)
            results.append(near if near is not None else self.search.search(self.twin, q_real, images, k))
        self._checked = (results, time.perf_counter() - t0)
        for k, found in enumerate(results):  # (a veto skips `_reacquire`)
            self._note_tipped(k, found)
        confirmed = False
        for k, found in enumerate(results):
            if not found.found:
                log.info("alarm check at frame %d: object %d not found: the alarm stands", self._frame, k)
                confirmed = True
                continue
            off, turn = self._offset(found, state, k)
            far = self._far(off, turn)
            log.info("alarm check at frame %d: object %d found %.1f mm, %.1f° from the twin's: %s", self._frame, k,
                     1e3 * off, math.degrees(turn), "the alarm stands" if far else "no alarm")  # fmt: skip
            confirmed |= far
        return confirmed

    @staticmethod
    def _offset(found: SearchResult, state: TwinState, k: int) -> tuple[float, float]:
        """Planar distance (m) and yaw difference (rad) between the found pose of object `k` and the twin's."""
        off = float(np.hypot(*(found.pos[:2] - state.object_pos[k, :2])))
        turn = abs(math.remainder(found.yaw - float(quat_yaw(state.object_quat[k])), 2.0 * math.pi))
        return off, turn

    def _far(self, off: float, turn: float) -> bool:
        """Whether a found pose `off` m and `turn` rad from the twin's (`_offset`) is beyond the alarm check's."""
        assert self.config.alarm_check is not None
        return off > self.config.alarm_check or turn > self.config.alarm_check_yaw


def _evidence(sightings: tuple[ObjectSighting, ...]) -> tuple[float, float]:
    """The detector's sighting evidence: the largest distance between a seen object and the twin's, m (NaN: none
    seen), and the smallest mean shape overlap of an object over the cameras (NaN: none measurable)."""
    distances = [s.distance for s in sightings if s.seen]
    overlaps = [float(np.nanmean(s.overlap)) for s in sightings if s.seen and np.isfinite(s.overlap).any()]
    return (max(distances) if distances else float("nan")), (min(overlaps) if overlaps else float("nan"))
