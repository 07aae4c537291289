"""`run_episode`: the one driver of episodes — demos, sync scenarios, collection and evaluation all use it.

An episode: reset the environment to a start, then ask the policy for a chunk, let the environment follow
it, and repeat until `max_seconds` of simulated time (or, with `stop_on_success`, until the task is
solved; or, online, until the desync detector has held the arm for `EnvConfig.max_held_s` without a break).
The task is judged on ground truth every `judge_every` s: online on the world's oracle, offline on
the twin's own state (the twin is the world there). Observers see the reset, every frame, and the result.
The policy sees only observations; nothing here passes it the oracle.

Online in real time (`Env.policy_beside`) the policy is asked beside the loop: the observation is handed to a thread
(`policy.asynchronous.PolicyThread`) and the loop goes on following the current chunk on the wall clock until the
answer comes; the answer is then followed from the time that has passed since its observation. Only the first chunk
of an episode is asked inline. Lock-step and offline ask inline: the world waits.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from realissim.envs.batch import BatchEnv
from realissim.envs.env import Env, FrameInfo
from realissim.policy.asynchronous import PolicyThread
from realissim.policy.base import Observation, Policy
from realissim.spec.state import StartState

log = logging.getLogger(__name__)


class EpisodeObserver:
    """Hooks into an episode; override what you need (each default does nothing)."""

    def on_reset(self, env: Env | BatchEnv, observation: Observation) -> None:
        """After the reset, before the first chunk (e.g. schedule disturbances in the world)."""

    def on_frame(self, frame: FrameInfo) -> None:
        """After every frame."""

    def on_end(self, result: EpisodeResult | list[EpisodeResult]) -> None:
        """Once, with the episode's result (a list for a batch)."""


@dataclass
class EpisodeResult:
    """One episode: success (the task's success reached at some judged frame, on ground truth), when, the
    coverage over time, the final metrics, the policy's self-reported progress over time, durations."""

    start: StartState
    success: bool = False
    success_time: float = math.inf
    """Simulated s at the first judged success (inf: never)."""
    times: list[float] = field(default_factory=list)
    """Judged times, s."""
    coverage: list[float] = field(default_factory=list)
    """The task's coverage at each judged time."""
    progress: list[float] = field(default_factory=list)
    """The policy's progress at every frame."""
    final: dict[str, float | bool] = field(default_factory=dict)
    """The task's metrics at the end (TaskMetrics.as_dict)."""
    duration: float = 0.0
    """Simulated s."""
    frames: int = 0
    policy_calls: int = 0
    wall_s: float = 0.0
    """Wall-clock s of the whole episode (reset to result)."""
    policy_s: float = 0.0
    """Wall-clock s spent in the policy's `act` (for a batch: all of its calls, shared by the episodes)."""
    desynced_s: float = 0.0
    """Online: simulated s during which the desync detector said the twin was out of sync (the real arm held)."""
    desync_events: list[tuple[float, str]] = field(default_factory=list)
    """Online: (time, "fired" | "re-armed"), s, in order."""
    reacquisitions: int = 0
    """Online: how many times an object of the twin was re-acquired (put where the cameras found it)."""
    early_placements: int = 0
    """Online: of those, how many in sync, on the detector's suspicion (`SupervisionConfig.early_search`)."""
    vetoed_alarms: int = 0
    """Online: how many times the detector's evidence would have fired but the alarm check's search found the
    objects where the twin had them (`SupervisionConfig.alarm_check`): no alarm."""
    tipped_s: float = 0.0
    """Online: simulated s during which the twin recognised an object standing on a side (`Runtime.tipped`)."""
    timed_frames: int = 0
    """Real time: frames with a wall-clock due time (0 in lock-step and offline)."""
    late_frames: int = 0
    """Real time: of those, frames whose physics started more than one frame period after their due time."""
    corrections: int = 0
    """Online: frames at which a visual correction's result was applied (beside the loop: the results collected)."""
    abandoned: bool = False
    """Online: ended early because the detector held the arm for `EnvConfig.max_held_s` without a break (the
    episode counts as it stands on ground truth: a failure unless the task was already solved)."""

    def held_for(self, now: float) -> float:
        """How long, s, the detector has held the arm without a break at twin time `now` (0 while in sync)."""
        if not self.desync_events or self.desync_events[-1][1] != "fired":
            return 0.0
        return now - self.desync_events[-1][0]

    def summary(self) -> dict[str, float | bool | int]:
        """Scalars: success, success time, final metrics, duration, frames, wall time, final progress."""
        return {
            "success": self.success,
            "success_time": self.success_time,
            **{f"final_{k}": v for k, v in self.final.items()},
            "final_progress": self.progress[-1] if self.progress else 0.0,
            "duration": self.duration,
            "frames": self.frames,
            "policy_calls": self.policy_calls,
            "wall_s": self.wall_s,
            "policy_s": self.policy_s,
            "desynced_s": self.desynced_s,
            "desync_events": len([e for e in self.desync_events if e[1] == "fired"]),
            "reacquisitions": self.reacquisitions,
            "early_placements": self.early_placements,
            "vetoed_alarms": self.vetoed_alarms,
            "tipped_s": self.tipped_s,
            "frames_on_time": 1.0 - self.late_frames / self.timed_frames if self.timed_frames else math.nan,
            "corrected_hz": self.corrections / self.duration if self.duration > 0 else math.nan,
            "abandoned": self.abandoned,
        }


