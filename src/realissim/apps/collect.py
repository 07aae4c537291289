"""`realissim collect`: record demonstrations of a task through the twin into an episode store.

Each episode starts from the task's start sampler, seeded by (seed, episode index), so a dataset's starts
never repeat across runs and a re-run continues the sequence — or, with `starts`, from the starts of a start-set
file in order (targeted collection: a failure miner's set or a user's; each episode records the file and its
place in it, `data.schema.START_SET_KEY`); it runs the policy through `run_episode` (online:
over a surrogate real world with correction and follower on, lock-step) and the recorder appends it to the
dataset in one piece. Failed episodes are kept, marked failed (readers exclude them by default). Running the
command again on the same dataset appends `episodes` more.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from realissim.real.surrogate.process import CAMERA_SIZE
from realissim.util.signals import terminate_deferred, terminate_raises

if TYPE_CHECKING:  # the heavy modules are imported where used: `realissim --help` stays fast
    from realissim.data.schema import DatasetMeta
    from realissim.data.store import DatasetWriter
    from realissim.envs import Env
    from realissim.eval.episode import EpisodeResult
    from realissim.expert.disturb import DisturbConfig
    from realissim.policy.base import Policy
    from realissim.real.interfaces import RealWorld
    from realissim.tasks import Task
    from realissim.tasks.base import StartSetFile
    from realissim.twin.randomize import DynamicsRandomization, ObjectDraw

log = logging.getLogger(__name__)


class CollectError(RuntimeError):
    """A parallel collection's worker failed (the episodes finished before are in the dataset)."""


