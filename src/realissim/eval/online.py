"""Online evaluation: a policy acting through the corrected twin while the surrogate real world follows.

Each episode runs in an `Env` over a `Surrogate` (its own process; correction and follower on, lock-step by
default), from a held-out start set (default `pusht/online-v1`) × `trials`. Success is judged on the world's
oracle (evaluation only: nothing the policy or the twin sees reads it) and, beside it, by the policy's own
progress > 0.9 (the paper's criterion); each episode also records how far the twin's object was from the real
one (`SyncErrors`, from the oracle), the desync detector's events and the re-acquisitions.

The surrogate is reset between episodes, not respawned. If it dies or hangs during an episode, that episode
ends as an *error* (not a failure of the policy: it is left out of the success rate and reported), every
finished episode is kept, and the evaluation goes on with a fresh surrogate.

Online episodes are slow on a small machine (minutes each), so an evaluation can keep a *journal*: every
episode is appended to a JSON-lines file as it ends, and an evaluation given the same journal again skips the
episodes it holds. The episodes that run after a resume are as valid as the others (the policy re-seeds its
noise at every reset; the lock-step surrogate's frames depend only on its seed, the frame and the camera) but
not always bit-identical to an uninterrupted run's: a fresh surrogate's twin calibrates its appearance at its
own first reset, which is then another start — as after a surrogate failure.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm import tqdm

from realissim.envs import Env, EnvConfig
from realissim.envs.env import FrameInfo
from realissim.eval.episode import EpisodeObserver, EpisodeResult, run_episode
from realissim.eval.stats import agreement, wilson
from realissim.eval.sync.metrics import LOSS_MIN_S, detector_score
from realissim.policy.base import Policy
from realissim.policy.factory import PolicyFactory
from realissim.real.surrogate import Surrogate, SurrogateConfig, SurrogateError
from realissim.real.surrogate.process import CAMERA_SIZE
from realissim.runtime import RuntimeConfig, SupervisionConfig
from realissim.runtime.desync import LOSS_DISTANCE
from realissim.spec.state import StartState
from realissim.tasks import Task
from realissim.util.signals import ending, terminate_raises

log = logging.getLogger(__name__)


class SyncErrors(EpisodeObserver):
    """Every `every_s` s of an online episode (in whole frames, at least one): the largest planar distance (m)
    between a twin object and the same object in the world's oracle (evaluation only)."""

    def __init__(self, every_s: float = 0.1) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s: must be > 0 s, got {every_s}")
        self.every_s = every_s
        self.every = 1
        self.errors: list[float] = []

    def on_reset(self, env: Env, observation: object) -> None:  # type: ignore[override]
        self.errors = []
        self.every = max(1, round(self.every_s / env.dt))

    def on_frame(self, frame: FrameInfo) -> None:
        env = frame.env
        world = getattr(env, "world", None)
        if world is None or world.oracle is None or frame.frame % self.every:
            return
        truth = world.oracle.read()
        twin = np.asarray(frame.state.object_pos)[..., :2]
        self.errors.append(float(np.max(np.linalg.norm(twin - np.asarray(truth.object_pos)[..., :2], axis=-1))))


@dataclass
class OnlineEpisode:
    """One online episode: its start (index in the set, trial), the result (None if the surrogate failed),
    the error that ended it (None if it ran to its end) and the twin-to-world object distance samples, m."""

    start_index: int
    trial: int
    result: EpisodeResult | None
    error: str | None = None
    sync_errors: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The episode as JSON values (the start by index: `from_json` takes the start set back)."""
        result = None
        if self.result is not None:
            result = {k: v for k, v in self.result.__dict__.items() if k != "start"}
            result["desync_events"] = [list(e) for e in self.result.desync_events]
        return {"start_index": self.start_index, "trial": self.trial, "result": result, "error": self.error,
                "sync_errors": list(self.sync_errors)}  # fmt: skip

    @staticmethod
    def from_json(row: dict, starts: Sequence[StartState]) -> OnlineEpisode:
        """The episode `to_json` wrote, its start taken from `starts` by index."""
        result = row["result"]
        if result is not None:
            events = [(float(t), str(what)) for t, what in result.pop("desync_events")]
            result = EpisodeResult(start=starts[row["start_index"]], desync_events=events, **result)
        return OnlineEpisode(row["start_index"], row["trial"], result, row["error"], list(row["sync_errors"]))

    def row(self) -> dict[str, object]:
        """One CSV row: start, trial, error, the episode's scalars, sync error mean and max (mm)."""
        base: dict[str, object] = {"start": self.start_index, "trial": self.trial, "error": self.error or ""}
        if self.result is not None:
            base |= self.result.summary()
        e = np.asarray(self.sync_errors)
        base["sync_error_mean_mm"] = float(e.mean() * 1e3) if len(e) else math.nan
        base["sync_error_max_mm"] = float(e.max() * 1e3) if len(e) else math.nan
        return base


