"""`Env`: one twin driven by chunks, online (Runtime with follower and correction over a RealWorld) or offline
(the twin alone) — the same code path, the switches decide.

`reset(start)` puts the twin (and, online, the world) in a start state and returns the first observation;
`step(chunk)` follows the chunk frame by frame (targets interpolated at the frame rate) until it is used up
or the re-plan period has passed, then returns the next observation. On a real-time world the loop keeps
pace with the wall clock: when it falls behind it runs the missing frames without correction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from realissim.policy.base import ActionChunk, Observation
from realissim.policy.factory import ObservationNeeds
from realissim.real.interfaces import RealWorld
from realissim.runtime.config import RuntimeConfig
from realissim.runtime.loop import FrameReport, Runtime
from realissim.spec.state import StartState
from realissim.twin.state import TwinState

if TYPE_CHECKING:
    from realissim.envs.batch import BatchEnv
    from realissim.tasks import Task


@dataclass(frozen=True)
class EnvConfig:
    """How an environment runs and what it observes."""

    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """The frame loop (physics, correction, follower); both switches are off without a world (offline)."""
    cameras: tuple[str, ...] = ()
    """Virtual cameras rendered from the twin into each observation: scene camera names and/or "wrist"."""
    image_size: tuple[int, int] = (96, 96)
    """Virtual camera image size, px (width, height)."""
    real_images: bool = False
    """Online: put the real cameras' latest frames into each observation."""
    replan_every: float | None = None
    """Ask the policy for a new chunk after this many seconds (None: when the chunk is used up, as the paper)."""
    sleep: bool = True
    """Offline (`Env` without a world, `BatchEnv`): a resting object sleeps (`PhysicsConfig.sleep`), frozen until the
    pusher touches it: offline evaluation of a policy runs ~1.35× as fast for the same success, the twins alone
    ~1.9× (docs/decisions.md, "Offline evaluation: resting objects sleep"). Ignored online: the twin never sleeps.
    Collection and teleoperation turn it off: demonstrations are made in the twin as it runs online."""
    calibrate: Literal["first_reset", "every_reset", "never"] = "first_reset"
    """Online: when to fit the twin's appearance to the cameras (it needs twin and world in the same state)."""
    calibrate_at: Literal["goal", "start"] = "goal"
    """Online: the state the appearance is fitted in. "goal": the task's goal (each object with a goal on its goal
    pose, the others at the start, the arm at home), then the episode's start; "start": the episode's start. The
    fitted appearance is exact in the pose it was fitted in and millimetres off where an object has turned
    (its sides' shading is baked in; docs/decisions.md, "Calibrate at the goal"), and the goal is where the task
    needs millimetres. On a real robot: the objects are put on their goal marks for calibration. A task without
    goals calibrates at the start."""
    policy_beside: bool | None = None
    """Online in real time: ask the policy for its next chunk in a thread beside the loop (`policy.asynchronous`),
    the loop following the current chunk on the wall clock meanwhile, and follow the answer from the time passed
    since its observation; False: ask inline (the loop waits for the answer and then runs the frames it missed back
    to back). None (the default): beside in real time. Lock-step and offline always ask inline (the world waits)."""
    max_held_s: float | None = None
    """Online: an episode in which the desync detector has held the arm this long without a break, simulated s, is
    abandoned (`EpisodeResult.abandoned`, judged on ground truth as it stands): the twin has lost an object and
    the search has not found it again, so the rest of the episode would measure nothing but the wait (one T
    propped on its edge once held the arm for 58 of 60 s). None (the default, as sync scenarios want): never;
    online evaluation sets 10 s (`online_env_config`)."""

    def observing(self, needs: ObservationNeeds) -> EnvConfig:
        """This config with the virtual cameras and image size a policy needs, and the real frames if it needs
        them (never turned off here)."""
        return replace(
            self, cameras=needs.cameras, image_size=needs.image_size, real_images=self.real_images or needs.real_images
        )

    def __post_init__(self) -> None:
        if self.replan_every is not None and not self.replan_every > 0:
            raise ValueError(f"replan_every: must be > 0 s or None, got {self.replan_every}")
        if self.max_held_s is not None and not self.max_held_s > 0:
            raise ValueError(f"max_held_s: must be > 0 s or None, got {self.max_held_s}")
        if min(self.image_size) < 16:
            raise ValueError(f"image_size: must be at least 16×16 px, got {self.image_size}")