def judged_poses(env: Env | BatchEnv) -> tuple[np.ndarray, np.ndarray]:
    """Object poses to judge the task on, ([B,] K, 3) m and ([B,] K, 4): the world's oracle online (evaluation
    only), else the twin's (offline the twin is the world)."""
    world = getattr(env, "world", None)
    if world is not None and world.oracle is not None:
        truth = world.oracle.read()
        return truth.object_pos, truth.object_quat
    if isinstance(env, BatchEnv):
        return env.twins.object_poses()
    s = env.runtime.twin.state()
    return s.object_pos, s.object_quat


class _Judge:
    """Evaluates the task on ground truth every `every` frames (and on demand) for one or B episodes."""

    def __init__(self, env: Env | BatchEnv, results: list[EpisodeResult], every: int) -> None:
        self.env, self.results, self.every = env, results, every

    def __call__(self, frame: FrameInfo) -> None:
        for r, p in zip(self.results, np.atleast_1d(frame.progress).tolist()):
            r.progress.append(p)
        report = frame.report
        if report is not None:  # one online episode: the detector's verdicts and the re-acquisitions
            r = self.results[0]
            if math.isfinite(frame.late_s):
                r.timed_frames += 1
                r.late_frames += frame.late_s > self.env.dt
            r.corrections += report.correction is not None
            was = bool(r.desync_events) and r.desync_events[-1][1] == "fired"
            if report.desynced != was:
                r.desync_events.append((float(frame.time), "fired" if report.desynced else "re-armed"))
            r.desynced_s += self.env.dt if report.desynced else 0.0
            r.tipped_s += self.env.dt if report.tipped else 0.0
            r.reacquisitions += sum(a.placed for a in report.reacquisitions)
            r.early_placements += sum(a.placed and a.early for a in report.reacquisitions)
            r.vetoed_alarms += any(a.check for a in report.reacquisitions)  # (made only in sync)
        if frame.frame % self.every == 0:
            self.judge(float(np.max(frame.time)))

    def judge(self, t: float) -> None:
        if self.results[0].times and self.results[0].times[-1] == t:
            return  # judged at this time already
        pos, quat = judged_poses(self.env)
        batched = isinstance(self.env, BatchEnv)
        for b, r in enumerate(self.results):
            metrics = self.env.task.evaluate(pos[b] if batched else pos, quat[b] if batched else quat)
            r.times.append(t)
            r.coverage.append(float(metrics.coverage))
            r.final = metrics.as_dict()
            if metrics.success and not r.success:
                r.success, r.success_time = True, t


