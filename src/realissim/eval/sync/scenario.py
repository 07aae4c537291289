"""Sync scenarios, online through `run_episode`: the standard one and the contact-rich one.

Standard (`motion="push"`): the twin's arm follows the scripted push (`ScriptedPush`, then it holds); at
`push_time` an unseen hand moves the real T by `hand_push` (a `move_object` disturbance the twin is not told
about). Contact-rich (`motion="random"`, see `contact_rich`): random pushes from every side keep the T moving
for most of the episode (`RandomPushes`), from a start drawn by the task's sampler. `SyncObserver` compares
the twin's object with the oracle every frame (evaluation only) and keeps the loop's timing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from realissim.envs.env import Env, EnvConfig, FrameInfo
from realissim.eval.episode import EpisodeObserver, ProgressBar, run_episode
from realissim.eval.sync.metrics import LOSS_MIN_S, SyncRecorder, detector_score, fault_outcome
from realissim.expert.random_pushes import RandomPushes, RandomPushesConfig, lifted_pushes
from realissim.expert.scripted import ScriptedPush
from realissim.policy.base import Observation
from realissim.real.surrogate import Disturbance, Surrogate, SurrogateConfig
from realissim.real.surrogate.process import CAMERA_SIZE
from realissim.runtime.config import RuntimeConfig
from realissim.spec.state import StartState
from realissim.tasks import Task


@dataclass(frozen=True)
class ScenarioConfig:
    """The standard sync scenario."""

    seconds: float = 20.0
    """Episode length, s."""
    motion: Literal["push", "random"] = "push"
    """The twin arm's motion: the scripted push then holding, or random pushes that keep the T moving."""
    motion_seed: int = 0
    """Seed of the random pushes."""
    pushes: Literal["closed", "lifted"] = "closed"
    """The random pushes: "closed" — round the T at pushing height, closed loop (`RandomPushesConfig`'s defaults,
    docs/decisions.md, "Sync under sustained contact"); "lifted" — over the T, open loop (`lifted_pushes`, the earlier
    scenario, kept for comparison)."""
    start_seed: int | None = None
    """None: the scene's start; else a start drawn by the task's sampler with this seed."""
    push_time: float = 10.0
    """When the unseen hand moves the T, s."""
    hand_push: tuple[float, float, float] | None = (0.0, 0.05, 0.0)
    """How far the hand moves the T, world frame, m (None: no hand)."""
    camera_size: tuple[int, int] = CAMERA_SIZE
    """Real camera image size, px."""
    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    seed: int = 0
    faults: tuple[Disturbance, ...] = ()
    """Faults to inject (each at its own `at`, s): dropped or frozen frames, an occluding hand, lighting. The
    result says for each whether the twin kept tracking, or the detector fired and the follower held."""
    threads: int | None = None
    """Compute threads of the twin (PyTorch and the CPU rasteriser). None: torch's default in lock-step (the
    world and the twin take turns); in real time all cores but one, which the world's process needs."""
    realtime: bool = False
    """Run on the wall clock: the surrogate paces itself; the twin takes as many frames per loop iteration as
    the wall clock demands (correcting on the first), so it stays aligned with reality in time."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    calibrate_at: Literal["goal", "start"] = "start"
    """Where the twin's appearance is fitted (`EnvConfig.calibrate_at`). The sync scenarios track the T from where
    it starts, so they calibrate there (goal: the standard scenario's median error 4.8 mm instead of ~1 mm, its
    T never being near the goal); online evaluation, judged at the goal, calibrates at the goal."""


class SyncObserver(EpisodeObserver):
    """Schedules the hand and the faults at reset; per frame, the twin's first object against the oracle (an
    evaluation-only reading), the desync verdict and the loop's stage timings."""

    def __init__(self, disturbances: Sequence[Disturbance] = ()) -> None:
        self.disturbances = tuple(disturbances)
        self.recorder = SyncRecorder()
        self.desynced: list[bool] = []
        self.timings: dict[str, list[float]] = {}
        self.iteration_s: list[float] = []
        """Per corrected (or, correction off, per) frame: the loop's own time (the sum of its stages), s."""
        self.corrected = 0
        self.corrections = 0
        """Frames a correction was applied in."""
        self.truth = None
        self.speed: list[float] = []
        """The real T's planar speed at each frame, m/s (evaluation only: from the oracle)."""
        self.tilt: list[float] = []
        """The real T's tilt from lying (its body z from the world's), rad (evaluation only: from the oracle)."""
        self._last: tuple[float, np.ndarray] | None = None
        self.late: list[float] = []
        """Per frame: how late it started against its wall-clock due time, s (NaN in lock-step)."""
        self.ages: list[float] = []
        """Per correction applied by a correction beside the loop: its age when applied, s."""

    def on_reset(self, env: Env, observation: Observation) -> None:
        assert env.world is not None and hasattr(env.world, "disturb")
        for d in self.disturbances:
            env.world.disturb(d)

    def on_frame(self, frame: FrameInfo) -> None:
        env, report = frame.env, frame.report
        assert isinstance(env, Env) and env.world is not None and env.world.oracle is not None and report is not None
        self.truth = env.world.oracle.read()
        now, where = float(self.truth.time), self.truth.object_pos[0, :2].copy()
        last = self._last
        self.speed.append(float(np.linalg.norm(where - last[1]) / (now - last[0])) if last and now > last[0] else 0.0)
        self._last = (now, where)
        _, x, y, _ = self.truth.object_quat[0]
        self.tilt.append(math.acos(float(np.clip(1.0 - 2.0 * (x * x + y * y), -1.0, 1.0))))
        s = report.state
        self.recorder.add(float(s.time), s.object_pos[0], s.object_quat[0], self.truth.object_pos[0],
                          self.truth.object_quat[0])  # fmt: skip
        self.desynced.append(report.desynced)
        self.late.append(frame.late_s)
        if math.isfinite(report.correction_age):
            self.ages.append(report.correction_age)
        for key, value in report.timing.items():
            self.timings.setdefault(key, []).append(value)
        self.corrections += report.correction is not None
        if report.correction is not None or env.runtime.correction is None:
            self.corrected += 1
            self.iteration_s.append(sum(v for k, v in report.timing.items() if "." not in k))