@dataclass(frozen=True)
class FrameInfo:
    """One frame, for observers (a batch: leading axis B). `report` is the Runtime's (None for a batch)."""

    env: Env | BatchEnv
    """The environment that ran the frame."""
    frame: int
    """Frames since the reset, this one included."""
    time: np.ndarray
    """() or (B,) twin time after the frame, s."""
    source: TwinState | Callable[[], TwinState]
    """The twin's state after the frame, or how to read it (`state` reads it on first access)."""
    q_des: np.ndarray
    """([B,] J) the desired joints commanded this frame, rad."""
    progress: np.ndarray
    """() or (B,) the policy's progress at this frame (interpolated between its waypoints)."""
    report: FrameReport | None = None
    late_s: float = float("nan")
    """Real time: how late the frame started against its wall-clock due time (the episode's start + the frames
    before it × the frame period), s; NaN in lock-step. A frame is on time when this is under one frame period."""

    @property
    def state(self) -> TwinState:
        """The twin's state after the frame (copies). A batch's is read on first access — during the observer's
        call, while the twins are still at this frame — so observers that do not need it (the episode's judge)
        do not pay for it every frame."""
        if not isinstance(self.source, TwinState):
            object.__setattr__(self, "source", self.source())
        assert isinstance(self.source, TwinState)
        return self.source


FrameObserver = Callable[[FrameInfo], None]


@dataclass(frozen=True)
class StepInfo:
    """What one `step` did: frames run, twin time after them (s), per-frame progress, desync at the end."""

    frames: int
    time: float | np.ndarray
    progress: np.ndarray
    desynced: bool | np.ndarray = False


def offline_runtime(config: EnvConfig) -> RuntimeConfig:
    """The frame loop of an offline twin of `config`: no follower, no correction, objects sleeping at rest if
    `config.sleep`."""
    physics = replace(config.runtime.physics, sleep=config.sleep)
    return replace(config.runtime, follow=False, correct=False, physics=physics)


def frames_for(
    chunk: ActionChunk, dt: float, replan_every: float | None, max_frames: int | None = None, offset: float = 0.0
) -> int:
    """Frames of `dt` s to follow `chunk` for: its horizon, or the re-plan period if shorter, both counted from the
    chunk's start, less the `offset` s of it that passed before it arrived; or `max_frames` if fewer (at least 1)."""
    span = chunk.horizon if replan_every is None else min(chunk.horizon, replan_every)
    n = max(1, round(span / dt) - round(offset / dt))
    return n if max_frames is None else max(1, min(n, max_frames))


