"""The Real-is-Sim frame loop: one wiring, two switches (docs/design.md §3).

Every frame: read the real cameras and the real arm's joints; if `correct`, ask the visual correction for
this frame's wrench on the twin's objects and apply it; step the twin with the commanded joint targets; if
`follow`, stream the twin arm's *actual* joints to the real robot through the follower; in lock-step,
advance the real world one frame. Online is both switches on, over a `RealWorld` (the surrogate or
hardware); offline is both off, with no real world at all. The frame period is the twin's
(`PhysicsConfig.fps`), and everything below the loop is given it.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from dataclasses import dataclass, replace

import mujoco
import numpy as np
import torch
from numpy.typing import ArrayLike

from realissim.estimate.board_calibration import BoardFit
from realissim.estimate.correction import CorrectionResult, VisualCorrection
from realissim.estimate.search import ObjectSearch, TippedPose
from realissim.estimate.sighting import ObjectSighting, Sighting
from realissim.real.follower import Follower, FollowerConfig
from realissim.real.interfaces import CameraStalledError, RealWorld
from realissim.runtime.beside import CorrectionJob, CorrectionOutcome, CorrectionThread
from realissim.runtime.calibration import calibrate_views
from realissim.runtime.config import RuntimeConfig
from realissim.runtime.desync import DesyncDetector
from realissim.runtime.lead import LeadBound
from realissim.runtime.supervision import Reacquisition, Supervision, Supervisor
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.twin.physics import TwinPhysics, check_targets
from realissim.twin.state import TwinState, rest_state
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)


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
    correction_age: float = float("nan")
    """With the correction beside the loop: how old the correction applied from this frame on is, s (from the frame
    its images were read to this one, on the wall clock); NaN when none arrived this frame (or inline)."""
    q_sent: np.ndarray | None = None
    """The joint target (J,) rad the follower sent the real arm this frame (None: offline or no follower)."""
    applied_wrench: np.ndarray | None = None
    """The correction's wrench (K, 6) [force N, torque N·m, world frame, at each object's centre of mass] the twin's
    objects felt this frame — a new correction's, a held one's again, or none (None: nothing applied)."""


class Runtime:
    """The twin plus, when online, its real world; `frame(q_des)` runs one frame of `twin.dt` s.

    Call sequence: `reset(start)` (twin and world to a start state), `calibrate()` (online, when the twin
    and the world are known to agree: right after a reset), then `frame(...)` repeatedly.
    """

    def __init__(self, scene: SceneSpec, config: RuntimeConfig = RuntimeConfig(), world: RealWorld | None = None):
        """`world` is a started `RealWorld`, required when either switch is on."""
        if (config.follow or config.correct) and world is None:
            raise ValueError("follow/correct need a real world: pass a started RealWorld, or switch both off")
        self.scene, self.config, self.world = scene, config, world
        self.twin = TwinPhysics(scene, config.physics)
        if world is not None and not math.isclose(world.frame_period, self.twin.dt, rel_tol=1e-9):
            raise ValueError(
                f"the world's frame period ({world.frame_period:.6g} s) is not the twin's ({self.twin.dt:.6g} s, "
                f"PhysicsConfig.fps = {config.physics.fps:g}): give the world the twin's frame rate"
            )
        self.correction: VisualCorrection | None = None
        self.supervisor: Supervisor | None = None
        self._beside: CorrectionThread | None = None
        """The correction's own thread (`RuntimeConfig.correct_beside`), or None: inline."""
        self._last_job = 0
        """With the thread: the frame the last job was taken in (0: none yet this episode)."""
        self._period = float(config.correct_every)
        """With the thread: frames between two jobs, a running mean (the period a wrench is held for)."""
        self._between: tuple[CorrectionOutcome | None, np.ndarray | None] = (None, None)
        """With the thread: what `idle` collected and read between two frames (the outcome, the images of the job it
        handed over), reported by the next frame."""
        if config.correct:
            assert world is not None
            if not world.cameras:
                raise ValueError("correct needs a world with cameras")
            cam = world.cameras[0]
            cams = [c.resized(cam.width, cam.height) for c in scene.cameras]
            v = config.views
            views = TwinViews(scene, self.twin.model, cameras=cams, appearance=v.appearance, eps2d=v.eps2d)
            # A wrench acts for `correct_every` frames: the integral's and the damping's time step.
            frame_dt = self.twin.dt * config.correct_every
            beside = config.correct_beside if config.correct_beside is not None else not world.lockstep
            correction = config.correction
            if beside and config.beside_cameras is not None:
                correction = replace(correction, cameras_per_frame=config.beside_cameras)
            self.correction = VisualCorrection(
                views, self.twin.model, correction, frame_dt=frame_dt, held_frames=config.correct_every
            )
            watched = self.twin.replica() if beside else self.twin
            self.supervisor = Supervisor(views, watched, config.supervision, config.correct_every)
            if beside:
                self._beside = CorrectionThread(self.correction, self.supervisor, watched)
                weakref.finalize(self, self._beside.close)
        self.follower: Follower | None = None
        self.lead_bound: LeadBound | None = None
        self.shaper: Follower | None = None
        if config.follow and world is not None:
            arm = config.arm
            self.follower = Follower(world.robot.description, replace(arm.follower, dt=self.twin.dt))
            if arm.limits is not None:
                # The same trajectory generator as the follower's, within tighter limits, never holding.
                shaping = FollowerConfig(dt=self.twin.dt, max_jump=1e3, limit_margin=arm.limits)
                self.shaper = Follower(world.robot.description, shaping)
            if arm.max_lead is not None:
                path = None if arm.lead_path_s is None else max(1, round(arm.lead_path_s / self.twin.dt))
                self.lead_bound = LeadBound(
                    self.twin.model, self.twin.layout.robot_qpos, arm.max_lead, path, arm.lead_lag_frames
                )
        self.board_fits: list[BoardFit] = []
        """Each camera's fit to the calibration board at the last `calibrate` (empty: no board was used)."""
        self._stalled = False
        self._held_target: np.ndarray | None = None
        """Where both arms hold (J,) rad while supervision holds them (None: not holding)."""
        self._desired = self.twin.data.ctrl[self.twin.layout.actuators].copy()
        """The last frame's desired joints after the lead bound, before shaping (J,) rad."""
        self._held_wrench: np.ndarray | None = None
        self._applied: np.ndarray | None = None
        """The correction's wrenches applied this frame (`FrameReport.applied_wrench`)."""
        self._held_left = 0
        """Frames the held wrench may still be applied: `correct_every` - 1 after each correction."""
        self._frame = 0

    @property
    def dt(self) -> float:
        """The frame period, s."""
        return self.twin.dt

    @property
    def beside(self) -> bool:
        """Whether the correction runs in its own thread beside the loop (`RuntimeConfig.correct_beside`)."""
        return self._beside is not None

    @property
    def detector(self) -> DesyncDetector | None:
        """The desync detector (None without correction)."""
        return self.supervisor.detector if self.supervisor is not None else None

    @property
    def sighting(self) -> Sighting | None:
        return self.supervisor.sighting if self.supervisor is not None else None

    @property
    def search(self) -> ObjectSearch | None:
        return self.supervisor.search if self.supervisor is not None else None

    @property
    def reacquisitions(self) -> list[Reacquisition]:
        """This episode's re-acquisition attempts, in order."""
        return self.supervisor.reacquisitions if self.supervisor is not None else []

    @property
    def tipped(self) -> dict[int, TippedPose]:
        """Objects the latest search recognised standing on a side, by index (`Supervisor.tipped`)."""
        return self.supervisor.tipped if self.supervisor is not None else {}

    @property
    def desynced(self) -> bool:
        """Whether the desync detector currently says the twin is out of sync with reality."""
        return self.supervisor is not None and self.supervisor.desynced

    def reset(self, start: StartState | None = None) -> None:
        """Twin and (when online) world to `start` (default: the scene's initial state), at rest; the follower
        from the real arm's measured joints; the detector to in-sync (keeping its learned baseline)."""
        start = StartState.of_scene(self.scene) if start is None else start
        start.check(self.scene)
        if self._beside is not None:
            self._beside.wait()  # the pending job's outcome belonged to the last episode
        self._last_job, self._period = 0, float(self.config.correct_every)
        self._between = (None, None)
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
        if self.supervisor is not None:
            self.supervisor.restart()
        if self.correction is not None:
            self.correction.reset()
        self._held_target = self._held_wrench = None
        self._held_left = 0
        self._stalled = False
        self._frame = 0

    def calibrate(self) -> None:
        """Fit the twin's appearance to the real cameras (`runtime.calibration`), assuming the twin's state is the
        world's (call right after `reset`); then measure the sighting's own error, which the detector's thresholds
        allow for. No-op offline or without correction."""
        if self.correction is None or self.world is None or self.supervisor is None:
            return
        q_real = self.world.robot.read().q
        xpos, xquat, _ = self.correction.poses(self.twin.data.qpos, self.twin.layout.robot_qpos, q_real)
        self.board_fits, images = calibrate_views(self.correction.views, self.world, xpos, xquat,
                                                  self.config.calibration)  # fmt: skip
        # How far the sighting puts the objects from where they are known to be: its own error here (shade,
        # shadows, the cameras' remaining calibration error).
        seen = [s.distance for s in self.supervisor.sighting.observe(self.twin, q_real, images[0].numpy()) if s.seen]
        self.supervisor.detector.sight_slack = max(seen, default=0.0)
        log.info("sighting error at calibration: %.1f mm", 1e3 * self.supervisor.detector.sight_slack)

    def frame(self, q_des: ArrayLike, correct: bool = True) -> FrameReport:
        """One frame with the policy's desired joints q_des (J,) rad; `correct=False` skips the visual correction
        this frame (a real-time loop catching up with the wall clock), as do the frames between two corrections
        with `correct_every` > 1: those apply the last correction's wrench again, for at most `correct_every` - 1
        frames after it. While supervision holds (the detector fired, or `early_hold` frames after an early
        placement) both arms hold where the real arm was and q_des is ignored, so the policy's motion cannot push
        the twin's objects where the real ones are not; with `rest_while_held` the correction's wrench is
        withheld too until a search places or confirms the objects."""
        timing: dict[str, float] = {}
        self._applied = None
        q_real, images = self._sense(correct, timing)
        self._frame += 1
        age = float("nan")
        if self._beside is None:
            result, supervision = self._correct(q_real, images, timing)
        else:
            result, supervision, images, age = self._correct_beside(q_real, correct, timing)
        t0 = time.perf_counter()
        holding = self.supervisor is not None and self.supervisor.hold_this_frame()
        q_des, qd_des, lead = self._arm_targets(q_des, q_real, holding)
        state = self._physics(q_des, qd_des)
        timing["physics"] = time.perf_counter() - t0  # (the arm's targets included)
        q_sent = self._follow(state, holding, timing)
        self._advance_world(timing)
        return FrameReport(state, result, timing, self.desynced, q_real, images,
                           supervision.sightings if supervision else (), supervision.attempts if supervision else (),
                           lead, tuple(self.tipped), age, q_sent, self._applied)  # fmt: skip

    def close(self) -> None:
        """Stop the correction's thread, if it has one (also done when the runtime is collected)."""
        if self._beside is not None:
            self._beside.close()

    def _sense(self, correct: bool, timing: dict[str, float]) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The real arm's measured joints (J,) rad and, on a frame due for correction, every camera's latest frame
        (C,H,W,3) uint8 (None offline, not due, or a camera stalled)."""
        t0 = time.perf_counter()
        q_real, images = None, None
        if self.world is not None:
            q_real = self.world.robot.read().q
            due = (self._frame % self.config.correct_every) == 0 and self._beside is None
            if self.correction is not None and correct and due:
                images = self._read_cameras()
        timing["sense"] = time.perf_counter() - t0
        return q_real, images

    def _correct(
        self, q_real: np.ndarray | None, images: np.ndarray | None, timing: dict[str, float]
    ) -> tuple[CorrectionResult | None, Supervision | None]:
        """With images: the visual correction's wrench on the twin's objects (withheld while supervision says the
        twin is lost), then supervision. Without: the last correction's wrench again, for the frames it was scaled
        for and no more (a real-time loop catching up may skip more; holding it longer would multiply its impulse
        and throw the object)."""
        if self.correction is None or images is None:
            if self._held_wrench is not None and self._held_left > 0 and not self._stalled:
                self._apply(self._held_wrench)
                self._held_left -= 1
            return None, None
        assert self.supervisor is not None and q_real is not None
        t0 = time.perf_counter()
        result = self.correction.correct(self.twin, q_real, torch.from_numpy(images))
        if self.supervisor.withholding:
            self.correction.reset()  # nothing it finds while the twin is lost may build up for later
            self._held_wrench = None
        else:
            self._apply(result.wrenches)
            self._held_wrench = self._applied  # (a copy of its own, never written in place)
            self._held_left = self.config.correct_every - 1
        timing["correct"] = time.perf_counter() - t0
        timing.update({f"correct.{key}": value for key, value in result.stages.items()})
        supervision = self.supervisor.update(self._frame, result, q_real, images, timing)
        if supervision.placed:
            self.correction.reset()  # its accumulated state belonged to the lost pose
        self._after_supervision(supervision)
        return result, supervision

    def _correct_beside(
        self, q_real: np.ndarray | None, correct: bool, timing: dict[str, float]
    ) -> tuple[CorrectionResult | None, Supervision | None, np.ndarray | None, float]:
        """The correction in its own thread (`RuntimeConfig.correct_beside`): collect a finished job's outcome (its
        wrench held from now on for the frames it was scaled for, its supervision applied to the twin), apply the
        held wrench damped with the objects' velocity now, and hand over a new job when the thread is free and
        `correct`. Returns the outcome's correction and supervision (None: none arrived), the images read for the
        new job (None: none) and the outcome's age, s (NaN: none). The thread's times go to `timing` under
        "beside." (they are not the loop's)."""
        assert self._beside is not None and self.correction is not None and q_real is not None
        (outcome, images), self._between = self._between, (None, None)  # (collected by `idle` since the last frame)
        arrived = self._beside.poll()
        if arrived is not None:
            self._collect(arrived)
            outcome = arrived
        result, supervision, age = None, None, float("nan")
        if outcome is not None:
            result, supervision = outcome.result, outcome.supervision
            age = time.monotonic() - outcome.job.wall
            timing.update({f"beside.{key}": value for key, value in outcome.timing.items()})
        if self._held_wrench is not None and self._held_left > 0 and not self._stalled:
            self._apply(self.correction.damped(self._held_wrench, self.twin))
            self._held_left -= 1
        if correct and not self._beside.busy:
            images = self._submit(q_real)
        return result, supervision, images, age

    def idle(self, until: float) -> None:
        """Between two frames on the wall clock: return at `until` (`time.monotonic()`). With the correction beside
        the loop, a job that finishes meanwhile is collected at once (its wrench held from the next frame on) and,
        if no job was handed over in this frame yet, the next one is (the real arm and the cameras read now, the
        twin as this frame left it): a correction that takes longer than a frame then starts again as soon as it
        ends, not at the next frame's start — a 22 ms correction came every second frame (30 a second), now every
        22 ms (docs/decisions.md, "Corrections between frames"). Without the thread, a sleep."""
        beside = self._beside
        while (left := until - time.monotonic()) > 0:
            if beside is None or not beside.busy or self._between[0] is not None:
                time.sleep(left)
                return
            outcome = beside.wait(left, timeout_raises=False)
            if outcome is None:
                return  # (`until` came first)
            self._collect(outcome)
            assert self.world is not None  # (the thread corrects against a world)
            images = self._submit(self.world.robot.read().q) if self._last_job != self._frame else None
            self._between = (outcome, images)

    def _collect(self, outcome: CorrectionOutcome) -> None:
        """Take a finished job's outcome: its wrench is held from now on for the frames it was scaled for (none if
        withheld), its placements and supervision applied to the twin."""
        assert self.correction is not None
        wrenches = outcome.result.wrenches
        self._held_wrench = None if outcome.withheld else np.asarray(wrenches, dtype=np.float64).copy()
        self._held_left = outcome.job.held_frames
        self._take_placements(outcome)
        self._after_supervision(outcome.supervision)

    def _submit(self, q_real: np.ndarray) -> np.ndarray | None:
        """Hand the thread a job of this frame (the cameras read now, the twin as it is); the images, or None when a
        camera has stalled (no job)."""
        assert self._beside is not None
        images = self._read_cameras()
        if images is None:
            return None
        if self._last_job:
            self._period += 0.25 * ((self._frame - self._last_job) - self._period)
        self._last_job = self._frame
        held = max(self.config.beside_min_held, round(self._period))
        self._beside.submit(self.twin, CorrectionJob(self._frame, time.monotonic(), q_real.copy(), images, held))
        return images

    def _take_placements(self, outcome: CorrectionOutcome) -> None:
        """Put the objects a placement moved (in the thread's replica) where it put them in the twin, and the twin
        arm where the placement moved the replica's (the real arm's joints, held there after)."""
        layout, data = self.twin.layout, self.twin.data
        for k, (qpos, qvel) in outcome.placed.items():
            data.qpos[layout.object_qpos[k]] = qpos
            data.qvel[layout.object_dof[k]] = qvel
            data.xfrc_applied[layout.object_bodies[k]] = 0.0
        if outcome.supervision.arm_at is not None:
            self.twin.set_robot(outcome.supervision.arm_at)  # (mj_forward)
        elif outcome.placed:
            mujoco.mj_forward(self.twin.model, data)

    def _after_supervision(self, supervision: Supervision) -> None:
        """What the loop does after supervision acted: hold both arms where a placement moved the twin's, restart
        the lead bound after an early placement, drop the held wrench after any placement."""
        if supervision.arm_at is not None:  # a placement moved the twin arm to the real one: both hold there
            self._held_target = supervision.arm_at
            if self.shaper is not None:
                self.shaper.reset(supervision.arm_at)
        if supervision.restart_lead and self.lead_bound is not None:
            self.lead_bound.reset()
        if supervision.placed:
            self._held_wrench = None

    def _arm_targets(
        self, q_des: ArrayLike, q_real: np.ndarray | None, holding: bool
    ) -> tuple[np.ndarray, np.ndarray | None, float]:
        """The twin arm's joint targets and their velocities (None: from the change over a frame) for this frame,
        and the policy's lead over the real arm, m (NaN: not measured): held where the real arm was while
        `holding`; else within the joint limits, bounded to lead the real tip by `max_lead`, shaped within
        `limits`."""
        if holding:  # hold the twin arm with the real one, so the two stay consistent until re-armed
            if self._held_target is None:  # where the real arm was when the detector fired (the twin's is ahead
                # of it by the follower's lag, possibly inside the real object the twin lost)
                held = q_real if q_real is not None else self.twin.data.ctrl[self.twin.layout.actuators]
                self._held_target = held.copy()
                if self.lead_bound is not None:
                    self.lead_bound.reset()  # the path resumes from the held arm, not from before the loss
            q_des = self._held_target
        else:
            self._held_target = None
        lead = float("nan")
        if self.lead_bound is not None and q_real is not None and not holding:
            q_des = check_targets(self.twin.layout, q_des)[0]  # within the joint limits before bounding
            # ... and within what the follower (and the shaper) command, short of the limits by their margin: a
            # desired tip the arms cannot reach would keep its lead above the bound, and the path behind it stalls.
            for follower in (self.follower, self.shaper):
                if follower is not None:
                    q_des = follower.reachable(q_des)
            q_des, lead = self.lead_bound.bound(q_des, self._desired, q_real)
        self._desired = np.asarray(q_des)
        qd_des = None
        if self.shaper is not None:
            shaped = self.shaper.step(q_des)
            q_des, qd_des = shaped.q, shaped.qd
        return np.asarray(q_des), qd_des, lead

    def _physics(self, q_des: np.ndarray, qd_des: np.ndarray | None) -> TwinState:
        """Step the twin one frame towards the joint targets; its state after."""
        self.twin.set_joint_targets(q_des, qd_des)
        self.twin.step()
        return self.twin.state()

    def _apply(self, wrenches: ArrayLike) -> None:
        """Apply the correction's wrenches (K, 6) to the twin's objects this frame, and keep them for the report."""
        self.twin.apply_wrenches(wrenches)
        self._applied = np.array(wrenches, dtype=np.float64)

    def _follow(self, state: TwinState, holding: bool, timing: dict[str, float]) -> np.ndarray | None:
        """Stream the twin arm's actual joints to the real robot (holding it while supervision holds); the target
        sent (J,) rad, None without a follower."""
        if self.follower is not None and self.world is not None:
            t0 = time.perf_counter()
            sent = self.follower.follow(self.world.robot, state.q, hold=holding).q
            timing["follow"] = time.perf_counter() - t0
            return np.array(sent, dtype=np.float64)
        return None

    def _advance_world(self, timing: dict[str, float]) -> None:
        """In lock-step, advance the real world one frame."""
        if self.world is not None and self.world.lockstep:
            t0 = time.perf_counter()
            self.world.step()
            timing["world"] = time.perf_counter() - t0

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