def scenario_disturbances(task: Task, config: ScenarioConfig) -> tuple[Disturbance, ...]:
    """The unseen hand's push of the first object at `push_time` (if any), then the configured faults."""
    if config.hand_push is None:
        return config.faults
    hand = Disturbance(kind="move_object", object=task.scene.objects[0].name, at=config.push_time,
                       displacement=config.hand_push)  # fmt: skip
    return (hand, *config.faults)


def contact_rich(seed: int = 0, **changes: object) -> ScenarioConfig:
    """The contact-rich scenario: random pushes (seed `seed`) from a sampled start (seed `seed`), no hand;
    `changes` override other fields."""
    base = ScenarioConfig(motion="random", motion_seed=seed, start_seed=seed, hand_push=None)
    return replace(base, **changes)  # type: ignore[arg-type]


MOVING_M_S = 0.01
"""A frame counts as moving when the real T's planar speed exceeds this, m/s."""


def run_scenario(
    task: Task,
    config: ScenarioConfig,
    progress: bool = True,
    observers: Sequence[EpisodeObserver] = (),
    label: str = "scenario",
) -> dict:
    """Run the scenario online (lock-step, or real time); returns sync metrics, follower tracking, timing
    (median ms per stage) and the per-frame error series. `observers` see the episode too; `label` names the
    progress bar."""
    mode = "realtime" if config.realtime else "lockstep"
    fps = config.runtime.physics.fps
    surrogate = SurrogateConfig(gap=config.gap, seed=config.seed, camera_size=config.camera_size, mode=mode, fps=fps)
    sync = SyncObserver(scenario_disturbances(task, config))
    threads = config.threads or (max(1, (os.cpu_count() or 2) - 1) if config.realtime else None)
    if config.motion == "random":
        seed = config.motion_seed
        pushes = lifted_pushes(seed) if config.pushes == "lifted" else RandomPushesConfig(seed=seed)
        policy = RandomPushes(task.scene, pushes)
        env_config = EnvConfig(runtime=config.runtime, replan_every=policy.config.lead * policy.config.horizon
                               / policy.config.waypoints, calibrate_at=config.calibrate_at)  # fmt: skip
    else:
        policy = ScriptedPush(task.scene)
        env_config = EnvConfig(runtime=config.runtime, calibrate_at=config.calibrate_at)
    start = StartState.of_scene(task.scene)
    if config.start_seed is not None:
        start = task.sample_start(np.random.default_rng(config.start_seed))
    with _torch_threads(threads), Surrogate(task.scene, surrogate) as world:
        env = Env(task, env_config, world)
        bar = ProgressBar(config.seconds, label, progress)
        episode = run_episode(env, policy, start, config.seconds, [sync, bar, *observers], stop_on_success=False)
        runtime = env.runtime
        follower = runtime.follower.tracking.summary() if runtime.follower else {"rms_rad": float("nan")}
        events = list(runtime.detector.events) if runtime.detector else []
        env.close()
    out = sync.recorder.summary(events=(config.push_time,) if config.hand_push is not None else ())
    pos, yaw = 1e3 * np.asarray(sync.recorder.pos_err), np.degrees(sync.recorder.yaw_err)
    moving = np.asarray(sync.speed) > MOVING_M_S
    out["pos_err_max_mm"] = float(pos.max())
    out["moving_fraction"] = float(moving.mean())
    out["pos_err_p95_moving_mm"] = float(np.percentile(pos[moving], 95)) if moving.any() else 0.0
    out["yaw_err_p95_moving_deg"] = float(np.percentile(yaw[moving], 95)) if moving.any() else 0.0
    out["follower_rms_rad"] = follower["rms_rad"]
    out.update(loop_rates(sync, episode.frames, episode.wall_s, env.dt, config.realtime, runtime.beside))
    out["desync_events"] = [(frame * env.dt, kind) for frame, kind in events]
    out["timing_ms"] = {key: 1e3 * float(np.median(v)) for key, v in sync.timings.items()}
    out["reacquire_ms"] = out["timing_ms"].get("reacquire", 0.0)  # median over the frames that searched
    out["reacquisitions"] = episode.reacquisitions
    out["early_placements"] = episode.early_placements
    out["vetoed_alarms"] = episode.vetoed_alarms
    out["check_ms"] = out["timing_ms"].get("check", 0.0)  # median over the frames the alarm check searched
    out["desynced_s"] = episode.desynced_s
    # A real T standing on a side is a state the twin's flat objects cannot take (the runtime recognises it and
    # holds the arm): how long it lasted (oracle, tilted 30°–150°: upside down it lies flat, and the T looks the
    # same), how long the twin said so, and the error over the frames with the real T lying (evaluation only:
    # these do not replace the keys above).
    tipped = np.abs(np.cos(np.asarray(sync.tilt))) < math.cos(math.radians(30.0))
    out["real_tipped_s"] = float(tipped.sum() * env.dt)
    out["tipped_s"] = episode.tipped_s
    out["pos_err_p95_lying_mm"] = float(np.percentile(pos[~tipped], 95)) if (~tipped).any() else math.nan
    out["task"] = episode.final
    times, errors = np.asarray(sync.recorder.times), np.asarray(sync.recorder.pos_err)
    score = detector_score(times, errors, np.asarray(sync.desynced), min_duration=LOSS_MIN_S, within=LOSS_MIN_S,
                           yaw_err=np.asarray(sync.recorder.yaw_err))  # fmt: skip
    out["silent_loss_s"] = score["silent_loss_s"]
    out["longest_silent_loss_s"] = score["longest_silent_loss_s"]
    out["detector_recall"] = score["recall"]
    out["false_alarms_per_min"] = score["false_alarms_per_min"]
    out["false_alarms_pose_per_min"] = score["false_alarms_pose_per_min"]
    if runtime.detector is not None:
        out["detector"] = detector_score(times, errors, np.asarray(sync.desynced))
    out["faults"] = [
        {"kind": f.kind, "camera": f.camera, "at": f.at, "duration": f.duration}
        | fault_outcome(times, errors, np.asarray(sync.desynced), f.at, f.at + f.duration)
        for f in config.faults
    ]
    out["series"] = {
        "time": sync.recorder.times,
        "pos_err": sync.recorder.pos_err,
        "yaw_err": sync.recorder.yaw_err,
        "desynced": sync.desynced,
        "speed": sync.speed,
    }
    return out