class Env:
    """One twin of `task`'s scene; online when given a started `RealWorld`, offline otherwise."""

    def __init__(self, task: Task, config: EnvConfig = EnvConfig(), world: RealWorld | None = None) -> None:
        self.task, self.config, self.world = task, config, world
        if world is not None and config.runtime.physics.sleep:
            raise ValueError(
                "physics.sleep: an online twin must not sleep (it is corrected every frame; validated offline)"
            )
        runtime = config.runtime if world is not None else offline_runtime(config)
        if config.real_images and world is None:
            raise ValueError("real_images: an offline environment has no real cameras")
        self.runtime = Runtime(task.scene, runtime, world)
        self.cameras = None
        if config.cameras:
            from realissim.views.virtual import VirtualCameras

            self.cameras = VirtualCameras(task.scene, self.runtime.twin.model, config.cameras, config.image_size)
        self._calibrated = False
        self.start: StartState | None = None
        self._rng = np.random.default_rng()
        self._command = np.asarray(task.scene.robot.home, dtype=np.float64)
        self._frame = 0
        self._wall0 = 0.0
        self._last: FrameReport | None = None

    @property
    def online(self) -> bool:
        return self.world is not None

    @property
    def dt(self) -> float:
        """The frame period, s (the physics config's)."""
        return self.runtime.dt

    def reset(self, start: StartState | None = None, seed: int | None = None) -> Observation:
        """To `start` (None: a start drawn from the task's sampler, seeded by `seed` if given); online, calibrate
        as configured. Returns the first observation."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        start = self.task.sample_start(self._rng) if start is None else start
        when = self.config.calibrate
        if self.online and (when == "every_reset" or (when == "first_reset" and not self._calibrated)):
            at = self.calibration_state(start)
            self.runtime.reset(at)
            self.runtime.calibrate()
            self._calibrated = True
            # Again after calibrating: in real time the world's clock ran during the fit (seconds), and its
            # scheduled disturbances would have happened before the episode began.
            assert self.world is not None
            if at != start or not self.world.lockstep:
                self.runtime.reset(start)
        else:
            self.runtime.reset(start)
        self.start = start
        """The start state of the current episode."""
        self._command = start.q_array.copy()
        self._frame, self._last = 0, None
        self._wall0 = time.monotonic()
        return self.observe()

    def calibration_state(self, start: StartState) -> StartState:
        """The state the twin's appearance is fitted in before an episode from `start` (`calibrate_at`)."""
        goals = self.task.goal
        if self.config.calibrate_at == "start" or not goals:
            return start
        names = [o.name for o in self.task.scene.objects]
        objects = list(start.objects)
        for goal in goals:
            objects[names.index(goal.object)] = goal.pose
        return StartState(tuple(objects), tuple(float(v) for v in self.task.scene.robot.home))

    @property
    def realtime(self) -> bool:
        """Whether the loop runs on the wall clock (online, a world that does not wait)."""
        return self.world is not None and not self.world.lockstep

    @property
    def policy_beside(self) -> bool:
        """Whether episodes ask the policy beside the loop (`EnvConfig.policy_beside`; only in real time)."""
        return self.realtime and self.config.policy_beside is not False

    def step(
        self,
        chunk: ActionChunk,
        observer: FrameObserver | None = None,
        max_frames: int | None = None,
        offset: float = 0.0,
    ) -> tuple[Observation, StepInfo]:
        """Follow `chunk` ((m, J) waypoints) for its horizon or the re-plan period, both counted from the chunk's
        start (at most `max_frames`, at least one frame); `offset` s of it passed before it arrived (a policy asked
        beside the loop: `ActionChunk.targets`); `observer` sees every frame."""
        self._check(chunk)
        n = frames_for(chunk, self.dt, self.config.replan_every, max_frames, offset)
        targets, progress = chunk.targets(self._command, self.dt, n, offset)
        self._run(targets, progress, n, observer)
        info = StepInfo(n, float(self.runtime.twin.data.time), progress, self.runtime.desynced)
        return self.observe(), info

    def follow(
        self,
        chunk: ActionChunk,
        until: Callable[[], bool],
        observer: FrameObserver | None = None,
        max_frames: int = 1,
        offset: float = 0.0,
    ) -> StepInfo:
        """Go on following `chunk` from `offset` s into it (held at its last waypoint beyond its horizon) frame by
        frame until `until()` is true (asked before each frame and, in real time, before each run of due frames),
        at most `max_frames` frames (none if `until()` is true at once): the loop's part while a policy answers
        beside it. No observation is made."""
        self._check(chunk)
        if max_frames < 1 or until():
            return StepInfo(0, float(self.runtime.twin.data.time), np.zeros(0), self.runtime.desynced)
        targets, progress = chunk.targets(self._command, self.dt, max_frames, offset)
        n = self._run(targets, progress, max_frames, observer, until)
        return StepInfo(n, float(self.runtime.twin.data.time), progress[:n], self.runtime.desynced)

    def _check(self, chunk: ActionChunk) -> None:
        if chunk.q_des.ndim != 2:
            raise ValueError(f"Env.step: expected a chunk of one environment (m, J), got {chunk.q_des.shape}")

    def _run(
        self,
        targets: np.ndarray,
        progress: np.ndarray,
        n: int,
        observer: FrameObserver | None,
        until: Callable[[], bool] | None = None,
    ) -> int:
        """Run frames with `targets` (≥ n, J) until n have run or `until()` is true; the frames run."""
        realtime = self.realtime
        k = 0
        while k < n and (until is None or k == 0 or not until()):
            due = self._due(n - k) if realtime else 1
            for j in range(due):
                late = time.monotonic() - self._wall0 - self._frame * self.dt if realtime else float("nan")
                report = self.runtime.frame(targets[k + j], correct=j == 0 or self.runtime.beside)
                self._frame += 1
                self._last = report
                if observer is not None:
                    observer(
                        FrameInfo(self, self._frame, report.state.time, report.state, targets[k + j],
                                  progress[k + j], report, late)
                    )  # fmt: skip
            k += due
        self._command = targets[k - 1]
        return k

    def close(self) -> None:
        """Stop the runtime's correction thread, if it has one (the world is its owner's to close)."""
        self.runtime.close()

    def _due(self, left: int) -> int:
        """Real time: wait if ahead of the wall clock; else how many frames are due now (≥ 1, ≤ left)."""
        due = self._wall0 + self._frame * self.dt
        if due > time.monotonic():
            self.runtime.idle(due)  # (beside the loop, a correction ending meanwhile is taken up at once)
        return max(1, min(left, int((time.monotonic() - self._wall0) / self.dt) + 1 - self._frame))

    def observe(self) -> Observation:
        """The current observation (virtual images rendered now; real images from this frame's reading)."""
        s = self.runtime.twin.state()
        images = {}
        if self.cameras is not None:
            from realissim.views.virtual import body_poses

            # From qpos: MuJoCo's xpos after a step is the pose at the start of its last substep.
            xpos, xquat = body_poses(self.runtime.twin.model, self.runtime.twin.data.qpos[None])
            images = self.cameras.render(xpos[0], xquat[0])
        real = {}
        if self.config.real_images and self.world is not None:
            frames = self._last.images if self._last is not None and self._last.images is not None else None
            if frames is None:
                frames = np.stack([cam.read().image for cam in self.world.cameras])
            real = {cam.name: frames[c] for c, cam in enumerate(self.world.cameras)}
        return Observation(s.time, s.q, s.qd, s.q_des, s.object_pos, s.object_quat, images, real)