@dataclass(frozen=True)
class CollectConfig:
    """What to collect, and how."""

    task: str = "pusht"
    """Task name in the registry."""
    episodes: int | None = None
    """Episodes to add to the dataset (None: 10, or with `starts` one for each of its starts)."""
    starts: Path | None = None
    """A start-set file in the shipped format (`tasks.read_start_file`: a failure miner's, or your own): the run's
    k-th episode starts from its k-th start instead of the start sampler (at most as many episodes as it has
    starts), and records the file and the start's place in it (`data.schema.START_SET_KEY`)."""
    out: Path = Path("data/pusht_expert")
    """The dataset (created if missing; appended to otherwise)."""
    online: bool = False
    """Through a surrogate real world (default gap unless `gap`), correction and follower on, lock-step."""
    gap: Path | None = None
    """Reality-gap profile JSON for the online world (None: the default profile)."""
    realtime: bool = False
    """Online: on the wall clock (the surrogate paces itself at the frame rate; the correction runs beside the loop,
    `RuntimeConfig.correct_beside`) instead of lock-step. A real-time twin and surrogate need about two cores: with
    more workers than half the cores, each lags."""
    policy: Literal["expert", "teleop", "probe"] = "expert"
    """Who acts: the task's expert, a human in the browser (`realissim teleop`), or "probe": fast strokes that leave
    the object sliding free, for system identification (`expert.probe`, `realissim sysid`; online)."""
    seed: int = 0
    """Seed of the start sampler (each episode draws its start from (seed, episode index)) and of the world."""
    max_seconds: float | None = None
    """Simulated time limit per episode, s (None: the task's, `Task.max_seconds`)."""
    record_images: bool = False
    """Online: also store the real cameras' frames (compressed)."""
    camera_size: tuple[int, int] = CAMERA_SIZE
    """Online: the surrogate's camera size, px (width, height)."""
    disturb_every: float = 0.0
    """Disturbed demonstrations (offline expert only): mean simulated time between moves of the object while the
    expert works, s (0: none); see `expert.disturb`."""
    disturb_xy: float = 0.10
    """Disturbed demonstrations: standard deviation of a move's planar shift, m per axis."""
    disturb_yaw: float = 1.0
    """Disturbed demonstrations: standard deviation of a move's yaw change, rad."""
    expert_travel_cost: float | None = None
    """PushT expert: cost per metre of travel to a push's approach point, m/m (None: `PushTExpertConfig`'s,
    0.02). With 0.06 and `expert_reseed` the clone scored 68 % against 66 % for the default expert on the same
    disturbed starts — level (docs/results.md)."""
    expert_reseed: bool | None = None
    """PushT expert: the same refinement draws at every decision, so the same state gets the same push (None:
    `PushTExpertConfig`'s, off; measured with `expert_travel_cost`, no gain)."""
    disturb_max: int = 3
    """Disturbed demonstrations: moves per episode at most."""
    randomize: bool = False
    """Dynamics randomisation (offline only): every episode draws each object's friction, mass and centre of mass
    (`twin.randomize`), applies the draw to the twin (and to the expert's push model, so the expert plans with the
    dynamics it meets) and records it in the episode's `extra["dynamics"]`. A policy cloned from such
    demonstrations has seen the physical reality gap (docs/results.md)."""
    randomize_from: Path | None = None
    """Dynamics randomisation (offline, the expert) with ranges from measurements: a twin-parameter file
    (`realissim sysid`'s sysid.json) — each identified quantity drawn within its value ± 2 × its 95 % half-width,
    the others kept at the description (`twin.identified.IdentifiedDynamics.randomization`). Replaces the
    `randomize_*` ranges; implies `randomize`."""
    randomize_friction: tuple[float, float] = (0.6, 1.4)
    """Dynamics randomisation: range of the sliding-friction scale (log-uniform)."""
    randomize_mass: tuple[float, float] = (0.8, 1.35)
    """Dynamics randomisation: range of the mass scale (log-uniform; inertia alike)."""
    randomize_com: float = 0.008
    """Dynamics randomisation: largest planar centre-of-mass displacement, m (uniform over the disc)."""
    progress: bool = True
    """Show a progress bar."""
    workers: int = 1
    """Episodes collected at once, each worker a process with its own twin (online: and its own surrogate); the
    expert only. An online lock-step pair of twin and surrogate keeps about one core busy: two workers on two
    cores collected 20 online demonstrations with images in 13.2 against 19.7 min. Each episode depends on its
    index alone (start, dynamics and disturbances seeded by it), and they are stored in index order."""

    def __post_init__(self) -> None:
        if self.disturb_every and (self.online or self.policy != "expert"):
            raise ValueError("disturb_every: disturbed demonstrations are collected offline, by the expert")
        _ = self.disturb  # validates the disturbance options
        if self.episodes is not None and self.episodes < 0:
            raise ValueError(f"episodes: must be ≥ 0, got {self.episodes}")
        if self.workers < 1:
            raise ValueError(f"workers: must be ≥ 1, got {self.workers}")
        if self.max_seconds is not None and not (self.max_seconds > 0 and math.isfinite(self.max_seconds)):
            raise ValueError(f"max_seconds: must be a positive number, got {self.max_seconds}")
        if self.gap is not None and not self.online:
            raise ValueError("gap: a reality-gap profile needs --online")
        if self.realtime and not self.online:
            raise ValueError("realtime: an offline twin has no wall clock to keep (use --online)")
        if self.record_images and not self.online:
            raise ValueError("record_images: an offline twin has no real cameras (its views can be rendered later)")
        if self.randomize_from is not None and not self.randomize:
            object.__setattr__(self, "randomize", True)
        if self.randomize and (self.online or self.policy != "expert"):
            raise ValueError("randomize: dynamics are randomised in the twin, offline, for the expert")
        _ = self.randomization  # validates the ranges

    @property
    def randomization(self) -> DynamicsRandomization:
        """The dynamics randomisation's ranges."""
        from realissim.twin.randomize import DynamicsRandomization

        if self.randomize_from is not None:
            from realissim.twin.identified import IdentifiedDynamics

            return IdentifiedDynamics.load(self.randomize_from).randomization(widen=2.0)
        return DynamicsRandomization(friction=self.randomize_friction, mass=self.randomize_mass,
                                     com_offset=self.randomize_com)  # fmt: skip

    @property
    def disturb(self) -> DisturbConfig:
        """The disturbance settings."""
        from realissim.expert.disturb import DisturbConfig

        return DisturbConfig(every=self.disturb_every, xy=self.disturb_xy, yaw=self.disturb_yaw,
                             max_count=self.disturb_max)  # fmt: skip


def make_expert(task: Task, config: CollectConfig | None = None) -> Policy:
    """The expert policy of `task` (`Task.expert`), with the expert settings of `config` that are given (None:
    the expert's defaults)."""
    from realissim.expert.registry import make_expert as task_expert

    if config is not None and config.policy == "probe":
        from realissim.expert.probe import ProbePushes

        return ProbePushes(task.scene)
    given = {} if config is None else {"travel_cost": config.expert_travel_cost, "reseed": config.expert_reseed}
    return task_expert(task, **{name: value for name, value in given.items() if value is not None})


def gap_name(gap: Path | None) -> str:
    """The name a dataset records for a gap profile: its file's stem, or "default"."""
    return "default" if gap is None else gap.stem


