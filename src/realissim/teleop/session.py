"""`TeleopSession`: the control thread of a teleoperation session — the Env at real time, episodes, the store.

One thread owns the environment. It asks the `TeleopPolicy` for a chunk (one frame by default) and lets the
`Env` follow it, again and again (60 Hz; online the Env keeps pace with the real world's clock, offline this
thread sleeps to the wall clock). Requests from other threads (the browser's buttons, tests) are queued and
run between chunks, so the environment is never touched concurrently: `start_episode` resets the twin (and,
online, the world) to the task's next sampled start and starts recording, `save_episode` writes the
recorded frames to the store, `discard_episode` drops them. While recording, every frame goes to the
`EpisodeRecorder`, and the task is judged on ground truth (the twin offline, the world's oracle online,
evaluation only) every `judge_every` s. Viewers read the latest `Snapshot`.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from realissim.data.recorder import EpisodeRecorder
from realissim.data.store import DatasetWriter, EpisodeInfo
from realissim.envs.env import Env, FrameInfo
from realissim.eval.episode import judged_poses
from realissim.eval.sync.metrics import pose_errors
from realissim.policy.base import Observation
from realissim.runtime.loop import FrameReport
from realissim.spec.state import StartState
from realissim.tasks import Task, TaskMetrics
from realissim.teleop.config import TeleopConfig
from realissim.teleop.policy import TeleopPolicy
from realissim.twin.state import TwinState

log = logging.getLogger(__name__)

T = TypeVar("T")

CATCH_UP_LIMIT = 0.25
"""Offline, a loop this many s behind the wall clock stops trying to catch up (it restarts its schedule)."""


@dataclass(frozen=True)
class Snapshot:
    """The session after a frame, for viewers and tests (arrays are copies or never mutated afterwards)."""

    frames: int
    """Frames run since the session started."""
    time: float
    """Twin time since the last reset, s."""
    qpos: np.ndarray
    """(nq,) the twin's MuJoCo positions (arm joints and object poses)."""
    tip: np.ndarray
    """(3,) the twin's pusher tip centre, world frame, m (forward kinematics of its actual joints)."""
    target: np.ndarray | None
    """(3,) the operator's tip target, world frame, m (None: none set)."""
    commanded_tip: np.ndarray | None
    """(3,) the rate-limited tip the last chunk commanded, m."""
    recording: bool
    episode_frames: int
    """Frames recorded in the current episode (0 when not recording)."""
    saved: int
    """Episodes saved by this session."""
    real_images: np.ndarray | None = None
    """Online: (C, H, W, 3) uint8 the real cameras' frames read this frame (None offline or not read)."""
    desynced: bool | None = None
    """Online: the desync detector's verdict (None offline)."""
    sync_pos_err: np.ndarray | None = None
    """Online, EVALUATION ONLY: (K,) distance of each twin object from the oracle's, m (`pose_errors`)."""
    sync_yaw_err: np.ndarray | None = None
    """Online, EVALUATION ONLY: (K,) heading difference of each twin object from the oracle's, rad."""


class _Episode:
    """The episode being recorded: its recorder and the judge's success streak."""

    def __init__(self, recorder: EpisodeRecorder) -> None:
        self.recorder = recorder
        self.frames = 0
        self.streak_start: float | None = None
        self.metrics: TaskMetrics | None = None

    def judge(self, metrics: TaskMetrics, t: float) -> None:
        self.metrics = metrics
        if not metrics.success:
            self.streak_start = None
        elif self.streak_start is None:
            self.streak_start = t