@dataclass(frozen=True)
class OnlineReport:
    """Online episodes in order, and the wall time of the whole evaluation."""

    episodes: list[OnlineEpisode]
    wall_s: float
    progress_threshold: float = 0.9

    @property
    def finished(self) -> list[OnlineEpisode]:
        """Episodes that ran to their end (the success rate's denominator)."""
        return [e for e in self.episodes if e.result is not None]

    def summary(self) -> dict[str, object]:
        """Success on the oracle with its Wilson interval, the progress claim and its agreement (κ), median time
        to success, sync error, desync time and events, re-acquisitions, errors, median wall time per episode."""
        done = [e.result for e in self.finished if e.result is not None]
        n, k = len(done), sum(r.success for r in done)
        claimed = [bool(r.progress) and max(r.progress) > self.progress_threshold for r in done]
        agree = agreement([r.success for r in done], claimed)
        times = [r.success_time for r in done if r.success]
        sync = [x for e in self.finished for x in e.sync_errors]
        return {
            "episodes": n,
            "errors": len(self.episodes) - n,
            "success": k / n if n else math.nan,
            "success_ci95": list(wilson(k, n)),
            "successes": k,
            "progress_success": sum(claimed) / n if n else math.nan,
            "progress_agreement_kappa": agree.kappa,
            "progress_agreement_matrix": [list(row) for row in agree.matrix],
            "median_time_to_success_s": float(np.median(times)) if times else math.nan,
            "mean_final_coverage": float(np.mean([r.final.get("coverage", np.nan) for r in done])) if n else math.nan,
            "sync_error_mean_mm": float(np.mean(sync) * 1e3) if sync else math.nan,
            "sync_error_p95_mm": float(np.percentile(sync, 95) * 1e3) if sync else math.nan,
            "desynced_s": float(sum(r.desynced_s for r in done)),
            "desync_events": int(sum(sum(1 for _, what in r.desync_events if what == "fired") for r in done)),
            "reacquisitions": int(sum(r.reacquisitions for r in done)),
            "early_placements": int(sum(r.early_placements for r in done)),
            "vetoed_alarms": int(sum(r.vetoed_alarms for r in done)),
            "abandoned": int(sum(r.abandoned for r in done)),
            "tipped_episodes": int(sum(r.tipped_s > 0 for r in done)),
            **detector_summary(self.finished),
            **loop_summary(done),
            "median_episode_wall_s": float(np.median([r.wall_s for r in done])) if n else math.nan,
            "wall_s": self.wall_s,
        }