@contextlib.contextmanager
def open_world(task: Task, config: CollectConfig) -> Iterator[RealWorld | None]:
    """The surrogate real world for an online collection (None offline), closed on exit."""
    if not config.online:
        yield None
        return
    from realissim.real.surrogate import Surrogate, SurrogateConfig, load_gap

    if config.gap is not None:
        load_gap(config.gap)  # fail here, naming the field, rather than in the world's process
    mode = "realtime" if config.realtime else "lockstep"
    surrogate = SurrogateConfig(gap=config.gap, seed=config.seed, camera_size=config.camera_size, mode=mode)
    with Surrogate(task.scene, surrogate) as world:
        yield world


@dataclass
class CollectReport:
    """What a collection did: episodes added (successful, failed), the dataset's totals, time."""

    added: int = 0
    successes: int = 0
    total_episodes: int = 0
    total_successes: int = 0
    success_times: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    def add(self, result: EpisodeResult) -> None:
        """Count one episode added."""
        self.added += 1
        self.successes += int(result.success)
        if result.success:
            self.success_times.append(result.success_time)

    def as_dict(self) -> dict[str, float | int]:
        import numpy as np

        times = self.success_times
        return {
            "added": self.added,
            "added_successes": self.successes,
            "added_failed": self.added - self.successes,
            "dataset_episodes": self.total_episodes,
            "dataset_successes": self.total_successes,
            "median_time_to_success_s": float(np.median(times)) if times else math.nan,
            "episodes_per_min": 60.0 * self.added / self.wall_s if self.wall_s > 0 else math.nan,
        }


class _Randomizer:
    """Per episode: draws the objects' dynamics and applies them to the twin and the expert's push model."""

    def __init__(self, config: CollectConfig, env: Env, policy: Policy) -> None:
        from realissim.policy.base import PlansInPhysics
        from realissim.twin.randomize import ObjectDynamics

        self.config = config.randomization
        self.names = [o.name for o in env.task.scene.objects]
        models = [env.runtime.twin.model]
        if isinstance(policy, PlansInPhysics):  # e.g. the expert plans in its own copy of the objects' physics
            models.extend(policy.planning_models())
        self.targets = [ObjectDynamics(m, self.names) for m in models]
        self.draws: tuple[ObjectDraw, ...] = ()

    def draw(self, seed: int, index: int) -> None:
        """Draw episode `index`'s dynamics from (seed, index) and apply them."""
        import numpy as np

        from realissim.twin.randomize import draw_dynamics

        rng = np.random.default_rng(np.random.SeedSequence([seed, index, 0x0D1]))
        self.draws = draw_dynamics(self.config, self.names, rng)
        for target in self.targets:
            target.apply(self.draws)
        log.debug("episode %d dynamics: %s", index, self.draws)

    def restore(self) -> None:
        for target in self.targets:
            target.restore()

    def extra(self) -> dict[str, object]:
        from realissim.data.schema import DYNAMICS_KEY

        return {DYNAMICS_KEY: {d.name: d.as_dict() for d in self.draws}}


class _Collector:
    """Runs and records episodes of `policy` in `env` into `writer`: episode `index` (its place in the dataset's
    sequence) starts from the start sampler seeded by (seed, index), with its dynamics (`randomize`) and
    disturbances drawn from the same, so an episode depends on its index alone, not on who collects it."""

    def __init__(self, config: CollectConfig, env: Env, policy: Policy, writer: DatasetWriter) -> None:
        from realissim.data.recorder import EpisodeRecorder

        self.config, self.env = config, env
        self.recorder = EpisodeRecorder(writer, record_images=config.record_images)
        self.randomizer = _Randomizer(config, env, policy) if config.randomize else None
        extras: list[Callable[[], dict[str, object]]] = [] if self.randomizer is None else [self.randomizer.extra]
        self.starts: StartSetFile | None = None
        self._position = 0
        if config.starts is not None:
            from realissim.data.schema import START_SET_KEY
            from realissim.tasks import read_start_file

            self.starts = header = read_start_file(config.starts, env.task)
            file = str(config.starts)
            extras.append(lambda: {START_SET_KEY: {"file": file, "version": header.version, "seed": header.seed,
                                                   "index": self._position}})  # fmt: skip
        self.disturber = None
        if config.disturb.enabled:
            from realissim.data.schema import DISTURBANCES_KEY
            from realissim.expert.disturb import Disturber

            self.disturber = disturber = Disturber(policy, env, env.task, config.disturb)  # type: ignore[arg-type]
            extras.append(lambda: {DISTURBANCES_KEY: list(disturber.times)})
            policy = disturber
        if extras:
            self.recorder.extra = lambda: {key: value for extra in extras for key, value in extra().items()}
        self.policy = policy

    def run(self, index: int, position: int = 0) -> EpisodeResult:
        """Run episode `index` and append it to the writer (`recorder.last` is its stored info); with a start-set
        file, from its start at `position` (the episode's place in this run)."""
        import numpy as np

        from realissim.eval.episode import run_episode

        seed = int(np.random.SeedSequence([self.config.seed, index]).generate_state(1)[0])
        self.recorder.seed = seed
        if self.disturber is not None:
            self.disturber.seed = seed
        if self.randomizer is not None:
            self.randomizer.draw(self.config.seed, index)
        start = None
        if self.starts is not None:
            start, self._position = self.starts.starts[position], position
        return run_episode(
            self.env,
            self.policy,
            start,
            self.config.max_seconds,
            [self.recorder],
            seed=seed,
            stop_on_success=self.config.policy != "probe",
        )  # (probes are not trying to succeed)

    def close(self) -> None:
        if self.randomizer is not None:
            self.randomizer.restore()