def loop_rates(sync: SyncObserver, frames: int, wall_s: float, dt: float, realtime: bool, beside: bool) -> dict:
    """How the loop kept time. `loop_hz`: real time, the frames stepped per wall-clock second; lock-step, the
    rate the loop could run at (1 / its median time per corrected frame, the correction's included when inline).
    `frames_on_time`: real time, the fraction of frames that started within one frame period of their due time
    (NaN in lock-step, where the world waits). `corrected_hz`: corrections applied per second (wall clock in real
    time, simulated in lock-step). `correct_ms_median`: one correction's cost, ms (in its thread when beside),
    `correction_age_ms_median`: beside, how old a correction is when the loop applies it, ms. `frames_per_iteration`:
    frames per correction."""
    late = np.asarray(sync.late, dtype=np.float64)
    corrected = sync.corrections
    costs = sync.timings.get("beside.correct" if beside else "correct", [])
    if realtime:
        # The frames' own span on the wall clock (frame k starts at k·dt + its lateness): the episode's wall time
        # also holds its reset and calibration.
        span = (len(late) - 1) * dt + late[-1] - late[0] if len(late) > 1 else wall_s
        loop_hz, on_time, per_s = (len(late) - 1) / span, float(np.mean(late < dt)) if late.size else math.nan, span
    else:
        loop_hz, on_time, per_s = 1.0 / float(np.median(sync.iteration_s)), math.nan, frames * dt
    return {
        "loop_hz": loop_hz,
        "frames_on_time": on_time,
        "late_ms_p99": 1e3 * float(np.percentile(late, 99)) if realtime and late.size else math.nan,
        "corrected_hz": corrected / per_s if per_s > 0 else math.nan,
        "correct_ms_median": 1e3 * float(np.median(costs)) if costs else math.nan,
        "correction_age_ms_median": 1e3 * float(np.median(sync.ages)) if sync.ages else math.nan,
        "frames_per_iteration": frames / max(sync.corrected, 1),
    }


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run with `n` torch intra-op threads (the CPU rasteriser follows them); None leaves them as they are."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