def _episodes(
    env: Env | BatchEnv,
    policy: Policy,
    starts: list[StartState] | None,
    max_seconds: float | None,
    observers: Sequence[EpisodeObserver],
    stop_on_success: bool,
    judge_every: float,
    seed: int | None,
) -> list[EpisodeResult]:
    max_seconds = env.task.max_seconds if max_seconds is None else max_seconds
    if not (max_seconds > 0 and math.isfinite(max_seconds)):
        raise ValueError(f"max_seconds: must be a positive number, got {max_seconds}")
    wall0 = time.perf_counter()
    batch = isinstance(env, BatchEnv)
    policy.reset()
    observation = env.reset(starts if batch else (starts[0] if starts else None), seed=seed)
    starts = env.starts if isinstance(env, BatchEnv) else [env.start]
    results = [EpisodeResult(start=s) for s in starts]
    for observer in observers:
        observer.on_reset(env, observation)
    judge = _Judge(env, results, max(1, round(judge_every / env.dt)))

    def on_frame(frame: FrameInfo) -> None:
        judge(frame)
        for observer in observers:
            observer.on_frame(frame)

    frames, calls, policy_s = 0, 0, 0.0
    limit = round(max_seconds / env.dt)
    max_held = env.config.max_held_s if isinstance(env, Env) and env.online else None

    def ended(now: float) -> bool:
        if stop_on_success and all(r.success for r in results):
            return True
        held = results[0].held_for(now) if max_held is not None else 0.0
        if max_held is not None and held >= max_held - 1e-9:
            log.info("episode abandoned at %.1f s: the detector has held the arm for %.1f s", now, held)
            results[0].abandoned = True
            return True
        return False

    beside = PolicyThread(policy) if isinstance(env, Env) and env.policy_beside else None
    chunk, offset, now = None, 0.0, float(np.max(observation.time))
    try:
        while frames < limit:
            if chunk is None:  # inline (and the first chunk of an episode beside the loop)
                t0 = time.perf_counter()
                chunk, offset = policy.act(observation), 0.0
                policy_s += time.perf_counter() - t0
                calls += 1
            if offset:
                assert isinstance(env, Env)  # (a late chunk: only beside a real-time loop)
                observation, info = env.step(chunk, on_frame, limit - frames, offset)
            else:
                observation, info = env.step(chunk, on_frame, limit - frames)
            frames += info.frames
            now = float(np.max(observation.time))
            if ended(now):
                break
            if beside is None:
                chunk = None
                continue
            if frames >= limit:
                break
            # Beside the loop: the policy answers this observation while the loop goes on with the chunk it has.
            assert isinstance(env, Env)
            beside.submit(observation)
            more = env.follow(chunk, beside.done, on_frame, limit - frames, offset + info.frames * env.dt)
            frames += more.frames
            chunk, seconds = beside.collect()
            offset = more.frames * env.dt  # the new chunk began at the observation it answers
            policy_s += seconds
            calls += 1
            if more.frames:
                now = float(more.time)
                if ended(now):
                    break
    finally:
        if beside is not None:
            beside.close()
    judge.judge(now)
    wall = time.perf_counter() - wall0
    for r in results:
        r.frames, r.duration, r.policy_calls, r.wall_s, r.policy_s = frames, frames * env.dt, calls, wall, policy_s
    for observer in observers:
        observer.on_end(results if batch else results[0])
    return results


def run_episode(
    env: Env,
    policy: Policy,
    start: StartState | None = None,
    max_seconds: float | None = None,
    observers: Sequence[EpisodeObserver] = (),
    stop_on_success: bool = True,
    judge_every: float = 0.1,
    seed: int | None = None,
) -> EpisodeResult:
    """One episode of `policy` in `env` from `start` (None: drawn from the task's sampler with `seed`), for
    at most `max_seconds` simulated s (None: the task's time limit); success judged on ground truth every
    `judge_every` s (the episode ends at the end of the chunk in which it succeeded, with `stop_on_success`)."""
    return _episodes(env, policy, [start] if start else None, max_seconds, observers, stop_on_success,
                     judge_every, seed)[0]  # fmt: skip


def run_episodes(
    env: BatchEnv,
    policy: Policy,
    starts: Sequence[StartState] | None = None,
    max_seconds: float | None = None,
    observers: Sequence[EpisodeObserver] = (),
    stop_on_success: bool = True,
    judge_every: float = 0.1,
    seed: int | None = None,
) -> list[EpisodeResult]:
    """B episodes at once in a `BatchEnv` (`policy` takes and returns batches, e.g. `PerEnvPolicies`); they
    run until all have succeeded (with `stop_on_success`) or for `max_seconds`. Twins that succeed early keep
    running (their success time and metrics at success are kept; `final` is at the end)."""
    return _episodes(env, policy, list(starts) if starts is not None else None, max_seconds, observers,
                     stop_on_success, judge_every, seed)  # fmt: skip


class ProgressBar(EpisodeObserver):
    """An observer showing a progress bar over the episode's simulated time."""

    def __init__(self, max_seconds: float, label: str = "episode", enabled: bool = True) -> None:
        self.max_seconds, self.label, self.enabled = max_seconds, label, enabled
        self._bar: tqdm | None = None

    def on_reset(self, env: Env | BatchEnv, observation: Observation) -> None:
        total = round(self.max_seconds / env.dt)
        self._bar = tqdm(total=total, desc=self.label, unit="frame", disable=not self.enabled)

    def on_frame(self, frame: FrameInfo) -> None:
        assert self._bar is not None
        self._bar.update(1)

    def on_end(self, result: EpisodeResult | list[EpisodeResult]) -> None:
        if self._bar is not None:
            self._bar.close()