def loop_summary(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """The loop over all `results`: the fraction of real-time frames on time (NaN in lock-step), the visual
    corrections applied per simulated second, and the policy's mean answer time, ms (inline or beside the loop)."""
    timed = sum(r.timed_frames for r in results)
    seconds = sum(r.duration for r in results)
    calls = sum(r.policy_calls for r in results)
    return {
        "frames_on_time": 1.0 - sum(r.late_frames for r in results) / timed if timed else math.nan,
        "corrected_hz": sum(r.corrections for r in results) / seconds if seconds > 0 else math.nan,
        "policy_ms_mean": 1e3 * sum(r.policy_s for r in results) / calls if calls else math.nan,
    }


def detector_summary(episodes: Sequence[OnlineEpisode]) -> dict[str, float | int]:
    """The desync detector judged against the oracle (evaluation only) over finished online episodes, from each
    one's sync errors (the `SyncErrors` samples, every 6th frame: 10 Hz at 60 Hz) and its fired/re-armed events
    (`eval.sync.metrics.detector_score`: an oracle episode is > 2 cm for > `LOSS_MIN_S`, hit when flagged within
    `LOSS_MIN_S` of its start; an alarm is false when the error stays ≤ 2 cm throughout it and over `LOSS_MIN_S`
    before it).
    Sampled at 10 Hz, a loss shorter than ~0.2 s can go unseen. Returns the oracle episodes, hits, recall (1 with
    none), false alarms, false alarms per minute of in-sync running, and the longest silent loss (error > 2 cm
    while the detector said in sync), s."""
    found = hits = false = 0
    in_sync_min = longest = 0.0
    for episode in episodes:
        r = episode.result
        if r is None:
            continue
        n = min(len(r.times), len(episode.sync_errors))
        if n < 2:
            continue
        times, errors = np.asarray(r.times[:n]), np.asarray(episode.sync_errors[:n])
        flagged = np.zeros(n, dtype=bool)
        since = None
        for t, what in r.desync_events:
            if what == "fired":
                since = t
            elif since is not None:
                flagged |= (times >= since) & (times < t)
                since = None
        if since is not None:
            flagged |= times >= since
        score = detector_score(times, errors, flagged, min_duration=LOSS_MIN_S, within=LOSS_MIN_S)
        found += int(score["oracle_episodes"])
        hits += int(score["hits"])
        false += int(score["false_alarms"])
        in_sync_min += float(np.count_nonzero(errors <= LOSS_DISTANCE)) * float(np.median(np.diff(times))) / 60.0
        longest = max(longest, float(score["longest_silent_loss_s"]))
    return {
        "oracle_loss_episodes": found,
        "detector_hits": hits,
        "detector_recall": hits / found if found else 1.0,
        "false_alarms": false,
        "false_alarms_per_min": false / in_sync_min if in_sync_min > 0 else 0.0,
        "longest_silent_loss_s": longest,
    }


WorldFactory = Callable[[], Surrogate]


def online_env_config(
    correct_every: int = 1,
    replan_every: float | None = None,
    calibrate_at: Literal["goal", "start"] = "goal",
    max_held_s: float | None = 10.0,
    early_search: float | None = None,
    early_hold: int | None = None,
    alarm_check: bool = True,
) -> EnvConfig:
    """The environment of an online evaluation: the default runtime (correction and follower on), correcting on
    every `correct_every`-th frame (`RuntimeConfig.correct_every`), the twin's appearance calibrated at the task's
    goal or at the first start (`EnvConfig.calibrate_at`), an episode abandoned after `max_held_s` s of
    unbroken hold by the desync detector (`EnvConfig.max_held_s`); `early_search` (None: the runtime's default)
    sets `SupervisionConfig.early_search`, `early_hold` (None: its default) its `early_hold`; `alarm_check`
    False lets the detector fire on its evidence alone (`SupervisionConfig.alarm_check` None)."""
    supervision = SupervisionConfig()
    if not alarm_check:
        supervision = replace(supervision, alarm_check=None)
    if early_search is not None:
        supervision = replace(supervision, early_search=early_search)
    if early_hold is not None:
        supervision = replace(supervision, early_hold=early_hold)
    runtime = RuntimeConfig(correct_every=correct_every, supervision=supervision)
    return EnvConfig(runtime=runtime, replan_every=replan_every, calibrate_at=calibrate_at,
                     max_held_s=max_held_s)  # fmt: skip


def evaluate_online(
    task: Task,
    policy: Policy | PolicyFactory,
    starts: Sequence[StartState],
    trials: int = 1,
    max_seconds: float | None = None,
    config: EnvConfig = EnvConfig(),
    world: WorldFactory | SurrogateConfig = SurrogateConfig(camera_size=CAMERA_SIZE),
    observers: Sequence[EpisodeObserver] = (),
    progress: bool = True,
    journal: Path | None = None,
    journal_key: dict[str, object] | None = None,
    workers: int = 1,
) -> OnlineReport:
    """Run `policy` (one environment: single observations) online from every start × `trials` (see the module
    docstring). `world`: the surrogate's config, or a factory of started-or-not `Surrogate`s (tests inject
    faults with it). `observers` see every episode (a failed episode's `on_end` is not called).

    `journal`: a JSON-lines file that every episode is appended to as it ends; when it exists, its episodes
    are taken as done (not run again, and not shown to observers) and the rest run. Its first line holds
    `journal_key` (what was evaluated: checkpoint, start set, settings) and the number of starts; a journal
    written for another key raises `ValueError` (delete it to start over). `starts` are taken as the first N of
    one set: the same key with more starts extends the journal (only the further starts run).

    `workers` > 1: that many processes each run episodes with their own surrogate (one thread per pool), taking
    the next start as they finish one; `policy` must then be a picklable `PolicyFactory` (e.g.
    `CheckpointPolicy`), `world` a `SurrogateConfig`, and there are no observers. A lock-step pair of twin and
    surrogate keeps about one core busy, so two workers on two cores ran 1.6× the frames of one run alone
    (docs/decisions.md). A worker that crashes (not its surrogate: that is an episode error, as above) stops
    the evaluation with `RuntimeError`; the journal keeps every finished episode."""
    if trials < 1:
        raise ValueError(f"trials: must be ≥ 1, got {trials}")
    if workers < 1:
        raise ValueError(f"workers: must be ≥ 1, got {workers}")
    if not starts:
        raise ValueError("starts: need at least one start")
    wall0 = time.perf_counter()
    episodes = _read_journal(journal, journal_key, starts) if journal is not None else []
    done_before = {(e.start_index, e.trial) for e in episodes}
    todo = [(i, t) for t in range(trials) for i in range(len(starts)) if (i, t) not in done_before]
    if episodes:
        log.info("%s: %d episodes done before, %d to run", journal, len(episodes), len(todo))
    bar = tqdm(total=len(todo), desc="online eval", unit="episode", disable=not progress)

    def finished(episode: OnlineEpisode) -> None:
        episodes.append(episode)
        if journal is not None:
            with open(journal, "a") as f:
                f.write(json.dumps(episode.to_json(), default=_plain) + "\n")
        done = [e.result for e in episodes if e.result is not None]
        bar.update()
        bar.set_postfix(success=f"{sum(r.success for r in done)}/{len(done)}", errors=len(episodes) - len(done))

    try:
        if workers == 1 or len(todo) <= 1:
            if _is_factory(policy):
                policy = policy(task, 1)  # type: ignore[operator]
            make_world = (lambda: Surrogate(task.scene, world)) if isinstance(world, SurrogateConfig) else world
            runner = _EpisodeRunner(task, policy, config, make_world, max_seconds, observers)  # type: ignore[arg-type]
            try:
                for i, trial in todo:
                    finished(runner.run(starts[i], i, trial))
            finally:
                runner.close()
        else:
            if not _is_factory(policy) or not isinstance(world, SurrogateConfig) or observers:
                raise ValueError("workers > 1: need a picklable policy factory (e.g. CheckpointPolicy), a "
                                 "SurrogateConfig and no observers")  # fmt: skip
            _run_workers(task, policy, list(starts), todo, max_seconds, config, world, workers, finished)  # type: ignore[arg-type]
    finally:
        bar.close()
    order = {(i, t): n for n, (t, i) in enumerate((t, i) for t in range(trials) for i in range(len(starts)))}
    episodes.sort(key=lambda e: order.get((e.start_index, e.trial), len(order)))
    return OnlineReport(episodes, time.perf_counter() - wall0)


def _is_factory(policy: object) -> bool:
    return callable(policy) and not hasattr(policy, "act")


class _EpisodeRunner:
    """Online episodes one after another on one surrogate (reset between them), a fresh one after a failure."""

    def __init__(
        self,
        task: Task,
        policy: Policy,
        config: EnvConfig,
        make_world: WorldFactory,
        max_seconds: float | None,
        observers: Sequence[EpisodeObserver] = (),
    ) -> None:
        self.task, self.policy, self.config, self.make_world = task, policy, config, make_world
        self.max_seconds, self.observers = max_seconds, observers
        self.surrogate: Surrogate | None = None
        self.env: Env | None = None

    def run(self, start: StartState, index: int, trial: int) -> OnlineEpisode:
        if self.surrogate is None:
            self.surrogate = self.make_world().start()
            self.env = Env(self.task, self.config, self.surrogate)
        assert self.env is not None
        sync = SyncErrors()
        try:
            result = run_episode(self.env, self.policy, start, self.max_seconds, [sync, *self.observers])
            return OnlineEpisode(index, trial, result, None, sync.errors)
        except SurrogateError as err:
            log.warning("start %d, trial %d: the surrogate failed (%s); a fresh one takes over", index, trial, err)
            self.close()
            return OnlineEpisode(index, trial, None, f"{type(err).__name__}: {err}", sync.errors)

    def close(self) -> None:
        if self.surrogate is not None:
            self.surrogate.close()
        self.surrogate, self.env = None, None


def _worker(
    number: int,
    task: Task,
    factory: PolicyFactory,
    starts: list[StartState],
    max_seconds: float | None,
    config: EnvConfig,
    world: SurrogateConfig,
    inbox: Any,
    outbox: Any,
) -> None:
    """Worker `number` of `_run_workers` (`util.workers.serve`): runs each (start index, trial) pair it is given
    on its own surrogate, sending ("done", number, the episode as JSON)."""
    import torch

    from realissim.util.workers import Send, serve

    torch.set_num_threads(1)

    @contextmanager
    def session(send: Send) -> Iterator[Callable[[tuple[int, int]], None]]:
        runner = _EpisodeRunner(task, factory(task, 1), config, lambda: Surrogate(task.scene, world), max_seconds)
        try:

            def run(item: tuple[int, int]) -> None:
                episode = runner.run(starts[item[0]], *item)
                send("done", json.loads(json.dumps(episode.to_json(), default=_plain)))

            yield run
        finally:
            runner.close()

    serve(number, inbox, outbox, session)


def _run_workers(
    task: Task,
    factory: PolicyFactory,
    starts: list[StartState],
    todo: list[tuple[int, int]],
    max_seconds: float | None,
    config: EnvConfig,
    world: SurrogateConfig,
    workers: int,
    finished: Callable[[OnlineEpisode], None],
) -> None:
    """`todo` across `workers` processes (`util.workers.WorkerPool` of `_worker`), each finished episode handed
    to `finished` as it comes; RuntimeError if a worker fails."""
    from realissim.util.workers import WorkerError, WorkerPool

    pool = WorkerPool(_worker, (task, factory, starts, max_seconds, config, world), min(workers, len(todo)),
                      "online-eval")  # fmt: skip
    pool.put(todo)
    pool.close_inbox()
    remaining = len(todo)
    with terminate_raises(), ending(pool.processes, lambda: remaining == 0):
        pool.start()
        while remaining:
            try:
                message = pool.receive()
            except WorkerError as err:
                raise RuntimeError(f"online evaluation: {err}; {remaining} episodes were left") from None
            if message is not None and message[0] == "done":
                finished(OnlineEpisode.from_json(message[2], starts))
                remaining -= 1


def _plain(value: object) -> object:
    """JSON for numpy scalars (a task's metrics may hold them)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _read_journal(path: Path, key: dict[str, object] | None, starts: Sequence[StartState]) -> list[OnlineEpisode]:
    """The episodes a journal holds for `starts` (writing its header when it is new); see `evaluate_online`.
    `starts` are taken as the first N of the set the journal was written for, so the same key with more starts
    extends the journal (its header then counts them) and with fewer reads only theirs."""
    header = {"journal_key": key, "starts": len(starts)}
    text = json.dumps(header, default=str)
    if not path.exists() or path.stat().st_size == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        return []
    lines = path.read_text().splitlines()
    written = json.loads(lines[0])
    if written.get("journal_key") != json.loads(text)["journal_key"]:
        raise ValueError(f"{path}: this journal was written for {lines[0]}, not {text}; delete it to start over")
    if int(written.get("starts", 0)) < len(starts):  # extended: the header counts the starts it may now hold
        lines[0] = text
        path.write_text("\n".join(lines) + "\n")
    episodes = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            row = json.loads(line)
            if int(row["start_index"]) >= len(starts):
                continue  # one of the journal's further starts, not asked for this time
            episodes.append(OnlineEpisode.from_json(row, starts))
        except (ValueError, KeyError, TypeError, IndexError) as err:
            if n == len(lines):  # a line cut off by a crash: that episode runs again
                log.warning("%s: line %d is incomplete (%s); its episode runs again", path, n, err)
                path.write_text("\n".join(lines[:-1]) + "\n")
                break
            raise ValueError(f"{path}: line {n} is not an episode ({err})") from err
    return episodes


def write_online_report(report: OnlineReport, out: Path, about: dict[str, object]) -> None:
    """`out`/results.json (the summary and `about`), `out`/episodes.csv (one row per episode, errors too) and
    the figures of `eval.report.plot_episodes` over the finished episodes."""
    import csv
    import json

    from realissim.eval.report import plot_episodes

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(about | report.summary(), indent=2, default=float))
    rows = [e.row() for e in report.episodes]
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with open(out / "episodes.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    plot_episodes([e.result for e in report.finished if e.result is not None], out, report.progress_threshold)
