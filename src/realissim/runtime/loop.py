"""The Real-is-Sim frame loop: one wiring, two switches (docs/design.md §3).

Every frame: read the real cameras and the real arm's joints; if `correct`, ask the visual correction for
this frame's wrench on the twin's objects and apply it; step the twin with the commanded joint targets; if
`follow`, stream the twin arm's *actual* joints to the real robot through the follower; in lock-step,
advance the real world one frame. Online is both switches on, over a `RealWorld` (the surrogate or
hardware); offline is both off, with no real world at all. The frame period is the twin's
(`PhysicsConfig.fps`), and everything below the loop is given it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import torch
from numpy.typing import ArrayLike

from realissim.assets.appearance import AppearanceConfig
from realissim.geometry import quat_yaw
from realissim.real.follower import Follower, FollowerConfig
from realissim.real.interfaces import CameraStalledError, RealWorld
from realissim.runtime.desync import DesyncConfig, DesyncDetector
from realissim.runtime.lead import LeadBound
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.twin.board_calibration import BoardCalibrationConfig, BoardFit, calibrate_from_board
from realissim.twin.camera_refine import CameraRefineConfig, refine_cameras
from realissim.twin.color_fit import ColorFitConfig, fit_colors
from realissim.twin.correction import CorrectionConfig, CorrectionResult, VisualCorrection
from realissim.twin.physics import PhysicsConfig, TwinPhysics, check_targets
from realissim.twin.placement import Placement, PlacementConfig, place_object
from realissim.twin.reacquire import ObjectSearch, SearchConfig, SearchResult, TippedPose
from realissim.twin.shadows import ShadowFitConfig
from realissim.twin.sighting import ObjectSighting, Sighting, SightingConfig
from realissim.twin.state import TwinState, rest_state
from realissim.twin.views import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeConfig:
    """The frame loop's switches and parts."""

    follow: bool = True
    """Follower coupling: the real arm follows the twin arm."""
    correct: bool = True
    """Visual correction: camera images pull the twin's objects."""
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    """The twin's physics; its frame rate is the loop's."""
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    correct_every: int = 1
    """Run the visual correction on every n-th frame only and hold its wrench on the frames between. The
    correction is most of an online frame's cost, but it is also what keeps the twin up with a push: measured, 2
    ran the corrected episode ~1.8× faster and doubled the median sync error, 3 lost the T (docs/decisions.md).
    The desync detector's frame counts are divided by n, so its times in seconds stay the same."""
    fit_colors: bool = True
    """Calibration fits the twin's Gaussian colours to the real cameras' images."""
    appearance: AppearanceConfig = field(default_factory=AppearanceConfig)
    """How the twin's Gaussians are laid out on its bodies (`assets.appearance`); the real world is unaffected."""
    eps2d: float = 0.05
    """px² the renderer adds to every projected Gaussian's 2D covariance in the twin's camera views (`TwinViews.eps2d`:
    the correction, the colour fit, the search); the policy's virtual cameras keep `render.common.EPS2D` (0.3). Less
    than 3DGS's 0.3 keeps the twin's edges as hard as the real cameras' point-sampled ones: with the correction's five
    steps, the contact-rich median fell from 3.5 to 2.1 mm (docs/decisions.md, "The renderer's low-pass")."""
    color_fit: ColorFitConfig = field(default_factory=ColorFitConfig)
    shadows: ShadowFitConfig = field(default_factory=ShadowFitConfig)
    """Calibration looks for the key light's shadow in the images (`realissim.twin.shadows`); where there is one,
    the twin renders it from then on: the arm's shadow on the table and on the objects, every corrected frame."""
    board_calibration: bool = True
    """Where the world can lay a calibration board on the table (`RealWorld.calibration_board`), calibration
    first finds every camera's pose and intrinsics from images of it (`realissim.twin.board_calibration`):
    its appearance is known in advance, so fitted colours cannot absorb the cameras' error. The photometric
    `refine_cameras` then does not run (it does for cameras that did not see the board)."""
    board: BoardCalibrationConfig = field(default_factory=BoardCalibrationConfig)
    refine_cameras: bool = True
    """Calibration also corrects the cameras' rotation and intrinsics from the images (docs/decisions.md); without
    a board, or for the cameras that did not see it."""
    camera_refine: CameraRefineConfig = field(
        default_factory=lambda: CameraRefineConfig(steps=100, lr_rotation=1e-3, lr_translation=1e-9, intrinsics=True)
    )
    """Rotation and intrinsics (focal scale, principal point); from one view translation is nearly degenerate
    with rotation and principal point, so it is left out."""
    desync: DesyncConfig = field(default_factory=DesyncConfig)
    """The desync detector (active with the correction): when it fires, the follower holds the real arm."""
    follower: FollowerConfig = field(default_factory=FollowerConfig)
    """The follower; its command period is set to the twin's frame period."""
    arm_limits: float | None = 0.8
    """While the real arm follows, the twin arm's desired joints are shaped, before its servos, by a Ruckig
    trajectory within this fraction of the robot's published velocity, acceleration and jerk limits (the
    follower plans within `follower.limit_margin` of them, so it keeps up). None: not shaped; the twin arm then
    moves as fast as its servos take it, and the real arm falls behind when that is faster than its limits allow
    (docs/decisions.md, "The lead bound"). Offline (no follower) nothing is shaped."""
    max_lead: float | None = 0.01
    """While the real arm follows, each frame's step of the twin's desired joints is shortened so that the desired
    tip leads the real arm's measured tip by at most this, m (`runtime.lead`). None: no bound. Measured on the
    contact-rich scenario, the unbounded twin tip led the real one by up to 70 mm and the T's largest losses came
    with those leads; bounded at 10 mm and shaped within `arm_limits`, the largest errors halved (on six tuning
    seeds and two held-out ones; the p95 fell on the tuning seeds only: docs/decisions.md, "The lead bound").
    Bounded but not shaped, the real arm, kept at speed right behind the twin's, overshoots it when the twin stops
    abruptly: use both."""
    lead_path_s: float | None = None
    """With `max_lead`: the bounded desired joints follow the policy's targets in order (the policy's path, later)
    while they are at most this far behind them, s; older targets are dropped. None: they head straight for the
    latest target, which cuts the path's corners once they have fallen behind (`runtime.lead`)."""
    lead_lag_frames: float = 0.0
    """With `max_lead`: the bound grows by the real tip's travel over the last frame × this (the follower's natural
    lag, in frames), so that only a lead beyond that lag holds the twin arm back (`runtime.lead`). 0: a fixed bound."""
    sighting: SightingConfig = field(default_factory=SightingConfig)
    """Where the cameras see each object (every corrected frame, ~1 ms): evidence for the detector."""
    reacquire: bool = True
    """While the detector says out of sync: search the objects in the images and put the twin's there."""
    search: SearchConfig = field(default_factory=SearchConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    retry_frames: int = 6
    """While out of sync, a search that did not place the object is tried again after this many frames ..."""
    confirm_fraction: float = 0.9
    """The twin's object is moved only when its pose explains less than this fraction of what the found pose
    explains (loss removed from the object-absent loss); else the search confirms the twin's pose."""
    recheck_frames: int = 45
    """... and one that did, after this many (when the detector has still not re-armed: the placement did not
    bring the twin back in sync)."""
    alarm_check: float | None = 0.02
    """Before the detector fires, the re-acquisition's search looks for the objects in this frame's images: when
    it finds every object within this distance of the twin's (m, planar) and within `alarm_check_yaw`, the
    evidence came from a near-loss the correction is still following, not a loss, and no alarm is raised (the
    detector's counts start afresh: `DesyncDetector.update(check=…)`). An object the search does not find confirms
    the alarm. 2 cm: a loss's own definition (the sighting's `DesyncConfig.sight_distance`, the oracle's episodes);
    the search is accurate to ~5 mm. None: fire on the evidence alone (docs/decisions.md, "The search checks an
    alarm")."""
    alarm_check_yaw: float = math.radians(10.0)
    """With `alarm_check`: the largest yaw difference (rad) between the found pose and the twin's that vetoes an
    alarm (a T turned about its centre is lost too, though its centre is not)."""
    early_search: float = 0.0
    """While in sync: once the detector's evidence has come this far towards firing (`DesyncDetector.suspicion`;
    e.g. 0.5: half of the frames that fire it), search the objects at once, without holding the arm; a found pose that
    explains clearly more (`confirm_fraction`) is placed, the twin arm first moved to the real one, and the
    detector's counts start afresh, so a twin drifting away is put back before it is lost. A search that confirms
    the twin changes nothing. 0: off (search only once the detector has fired). Each such search costs a frame
    its time (`timing["reacquire"]`, ~0.15 s on 2 cores). Off: it took false alarms away online but the policy
    then succeeded less often (docs/decisions.md, "The early search")."""
    early_hold: int = 0
    """Frames the arms hold after an early placement, as while the detector fires (the twin arm at the real
    arm's joints, the follower holding, the policy's targets waiting), without the detector firing: the
    re-arm's pause after an alarm's placement (20 frames) without the alarm. 0: none."""
    early_every: int = 30
    """Frames between two early searches at least (a suspicion the search confirmed is not searched again at
    once)."""
    rest_while_held: bool = True
    """From the frame the detector fires until a search places or confirms the objects, the correction's wrench is
    not applied: the twin's objects stay where they were lost (the correction still runs: its residual is the
    detector's evidence). With the images no longer explained by the twin, the pull follows whatever the
    photometric loss finds nearest (under shadows, measured: 25 → 129 mm from the real T in 3.5 s of hold). Once
    placed or confirmed, the correction tracks again while the detector waits to re-arm (a real T still sliding
    after the arm stopped). False: the correction keeps pulling throughout (docs/decisions.md)."""

    def __post_init__(self) -> None:
        if self.correct_every < 1:
            raise ValueError(f"correct_every: must be ≥ 1, got {self.correct_every}")
        if self.lead_path_s is not None and not self.lead_path_s > 0:
            raise ValueError(f"lead_path_s: must be > 0 s or None, got {self.lead_path_s}")
        if not self.lead_lag_frames >= 0:
            raise ValueError(f"lead_lag_frames: must be ≥ 0, got {self.lead_lag_frames}")
        if not 0.0 <= self.early_search < 1.0:
            raise ValueError(f"early_search: must be in [0, 1) (a fraction of the evidence that fires), got "
                             f"{self.early_search}")  # fmt: skip
        if self.early_hold < 0:
            raise ValueError(f"early_hold: must be ≥ 0 frames, got {self.early_hold}")
        if self.early_every < 1:
            raise ValueError(f"early_every: must be ≥ 1, got {self.early_every}")
        if self.alarm_check is not None and not self.alarm_check > 0:
            raise ValueError(f"alarm_check: must be > 0 m or None, got {self.alarm_check}")
        if not self.alarm_check_yaw > 0:
            raise ValueError(f"alarm_check_yaw: must be > 0 rad, got {self.alarm_check_yaw}")
        if self.retry_frames < 1 or self.recheck_frames < 1:
            raise ValueError(f"retry_frames, recheck_frames: must be ≥ 1, got {self.retry_frames}, "
                             f"{self.recheck_frames}")  # fmt: skip


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
    """Made in sync, on the detector's suspicion (`RuntimeConfig.early_search`), not after it fired."""
    check: bool = False
    """The alarm check's search (`RuntimeConfig.alarm_check`) that found the twin right: no alarm, nothing
    placed."""

    @property
    def placed(self) -> bool:
        return self.placement is not None and self.placement.placed


@dataclass(frozen=True)
class FrameReport:
    """One frame: the twin's state after it, the correction (None when off or paused), the real arm's measured
    joints q_real (J,) rad and the real images (C,H,W,3) uint8 read this frame (None offline or when not
    read), and the time each stage took, s (keys: sense = reading the arm and the frames, correct (with its
    parts correct.prepare, correct.forward, correct.backward, correct.optimiser), sight = the sighting and the
    detector, reacquire = the search and placement when they ran, physics, follow, world)."""

    state: TwinState
    correction: CorrectionResult | None
    timing: dict[str, float]
    desynced: bool = False
    """The desync detector's verdict after this frame (the follower held the real arm if so)."""
    q_real: np.ndarray | None = None
    images: np.ndarray | None = None
    sightings: tuple[ObjectSighting, ...] = ()
    """Where the cameras saw each object this frame (empty when not corrected)."""
    reacquisitions: tuple[Reacquisition, ...] = ()
    """Re-acquisition attempts made this frame (their time is in `timing["reacquire"]`)."""
    lead: float = float("nan")
    """How far the policy's desired tip was from the real arm's tip this frame, m, before the lead bound (NaN: not
    measured: offline, no bound, or held)."""
    tipped: tuple[int, ...] = ()
    """Objects recognised standing on a side after this frame (`Runtime.tipped`)."""


class Runtime:
    """The twin plus, when online, its real world; `frame(q_target)` runs one frame of `twin.dt` s.

    Call sequence: `reset(start)` (twin and world to a start state), `calibrate()` (online, when the twin
    and the world are known to agree: right after a reset), then `frame(...)` repeatedly.
    """

    def __init__(self, scene: SceneSpec, config: RuntimeConfig = RuntimeConfig(), world: RealWorld | None = None):
        """`world` is a started `RealWorld`, required when either switch is on."""
        if (config.follow or config.correct) and world is None:
            raise ValueError("follow/correct need a real world: pass a started RealWorld, or switch both off")
        self.scene, self.config, self.world = scene, config, world
        self.twin = TwinPhysics(scene, config.physics)
        self.correction: VisualCorrection | None = None
        if config.correct:
            assert world is not None
            if not world.cameras:
                raise ValueError("correct needs a world with cameras")
            cam = world.cameras[0]
            cams = [c.resized(cam.width, cam.height) for c in scene.cameras]
            views = TwinViews(scene, self.twin.model, cameras=cams, appearance=config.appearance, eps2d=config.eps2d)
            # A wrench acts for `correct_every` frames: the integral's and the damping's time step.
            frame_dt = self.twin.dt * config.correct_every
            self.correction = VisualCorrection(
                views, self.twin.model, config.correction, frame_dt=frame_dt, held_frames=config.correct_every
            )
        self.follower = None
        self.lead_bound: LeadBound | None = None
        self.shaper: Follower | None = None
        if config.follow and world is not None:
            self.follower = Follower(world.robot.description, replace(config.follower, dt=self.twin.dt))
            if config.arm_limits is not None:
                # The same trajectory generator as the follower's, within tighter limits, never holding.
                shaping = FollowerConfig(dt=self.twin.dt, max_jump=1e3, limit_margin=config.arm_limits)
                self.shaper = Follower(world.robot.description, shaping)
            if config.max_lead is not None:
                path = None if config.lead_path_s is None else max(1, round(config.lead_path_s / self.twin.dt))
                self.lead_bound = LeadBound(
                    self.twin.model, self.twin.layout.robot_qpos, config.max_lead, path, config.lead_lag_frames
                )
        self.detector = (
            DesyncDetector(config.desync.per_corrected_frame(config.correct_every))
            if self.correction is not None
            else None
        )
        self.sighting: Sighting | None = None
        self.search: ObjectSearch | None = None
        self.board_fits: list[BoardFit] = []
        """Each camera's fit to the calibration board at the last `calibrate` (empty: no board was used)."""
        if self.correction is not None:
            self.sighting = Sighting(self.correction.views, self.twin.model, config.sighting)
            if config.reacquire:
                self.search = ObjectSearch(self.correction.views, self.twin.model, config.search, self.sighting)
        self.reacquisitions: list[Reacquisition] = []
        """This episode's re-acquisition attempts, in order."""
        self.tipped: dict[int, TippedPose] = {}
        """Objects the latest search of each recognised standing on a side (`SearchConfig.tipped`), by index: the
        twin's objects lie flat and cannot follow them, so the detector holds the arm until each is found lying."""
        self._stalled = False
        self._held_target: np.ndarray | None = None
        self._desired = self.twin.data.ctrl[self.twin.layout.actuators].copy()
        """The last frame's desired joints after the lead bound, before shaping (J,) rad."""
        self._held_wrench: np.ndarray | None = None
        self._held_left = 0
        """Frames the held wrench may still be applied: `correct_every` - 1 after each correction."""
        self._frame = 0
        self._next_search = 0
        self._next_early = 0
        self._settle_left = 0
        """Frames the arms still hold after an early placement (`RuntimeConfig.early_hold`)."""
        self._lost = False
        """Held, and no search has placed or confirmed the objects since the detector fired."""
        self._checked: tuple[list[SearchResult], float] | None = None
        """(each object's search, s taken) made by the alarm check in this corrected frame (cleared before the
        detector's update), for the frame's re-acquisition to reuse."""

    @property
    def dt(self) -> float:
        """The frame period, s."""
        return self.twin.dt

    def reset(self, start: StartState | None = None) -> None:
        """Twin and (when online) world to `start` (default: the scene's initial state), at rest; the follower
        from the real arm's measured joints; the detector to in-sync (keeping its learned baseline)."""
        start = StartState.of_scene(self.scene) if start is None else start
        start.check(self.scene)
        self.twin.reset(rest_state(start))
        if self.world is not None:
            self.world.reset(start)
        if self.follower is not None and self.world is not None:
            self.follower.reset(self.world.robot.read().q)
            if self.shaper is not None:
                self.shaper.reset(self.twin.data.ctrl[self.twin.layout.actuators])
        self._desired = self.twin.data.ctrl[self.twin.layout.actuators].copy()
        if self.lead_bound is not None:
            self.lead_bound.reset()
        if self.detector is not None:
            self.detector.restart()
        if self.correction is not None:
            self.correction.reset()
        self._held_target = self._held_wrench = None
        self._held_left = 0
        self._stalled = False
        self._lost = False
        self._frame = self._next_search = self._next_early = self._settle_left = 0
        self.reacquisitions = []
        self.tipped = {}

    def calibrate(self) -> None:
        """Fit the twin's appearance to the real cameras (camera poses and intrinsics: from the world's calibration
        board where it has one, else photometrically; colours), assuming the twin's state is the world's (call
        right after `reset`). No-op offline or without correction."""
        if self.correction is None or self.world is None:
            return
        views = self.correction.views
        q_real = self.world.robot.read().q
        xpos, xquat, _ = self.correction.poses(self.twin.data.qpos, self.twin.layout.robot_qpos, q_real)
        t0 = time.perf_counter()
        board = self.world.calibration_board if self.config.board_calibration else None
        self.board_fits = []
        unseen = list(range(len(views.cameras)))
        if board is not None:
            try:
                self.world.show_board(True)
                board_images = np.stack([cam.read().image for cam in self.world.cameras])
            except BaseException:
                with contextlib.suppress(Exception):  # take the board away if it can; the first error is the one
                    self.world.show_board(False)
                raise
            self.world.show_board(False)
            self.board_fits = calibrate_from_board(views, board, xpos, xquat, board_images, self.config.board)
            unseen = [c for c, fit in enumerate(self.board_fits) if not fit.used]
        images = torch.from_numpy(np.stack([cam.read().image for cam in self.world.cameras]))[None]
        views.set_shadow(None)
        if self.config.shadows.enabled:
            views.fit_shadow(xpos, xquat, images[0], self.config.shadows)
        if self.config.fit_colors:
            fit_colors(views, xpos, xquat, images, self.config.color_fit)
        if self.config.refine_cameras and unseen:
            refine_cameras(views, xpos, xquat, images[0], self.config.camera_refine, only=unseen)
            if self.config.fit_colors:
                fit_colors(views, xpos, xquat, images, self.config.color_fit)
        views.cast_shadows(xpos, xquat)
        if self.sighting is not None and self.detector is not None:
            # How far the sighting puts the objects from where they are known to be: its own error here (shade,
            # shadows, the cameras' remaining calibration error), which the detector's thresholds allow for.
            seen = [s.distance for s in self.sighting.observe(self.twin, q_real, images[0].numpy()) if s.seen]
            self.detector.sight_slack = max(seen, default=0.0)
            log.info("sighting error at calibration: %.1f mm", 1e3 * self.detector.sight_slack)
        log.info("calibrated the twin's appearance to the cameras in %.2f s", time.perf_counter() - t0)

    def frame(self, q_target: ArrayLike, correct: bool = True) -> FrameReport:
        """One frame with the policy's desired joints q_target (7,) rad; `correct=False` skips the visual
        correction this frame (a real-time loop catching up with the wall clock), as do the frames between two
        corrections with `correct_every` > 1: those frames apply the last correction's wrench again, for at most
        `correct_every` - 1 frames after it (frames skipped beyond that run without a wrench). While the
        desync detector says the twin is out of sync, the follower holds the real arm and the twin arm holds too
        (its targets stay those of the frame the detector fired; q_target is ignored until it re-arms), so the
        policy's motion cannot push the twin's objects where the real ones are not; with `rest_while_held` the
        correction's wrench is withheld too, so the objects rest until the search places or confirms them. Both
        arms hold the same way for `early_hold` frames after an early placement, the detector in sync."""
        timing: dict[str, float] = {}
        clock = time.perf_counter
        t0 = clock()
        q_real, images = None, None
        if self.world is not None:
            q_real = self.world.robot.read().q
            due = (self._frame % self.config.correct_every) == 0
            if self.correction is not None and correct and due:
                images = self._read_cameras()
        timing["sense"] = clock() - t0
        self._frame += 1
        result, sightings, attempts = None, (), ()
        if self.correction is not None and images is not None:
            t0 = clock()
            result = self.correction.correct(self.twin, q_real, torch.from_numpy(images))
            if self._lost and self.config.rest_while_held:
                self.correction.reset()  # nothing it finds while the twin is lost may build up for later
                self._held_wrench = None
            else:
                self.twin.apply_wrenches(result.wrenches)
                self._held_wrench = np.asarray(result.wrenches, dtype=np.float64).copy()
                self._held_left = self.config.correct_every - 1
            timing["correct"] = clock() - t0
            timing.update({f"correct.{key}": value for key, value in result.stages.items()})
            t0 = clock()
            assert self.sighting is not None and self.detector is not None and q_real is not None
            sightings = tuple(self.sighting.observe(self.twin, q_real, images))
            self._checked = None
            was = self.desynced
            checking = self.config.alarm_check is not None and self.search is not None
            check = partial(self._loss_confirmed, q_real, images) if checking else None
            self.detector.update(result.residual, result.saturated, *_evidence(sightings), check=check)
            if self.desynced and not was:
                self._lost = True
            elif not self.desynced:
                self._lost = False
            timing["sight"] = clock() - t0
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
            if self.desynced and self.search is not None and self._frame >= self._next_search:
                t0 = clock()
                attempts = self._reacquire(q_real, images)
                timing["reacquire"] = clock() - t0
            elif (
                self.config.early_search > 0
                and self.search is not None
                and self.detector.suspicion >= self.config.early_search
                and self._frame >= self._next_early
            ):
                t0 = clock()
                attempts = self._reacquire(q_real, images, early=True)
                timing["reacquire"] = clock() - t0
        elif self._held_wrench is not None and self._held_left > 0 and not self._stalled:
            # Between corrections: the last one's pull, for the frames it was scaled for and no more. A real-time
            # loop catching up (`correct=False`) may skip more frames than that; holding the wrench longer would
            # multiply its impulse and throw the object (measured: the T at 52 m/s after 66 frames).
            self.twin.apply_wrenches(self._held_wrench)
            self._held_left -= 1
        t0 = clock()
        settling = self._settle_left > 0 and not self.desynced
        if settling:
            self._settle_left -= 1
        holding = self.desynced or settling
        if holding:  # hold the twin arm with the real one, so the two stay consistent until re-armed
            if self._held_target is None:  # where the real arm was when the detector fired (the twin's is ahead
                # of it by the follower's lag, possibly inside the real object the twin lost)
                held = q_real if q_real is not None else self.twin.data.ctrl[self.twin.layout.actuators]
                self._held_target = held.copy()
                if self.lead_bound is not None:
                    self.lead_bound.reset()  # the path resumes from the held arm, not from before the loss
            q_target = self._held_target
        else:
            self._held_target = None
        lead = float("nan")
        if self.lead_bound is not None and q_real is not None and not holding:
            q_target = check_targets(self.twin.layout, q_target)[0]  # within the joint limits before bounding
            # ... and within what the follower (and the shaper) command, short of the limits by their margin: a
            # desired tip the arms cannot reach would keep its lead above the bound, and the path behind it stalls.
            for follower in (self.follower, self.shaper):
                if follower is not None:
                    q_target = follower.reachable(q_target)
            q_target, lead = self.lead_bound.bound(q_target, self._desired, q_real)
        self._desired = q_target
        qd_target = None
        if self.shaper is not None:
            shaped = self.shaper.step(q_target)
            q_target, qd_target = shaped.q, shaped.qd
        self.twin.set_joint_targets(q_target, qd_target)
        self.twin.step()
        state = self.twin.state()
        timing["physics"] = clock() - t0
        if self.follower is not None and self.world is not None:
            t0 = clock()
            self.follower.follow(self.world.robot, state.q, hold=holding)
            timing["follow"] = clock() - t0
        if self.world is not None and self.world.lockstep:
            t0 = clock()
            self.world.step()
            timing["world"] = clock() - t0
        return FrameReport(state, result, timing, self.desynced, q_real, images, sightings, attempts, lead,
                           tuple(self.tipped))  # fmt: skip

    def _reacquire(self, q_real: np.ndarray, images: np.ndarray, early: bool = False) -> tuple[Reacquisition, ...]:
        """Search every object in this frame's images; put each found one where the search found it (the twin arm
        first moved to the real arm's joints), unless the twin's pose scores as well (then the twin was right
        about it). After a placement the correction's accumulated state is cleared (it belonged to the lost
        pose). An object neither placed nor confirmed is searched again after `retry_frames`. `early`: in sync,
        on the detector's suspicion (`RuntimeConfig.early_search`): a placement starts the detector's evidence
        afresh, and the next early search waits `early_every` frames."""
        assert self.search is not None and self.sighting is not None and self.correction is not None
        assert self.detector is not None
        attempts = []
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
                self._held_target = self.twin.set_robot(q_real)
                if self.shaper is not None:
                    self.shaper.reset(self._held_target)
                placement = place_object(self.twin, k, found.pos, found.quat, self.config.placement)
            self._note_tipped(k, found)
            attempt = Reacquisition(self._frame, k, found, placement, early)
            settled &= attempt.placed or (found.found and not better)
            attempts.append(attempt)
        placed = any(a.placed for a in attempts)
        if early:
            self._next_early = self._frame + self.config.early_every
            if placed:
                self.detector.clear()
                if self.config.early_hold:
                    self._settle_left = self.config.early_hold
                    if self.lead_bound is not None:
                        self.lead_bound.reset()
        else:
            if settled:
                self.detector.confirm()
            if settled or placed:
                self._lost = False  # the twin's objects are where the images show them: the correction may track
            # Unsettled (not seen, nothing reliable, blocked): searched again soon; settled: only if the detector
            # has not re-armed a while later.
            self._next_search = self._frame + (self.config.recheck_frames if settled else self.config.retry_frames)
        if placed:
            self.correction.reset()
            self._held_wrench = None
            log.info("%s at frame %d: %s", "placed early" if early else "re-acquired", self._frame,
                     ", ".join(f"object {a.object} → ({a.search.pos[0]:.3f}, {a.search.pos[1]:.3f}) m, "
                               f"{np.degrees(a.search.yaw):.0f}°" for a in attempts if a.placed))  # fmt: skip
        self.reacquisitions.extend(attempts)
        return tuple(attempts)

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
        """The alarm check (`RuntimeConfig.alarm_check`): search every object in this frame's images; the loss is
        confirmed unless each is found within the check's distance and yaw of the twin's pose. The searches are
        kept for this frame's re-acquisition."""
        assert self.search is not None and self.sighting is not None and self.config.alarm_check is not None
        t0 = time.perf_counter()
        results = [self.search.search(self.twin, q_real, images, k) for k in range(len(self.sighting.object_bodies))]
        self._checked = (results, time.perf_counter() - t0)
        for k, found in enumerate(results):  # (a veto skips `_reacquire`)
            self._note_tipped(k, found)
        state = self.twin.state()  # the objects' poses the search compared against (from qpos, as it does)
        confirmed = False
        for k, found in enumerate(results):
            if not found.found:
                log.info("alarm check at frame %d: object %d not found: the alarm stands", self._frame, k)
                confirmed = True
                continue
            off = float(np.hypot(*(found.pos[:2] - state.object_pos[k, :2])))
            turn = abs(math.remainder(found.yaw - float(quat_yaw(state.object_quat[k])), 2.0 * math.pi))
            far = off > self.config.alarm_check or turn > self.config.alarm_check_yaw
            log.info("alarm check at frame %d: object %d found %.1f mm, %.1f° from the twin's: %s", self._frame, k,
                     1e3 * off, math.degrees(turn), "the alarm stands" if far else "no alarm")  # fmt: skip
            confirmed |= far
        return confirmed

    def _read_cameras(self) -> np.ndarray | None:
        """All cameras' latest frames (C,H,W,3) uint8, or None (no correction this frame) if one has stalled."""
        assert self.world is not None
        try:
            images = np.stack([cam.read().image for cam in self.world.cameras])
        except CameraStalledError as err:
            if not self._stalled:
                log.warning("correction paused: %s", err)
            self._stalled = True
            return None
        if self._stalled:
            log.info("correction resumed: every camera delivers frames again")
        self._stalled = False
        return images

    @property
    def desynced(self) -> bool:
        """Whether the desync detector currently says the twin is out of sync with reality."""
        return self.detector is not None and self.detector.desynced


def _evidence(sightings: tuple[ObjectSighting, ...]) -> tuple[float, float]:
    """The detector's sighting evidence: the largest distance between a seen object and the twin's, m (NaN: none
    seen), and the smallest mean shape overlap of an object over the cameras (NaN: none measurable)."""
    distances = [s.distance for s in sightings if s.seen]
    overlaps = [float(np.nanmean(s.overlap)) for s in sightings if s.seen and np.isfinite(s.overlap).any()]
    return (max(distances) if distances else float("nan")), (min(overlaps) if overlaps else float("nan"))