class TeleopSession:
    """Runs `env` under `policy` in a background thread at the frame rate, recording episodes into `writer`."""

    def __init__(
        self, config: TeleopConfig, task: Task[Any], env: Env, policy: TeleopPolicy, writer: DatasetWriter
    ) -> None:
        self.config, self.task, self.env, self.policy, self.writer = config, task, env, policy, writer
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._episode: _Episode | None = None
        self._observation: Observation | None = None
        self._last_report: FrameReport | None = None
        self._started_episodes = 0
        self._frames = 0
        self._saved = 0
        self._judge_frames = max(1, round(config.judge_every / env.dt))
        self.error: BaseException | None = None
        """What stopped the control thread, if it failed."""

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self, start: StartState | None = None) -> None:
        """Reset to `start` (default: the scene's own initial state) and run the control thread."""
        self._reset(StartState.of_scene(self.task.scene) if start is None else start)
        self._publish(self.env.runtime.twin.state(), None)
        self._thread = threading.Thread(target=self._run, name="teleop-control", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the control thread (an episode being recorded is dropped, not saved)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("teleop control thread did not stop within %.1f s", timeout)
        self._fail_pending(RuntimeError("the teleoperation session stopped"))

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- requests from other threads -----------------------------------------------------------------------

    def set_target(self, tip_W: np.ndarray | tuple[float, float, float]) -> None:
        """The operator's tip target (3,) m, world frame; the commanded tip approaches it at `tip_speed`."""
        self.policy.target = tip_W

    def start_episode(self) -> Future[int]:
        """Reset to the next sampled start and record; resolves to the episode's seed once reset."""
        return self._submit(self._start_episode)

    def save_episode(self) -> Future[EpisodeInfo]:
        """Write the episode being recorded to the store; resolves to its `EpisodeInfo`."""
        return self._submit(self._save_episode)

    def discard_episode(self) -> Future[None]:
        """Drop the episode being recorded."""
        return self._submit(self._discard_episode)

    def snapshot(self) -> Snapshot | None:
        """The state after the latest frame (None before the first)."""
        with self._lock:
            return self._snapshot

    @property
    def frames(self) -> int:
        """Frames run since the session started."""
        return self._frames

    @property
    def saved(self) -> int:
        """Episodes saved by this session."""
        return self._saved

    @property
    def recording(self) -> bool:
        return self._episode is not None

    def _submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        if not self.running:
            future.set_exception(RuntimeError("the teleoperation session is not running"))
            return future
        self._requests.put((fn, future))
        return future

    def _fail_pending(self, error: BaseException) -> None:
        while True:
            try:
                _, future = self._requests.get_nowait()
            except queue.Empty:
                return
            future.set_exception(error)

    # -- the control thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        deadline = time.monotonic()
        realtime_world = self.env.world is not None and not self.env.world.lockstep
        try:
            while not self._stop.is_set():
                if self._serve_requests():
                    deadline = time.monotonic()
                assert self._observation is not None
                chunk = self.policy.act(self._observation)
                self._observation, info = self.env.step(chunk, observer=self._on_frame)
                if not realtime_world:
                    deadline = _pace(deadline + info.frames * self.env.dt)
        except Exception as err:  # kept for the server, passed to the requesters
            self.error = err
            log.exception("teleop control thread failed")
            self._fail_pending(err)

    def _serve_requests(self) -> bool:
        """Run the queued requests; whether any ran (a reset restarts the schedule)."""
        served = False
        while True:
            try:
                fn, future = self._requests.get_nowait()
            except queue.Empty:
                return served
            served = True
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except Exception as err:  # the requester gets it
                log.warning("teleop request failed: %s", err)
                future.set_exception(err)
                continue
            self._publish(self.env.runtime.twin.state(), self._last_report)  # what the requester sees next
            future.set_result(result)

    def _reset(self, start: StartState) -> None:
        """Twin (and world) to `start`, the arm holding still until the operator sets a target."""
        self.policy.reset()
        self._observation = self.env.reset(start)
        self.policy.target = None
        self._last_report = None

    def _start_episode(self) -> int:
        if self._episode is not None:
            raise RuntimeError("start: an episode is being recorded; Save or Discard it first")
        seed = self.config.seed + self._started_episodes
        self._started_episodes += 1
        start = self.task.sample_start(np.random.default_rng(seed))
        self._reset(start)
        recorder = EpisodeRecorder(self.writer, record_images=self.config.record_images, seed=seed)
        assert self._observation is not None
        recorder.on_reset(self.env, self._observation)
        self._episode = _Episode(recorder)
        self._judge(self._episode)
        log.info("episode started from the start of seed %d", seed)
        return seed

    def _save_episode(self) -> EpisodeInfo:
        episode = self._require_episode("save")
        if episode.frames == 0:
            raise RuntimeError("save: the episode has no frames yet")
        self._judge(episode)
        metrics = episode.metrics
        assert metrics is not None
        success_time = episode.streak_start if metrics.success and episode.streak_start is not None else math.inf
        info = episode.recorder.finish(metrics.success, success_time, metrics.coverage)
        self._episode = None
        self._saved += 1
        log.info("episode %d saved: %d frames, success %s, coverage %.3f", info.index, info.length,
                 info.success, metrics.coverage)  # fmt: skip
        return info

    def _discard_episode(self) -> None:
        episode = self._require_episode("discard")
        episode.recorder.discard()
        self._episode = None
        log.info("episode discarded (%d frames)", episode.frames)

    def _require_episode(self, what: str) -> _Episode:
        if self._episode is None:
            raise RuntimeError(f"{what}: no episode is being recorded (press Start first)")
        return self._episode

    def _judge(self, episode: _Episode) -> None:
        pos, quat = judged_poses(self.env)
        episode.judge(self.task.evaluate(pos, quat), float(self.env.runtime.twin.data.time))

    def _on_frame(self, frame: FrameInfo) -> None:
        self._frames += 1
        episode = self._episode
        if episode is not None:
            episode.recorder.on_frame(frame)
            episode.frames += 1
            if episode.frames % self._judge_frames == 0:
                self._judge(episode)
        self._last_report = frame.report
        self._publish(frame.state, frame.report)

    def _publish(self, state: TwinState, report: FrameReport | None) -> None:
        """Make the twin's `state` (after a frame or a reset) and the frame's `report` the latest snapshot."""
        snapshot = Snapshot(
            frames=self._frames,
            time=float(state.time),
            qpos=self.env.runtime.twin.data.qpos.copy(),
            tip=self.policy.ik.tip_position(state.q),
            target=self.policy.target,
            commanded_tip=self.policy.commanded_tip,
            recording=self._episode is not None,
            episode_frames=0 if self._episode is None else self._episode.frames,
            saved=self._saved,
            real_images=None if report is None else report.images,
            desynced=None if self.env.world is None else report is not None and report.desynced,
            **self._sync_errors(state),
        )
        with self._lock:
            self._snapshot = snapshot

    def _sync_errors(self, state: TwinState) -> dict[str, np.ndarray]:
        """Online: the twin's objects against the oracle (evaluation only); offline: nothing."""
        world = self.env.world
        if world is None or world.oracle is None:
            return {}
        truth = world.oracle.read()
        errors = np.array([pose_errors(p, q, tp, tq) for p, q, tp, tq in
                           zip(state.object_pos, state.object_quat, truth.object_pos, truth.object_quat)])  # fmt: skip
        return {"sync_pos_err": errors[:, 0], "sync_yaw_err": errors[:, 1]}


def _pace(deadline: float) -> float:
    """Sleep until `deadline` (monotonic s); the deadline to continue from (now, when far behind)."""
    ahead = deadline - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
    elif ahead < -CATCH_UP_LIMIT:
        return time.monotonic()
    return deadline