@contextlib.contextmanager
def _recording(
    config: CollectConfig, task: Task, policy: Policy, out: Path, announce: Callable[[DatasetMeta], None] | None = None
) -> Iterator[_Collector]:
    """One collecting process's world (online: a surrogate), `Env`, writer of the dataset at `out` and collector;
    `announce` is given the dataset's meta before the writer opens the dataset."""
    from realissim.data.recorder import meta_for_env
    from realissim.data.store import DatasetWriter
    from realissim.envs import Env, EnvConfig

    with open_world(task, config) as world:
        env = Env(task, EnvConfig(sleep=False), world)  # demonstrations in the twin as it runs online
        meta = meta_for_env(env, config.policy, gap_name(config.gap) if config.online else None, config.record_images)
        if announce is not None:
            announce(meta)
        with DatasetWriter(out, meta) as writer:
            collector = _Collector(config, env, policy, writer)
            try:
                yield collector
            finally:
                collector.close()


def _log_episode(index: int, result: EpisodeResult) -> None:
    log.info("episode %d: %s in %.1f s (coverage %.3f)", index, "success" if result.success else "FAILED",
             result.duration, result.final.get("coverage", math.nan))  # fmt: skip


def collect(config: CollectConfig, policy: Policy | None = None) -> CollectReport:
    """Collect `config.episodes` episodes of `policy` (None: the task's expert) into `config.out`; with
    `config.workers` > 1 (the expert only), in that many processes at once (`_collect_parallel`; CollectError
    if a worker fails, every episode finished before kept)."""
    from tqdm import tqdm

    from realissim.data.store import Dataset
    from realissim.tasks import make

    if config.policy == "teleop":
        raise ValueError("collect: teleoperated episodes are recorded from the browser, see `realissim teleop`")
    if config.workers > 1 and policy is not None:
        raise ValueError("workers > 1: each worker builds the task's expert; pass no policy (or use one worker)")
    task = make(config.task)
    count = episode_count(config, task)
    report = CollectReport()
    wall0 = time.perf_counter()
    if config.workers > 1 and count > 1:
        _collect_parallel(config, report, count)
    else:
        policy = make_expert(task, config) if policy is None else policy
        with _recording(config, task, policy, config.out) as collector:
            first = collector.recorder.writer.next_index
            bar = tqdm(range(first, first + count), desc="collect", unit="episode",
                       disable=not config.progress)  # fmt: skip
            for index in bar:
                result = collector.run(index, index - first)
                report.add(result)
                bar.set_postfix(success=f"{report.successes}/{report.added}")
                _log_episode(index, result)
    report.wall_s = time.perf_counter() - wall0
    stored = Dataset(config.out, include_failed=True)
    report.total_episodes = len(stored.all_episodes)
    report.total_successes = sum(e.success for e in stored.all_episodes)
    return report


def episode_count(config: CollectConfig, task: Task) -> int:
    """Episodes the run adds: `config.episodes`, or 10, or with a start-set file one per start (ValueError if
    `episodes` asks for more than it holds)."""
    from realissim.tasks import read_start_file

    if config.starts is None:
        return 10 if config.episodes is None else config.episodes
    held = read_start_file(config.starts, task).count
    if config.episodes is not None and config.episodes > held:
        raise ValueError(f"episodes: {config.episodes} asked, but the start set {config.starts} holds {held} starts")
    return held if config.episodes is None else config.episodes


