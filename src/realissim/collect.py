"""`realissim collect`: record demonstrations of a task through the twin into an episode store.

Each episode starts from the task's start sampler, seeded by (seed, episode index), so a dataset's starts
never repeat across runs and a re-run continues the sequence; it runs the policy through `run_episode` (online:
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the heavy modules are imported where used: `realissim --help` stays fast
    from realissim.envs import Env
    from realissim.expert.disturb import DisturbConfig
    from realissim.policy.base import Policy
    from realissim.real.interfaces import RealWorld
    from realissim.tasks import Task
    from realissim.twin.randomize import DynamicsRandomization, ObjectDraw

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectConfig:
    """What to collect, and how."""

    task: str = "pusht"
    """Task name in the registry."""
    episodes: int = 10
    """Episodes to add to the dataset."""
    out: Path = Path("data/pusht_expert")
    """The dataset (created if missing; appended to otherwise)."""
    online: bool = False
    """Through a surrogate real world (default gap unless `gap`), correction and follower on, lock-step."""
    gap: Path | None = None
    """Reality-gap profile JSON for the online world (None: the default profile)."""
    policy: Literal["expert", "teleop"] = "expert"
    """Who demonstrates: the task's expert, or a human in the browser (`realissim teleop`)."""
    seed: int = 0
    """Seed of the start sampler (each episode draws its start from (seed, episode index)) and of the world."""
    max_seconds: float = 60.0
    """Simulated time limit per episode, s."""
    record_images: bool = False
    """Online: also store the real cameras' frames (compressed)."""
    camera_size: tuple[int, int] = (160, 90)
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
    randomize_friction: tuple[float, float] = (0.6, 1.4)
    """Dynamics randomisation: range of the sliding-friction scale (log-uniform)."""
    randomize_mass: tuple[float, float] = (0.8, 1.35)
    """Dynamics randomisation: range of the mass scale (log-uniform; inertia alike)."""
    randomize_com: float = 0.008
    """Dynamics randomisation: largest planar centre-of-mass displacement, m (uniform over the disc)."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        if self.disturb_every and (self.online or self.policy != "expert"):
            raise ValueError("disturb_every: disturbed demonstrations are collected offline, by the expert")
        _ = self.disturb  # validates the disturbance options
        if self.episodes < 0:
            raise ValueError(f"episodes: must be ≥ 0, got {self.episodes}")
        if not (self.max_seconds > 0 and math.isfinite(self.max_seconds)):
            raise ValueError(f"max_seconds: must be a positive number, got {self.max_seconds}")
        if self.gap is not None and not self.online:
            raise ValueError("gap: a reality-gap profile needs --online")
        if self.record_images and not self.online:
            raise ValueError("record_images: an offline twin has no real cameras (its views can be rendered later)")
        if self.randomize and (self.online or self.policy != "expert"):
            raise ValueError("randomize: dynamics are randomised in the twin, offline, for the expert")
        _ = self.randomization  # validates the ranges

    @property
    def randomization(self) -> DynamicsRandomization:
        """The dynamics randomisation's ranges."""
        from realissim.twin.randomize import DynamicsRandomization

        return DynamicsRandomization(friction=self.randomize_friction, mass=self.randomize_mass,
                                     com_offset=self.randomize_com)  # fmt: skip

    @property
    def disturb(self) -> DisturbConfig:
        """The disturbance settings."""
        from realissim.expert.disturb import DisturbConfig

        return DisturbConfig(every=self.disturb_every, xy=self.disturb_xy, yaw=self.disturb_yaw,
                             max_count=self.disturb_max)  # fmt: skip


def make_expert(task: Task, config: CollectConfig | None = None) -> Policy:
    """The expert policy of `task`, with the expert settings of `config` (None: the expert's defaults)."""
    if task.name == "pusht":
        from realissim.expert.pusht import PushTExpert, PushTExpertConfig

        given = {} if config is None else {"travel_cost": config.expert_travel_cost, "reseed": config.expert_reseed}
        overrides = {name: value for name, value in given.items() if value is not None}
        return PushTExpert(task.scene, replace(PushTExpertConfig(), **overrides))
    raise ValueError(f"no expert for task {task.name!r}")


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
    surrogate = SurrogateConfig(gap=config.gap, seed=config.seed, camera_size=config.camera_size, mode="lockstep")
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
        from realissim.expert.pusht import PushTExpert
        from realissim.twin.randomize import ObjectDynamics

        self.config = config.randomization
        self.names = [o.name for o in env.task.scene.objects]
        models = [env.runtime.twin.model]
        if isinstance(policy, PushTExpert):  # the expert plans in its own copy of the objects' physics
            models.append(policy.model.model)
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


def collect(config: CollectConfig, policy: Policy | None = None) -> CollectReport:
    """Collect `config.episodes` episodes of `policy` (None: the task's expert) into `config.out`."""
    import numpy as np
    from tqdm import tqdm

    from realissim.data.recorder import EpisodeRecorder, meta_for_env
    from realissim.data.store import Dataset, DatasetWriter
    from realissim.envs import Env, EnvConfig
    from realissim.eval.episode import run_episode
    from realissim.tasks import make

    if config.policy == "teleop":
        raise ValueError("collect: teleoperated episodes are recorded from the browser, see `realissim teleop`")
    task = make(config.task)
    policy = make_expert(task, config) if policy is None else policy
    report = CollectReport()
    wall0 = time.perf_counter()
    with open_world(task, config) as world:
        env = Env(task, EnvConfig(sleep=False), world)  # demonstrations in the twin as it runs online
        meta = meta_for_env(env, "expert", gap_name(config.gap) if config.online else None, config.record_images)
        with DatasetWriter(config.out, meta) as writer:
            first = writer.next_index
            recorder = EpisodeRecorder(writer, record_images=config.record_images)
            randomizer = _Randomizer(config, env, policy) if config.randomize else None
            extras: list[Callable[[], dict[str, object]]] = [] if randomizer is None else [randomizer.extra]
            disturber = None
            if config.disturb.enabled:
                from realissim.data.schema import DISTURBANCES_KEY
                from realissim.expert.disturb import Disturber

                disturber = Disturber(policy, env, task, config.disturb)  # type: ignore[arg-type]
                extras.append(lambda: {DISTURBANCES_KEY: list(disturber.times)})
                policy = disturber
            if extras:
                recorder.extra = lambda: {key: value for extra in extras for key, value in extra().items()}
            bar = tqdm(range(first, first + config.episodes), desc="collect", unit="episode",
                       disable=not config.progress)  # fmt: skip
            for index in bar:
                seed = int(np.random.SeedSequence([config.seed, index]).generate_state(1)[0])
                recorder.seed = seed
                if disturber is not None:
                    disturber.seed = seed
                if randomizer is not None:
                    randomizer.draw(config.seed, index)
                result = run_episode(env, policy, None, config.max_seconds, [recorder], seed=seed)
                report.added += 1
                report.successes += int(result.success)
                if result.success:
                    report.success_times.append(result.success_time)
                bar.set_postfix(success=f"{report.successes}/{report.added}")
                log.info("episode %d: %s in %.1f s (coverage %.3f)", index, "success" if result.success else "FAILED",
                         result.duration, result.final.get("coverage", math.nan))  # fmt: skip
            if randomizer is not None:
                randomizer.restore()
    report.wall_s = time.perf_counter() - wall0
    stored = Dataset(config.out, include_failed=True)
    report.total_episodes = len(stored.all_episodes)
    report.total_successes = sum(e.success for e in stored.all_episodes)
    return report