def _collect_parallel(config: CollectConfig, report: CollectReport, episodes: int) -> None:
    """`episodes` expert episodes in `config.workers` processes (`realissim.util.workers.WorkerPool`), each with
    its own world (online: its own surrogate, same seed) and its own part dataset beside `config.out`; every
    finished episode is moved into `config.out` (`DatasetWriter.move_in`) in the order of its index, so the
    dataset is what one process would have collected, up to the twin's appearance calibration, which an online
    worker runs at its own first start. If a worker fails, the episodes already finished are still moved in
    (those after the failed one take the next places) and CollectError names the failure."""
    import shutil
    import uuid

    from tqdm import tqdm

    from realissim.data.store import DatasetWriter
    from realissim.util.workers import WorkerError, WorkerPool

    if config.gap is not None:
        from realissim.real.surrogate import load_gap

        load_gap(config.gap)  # fail here, naming the field, rather than in a worker
    count = min(config.workers, episodes)
    tag = uuid.uuid4().hex[:8]
    parts = [config.out.parent / f".{config.out.name}.part-{tag}-{w}" for w in range(count)]
    pool = WorkerPool(_collect_worker, (config, parts), count, "collect")
    writer: DatasetWriter | None = None
    done: dict[int, tuple[Path, int]] = {}
    waiting: set[int] = set()
    failure: str | None = None
    bar = tqdm(total=episodes, desc="collect", unit="episode", disable=not config.progress)
    with terminate_raises():  # SIGTERM unwinds like Ctrl-C: the finished episodes are kept, the workers end
        try:
            pool.start()
            while (writer is None or waiting) and failure is None:
                try:
                    message = pool.receive()
                except WorkerError as err:
                    failure = str(err)
                    continue
                if message is None:
                    continue
                kind, number, payload = message
                if kind == "meta":
                    if writer is None:  # the first worker's world describes the dataset: open it, hand out the work
                        writer = DatasetWriter(config.out, payload)
                        first = writer.next_index
                        waiting = set(range(first, first + episodes))
                        pool.put([(index, index - first) for index in sorted(waiting)])  # (its place in the run)
                        pool.close_inbox()
                else:
                    index, part_index, result = payload
                    done[index] = (parts[number], part_index)
                    waiting.discard(index)
                    report.add(result)
                    bar.update()
                    bar.set_postfix(success=f"{report.successes}/{report.added}")
                    _log_episode(index, result)
                    assert writer is not None
                    while done and min(done) <= min(waiting, default=math.inf):  # the next in order: move it in
                        with terminate_deferred():  # whole or not at all
                            writer.move_in(*done[min(done)])
                            del done[min(done)]
        finally:
            with terminate_deferred():  # a second SIGTERM does not cut the cleanup short
                bar.close()
                if failure is None:
                    pool.close_inbox()  # interrupted before the work was handed out: let the workers end
                try:
                    if writer is not None:
                        for index in sorted(done):  # after a failure or SIGTERM: keep every finished episode
                            writer.move_in(*done[index])
                finally:
                    if writer is not None:
                        writer.close()
                    finished = failure is None and writer is not None and not waiting
                    pool.end(wait=finished)  # interrupted: terminated at once
                    for part in parts:
                        shutil.rmtree(part, ignore_errors=True)
    if failure is not None:
        raise CollectError(f"{failure}; the {report.added} episodes finished are in {config.out}")


def _collect_worker(number: int, config: CollectConfig, parts: list[Path], inbox: Any, outbox: Any) -> None:
    """Worker `number` of `_collect_parallel` (`realissim.util.workers.serve`): sends ("meta", number, the dataset meta
    of its world), then records each episode index it is given into its part dataset `parts[number]`, sending
    ("done", number, (index, its index in the part, result))."""
    from realissim.util.workers import Send, serve

    @contextlib.contextmanager
    def session(send: Send) -> Iterator[Callable[[tuple[int, int]], None]]:
        from realissim.tasks import make

        task = make(config.task)
        with _recording(config, task, make_expert(task, config), parts[number], lambda m: send("meta", m)) as rec:

            def record(item: tuple[int, int]) -> None:
                index, position = item
                result = rec.run(index, position)
                assert rec.recorder.last is not None
                send("done", (index, rec.recorder.last.index, result))

            yield record

    serve(number, inbox, outbox, session)
