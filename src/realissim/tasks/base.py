"""The `Task` interface: a scene, its goal, a seeded start sampler with fixed named start sets, and a judge.

A task is what every episode runs against (docs/design.md §7). It owns its `SceneSpec`, proposes start states
from a `np.random.Generator` and rejects the unusable ones, ships fixed start sets as JSON beside this
module (`data/<task>_<version>.json`, the strict spec codec), and turns object poses into `TaskMetrics`.
Dependencies point down only: `spec/`, `assets/` and `twin/` (inverse kinematics), never the loop.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
from tqdm import tqdm

from realissim.spec.codec import to_dict
from realissim.spec.errors import SpecError
from realissim.spec.io import load_json, save_json
from realissim.spec.scene import GoalSpec, SceneSpec
from realissim.spec.state import StartState

log = logging.getLogger(__name__)

DATA_DIR = Path(__file__).with_name("data")
"""Where the shipped start sets live, one `<task>_<version>.json` each."""

ConfigT = TypeVar("ConfigT")


@dataclass(frozen=True)
class TaskMetrics:
    """How close the task's object sits to its goal pose (world frame, table plane)."""

    coverage: float
    """Fraction of the object's footprint lying on its goal footprint, in [0, 1]."""
    success: bool
    """Whether `coverage` exceeds the task's success threshold (strictly)."""
    pos_err: float
    """Planar (world xy) distance of the object's position from its goal position, m."""
    yaw_err: float
    """Absolute heading difference from the goal, rad, wrapped to [0, π]."""

    def as_dict(self) -> dict[str, float | bool]:
        """The metrics as plain JSON types, keyed by field name."""
        return {name: getattr(self, name) for name in _field_names(type(self))}


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names (looked up once per class: the judge asks for them several times a second)."""
    return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class StartSetSpec:
    """A named start set: `count` starts drawn by `Task.sample_start` from `np.random.default_rng(seed)`."""

    count: int
    seed: int


@dataclass(frozen=True)
class StartSetFile:
    """The JSON layout of a shipped start set: a header (task, version, seed, count) and the starts."""

    task: str
    version: str
    seed: int
    count: int
    starts: tuple[StartState, ...]


class Task(ABC, Generic[ConfigT]):
    """A task: `scene`, `goal`, a seeded start sampler, named start sets, and `evaluate` of object poses.

    Subclasses declare `name`, `config_type` (a frozen dataclass whose fields `make` overrides), `start_sets`,
    their roles and time limit, and their expert, and implement `_build_scene`, `propose_start`, `reject_reason`
    and `evaluate`.
    """

    name: ClassVar[str]
    config_type: ClassVar[type[Any]]
    start_sets: ClassVar[Mapping[str, StartSetSpec]] = {}
    roles: ClassVar[Mapping[str, str]] = {}
    """The start set (a version in `start_sets`) for each use: "test" (the offline score), "online" (the online
    score), "select" (choosing checkpoints and settings, so that "test" stays a clean test)."""
    max_seconds: ClassVar[float]
    """The time limit of one episode, simulated s."""
    expert: ClassVar[str | None] = None
    """The task's expert, as "module:attribute" of a callable (scene, **settings) → Policy (`expert.make_expert`);
    None: the task has none. (A string: the tasks sit below the experts in the layers.)"""

    def start_set_name(self, role: str) -> str:
        """The full name ("<task>/<version>") of the start set for `role`; KeyError naming the roles."""
        if role not in self.roles:
            raise KeyError(f"task {self.name!r}: no start set for {role!r} (roles: {', '.join(self.roles)})")
        return f"{self.name}/{self.roles[role]}"

    def __init__(self, config: ConfigT) -> None:
        self.config = config
        self.scene: SceneSpec = self._build_scene()

    @abstractmethod
    def _build_scene(self) -> SceneSpec:
        """The task's scene, from `self.config`."""

    @property
    def goal(self) -> tuple[GoalSpec, ...]:
        """The goal pose of each object that has one (world frame)."""
        return self.scene.goals

    @abstractmethod
    def evaluate(self, object_pos: np.ndarray, object_quat: np.ndarray) -> TaskMetrics:
        """Metrics of objects at positions (K, 3) m and orientations (K, 4) wxyz, the scene's object order."""

    @abstractmethod
    def propose_start(self, rng: np.random.Generator) -> StartState:
        """A candidate start drawn from `rng`, before rejection."""

    @abstractmethod
    def reject_reason(self, start: StartState) -> str | None:
        """Why `start` is unusable (e.g. already successful, out of the robot's reach), or None if it is fine."""

    def sample_start(self, rng: np.random.Generator, max_attempts: int = 10_000) -> StartState:
        """The first proposal from `rng` that is not rejected; deterministic for the generator's state.

        Raises RuntimeError after `max_attempts` rejections.
        """
        for attempt in range(max_attempts):
            start = self.propose_start(rng)
            reason = self.reject_reason(start)
            if reason is None:
                return start
            log.debug("%s: start %d rejected: %s", self.name, attempt, reason)
        raise RuntimeError(f"{self.name}: no acceptable start in {max_attempts} proposals")

    def start_set(self, version: str) -> tuple[StartState, ...]:
        """The shipped start set `version` (e.g. "eval-v1"), validated against its header and the scene.

        Raises KeyError (listing the known versions) for an unknown one, SpecError for a bad file.
        """
        spec = self.start_set_spec(version)
        return load_start_set(start_set_path(self.name, version), self, version, spec)

    def start_set_spec(self, version: str) -> StartSetSpec:
        """How start set `version` is drawn; KeyError listing the known versions for an unknown one."""
        try:
            return self.start_sets[version]
        except KeyError:
            known = ", ".join(self.start_sets) or "none"
            raise KeyError(f"task {self.name!r} has no start set {version!r}; known: {known}") from None

    def as_dict(self) -> dict[str, Any]:
        """The resolved task as plain JSON types: name, config and goal, to write next to its outputs."""
        return {"name": self.name, "config": to_dict(self.config), "goal": to_dict(self.goal)}


def configure(config_type: type[ConfigT], overrides: Mapping[str, Any]) -> ConfigT:
    """`config_type` with `overrides` applied to its defaults; ValueError naming any unknown field."""
    valid = [f.name for f in dataclasses.fields(config_type) if f.init]  # type: ignore[arg-type]
    unknown = [name for name in overrides if name not in valid]
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {config_type.__name__}; valid options: {', '.join(valid)}")
    return config_type(**overrides)


def generate_start_set(task: Task[Any], n: int, seed: int, progress: bool = False) -> tuple[StartState, ...]:
    """`n` starts drawn one after another by `task.sample_start` from `np.random.default_rng(seed)`."""
    rng = np.random.default_rng(seed)
    began = time.perf_counter()
    starts = tuple(task.sample_start(rng) for _ in tqdm(range(n), desc=f"{task.name} starts", disable=not progress))
    log.info("%s: %d starts from seed %d in %.1f s", task.name, n, seed, time.perf_counter() - began)
    return starts


def start_set_path(task_name: str, version: str, directory: Path = DATA_DIR) -> Path:
    """The file of start set `version` of task `task_name` in `directory`."""
    return directory / f"{task_name}_{version}.json"


def write_start_set(task: Task[Any], version: str, directory: Path = DATA_DIR, progress: bool = False) -> Path:
    """Generate start set `version` from its declared seed and write it (atomically); returns the path."""
    spec = task.start_set_spec(version)
    starts = generate_start_set(task, spec.count, spec.seed, progress)
    path = start_set_path(task.name, version, directory)
    save_json(StartSetFile(task.name, version, spec.seed, spec.count, starts), path)
    return path


def read_start_file(path: Path, task: Task[Any]) -> StartSetFile:
    """A start-set file in the shipped format (`StartSetFile`: a header of task, version, seed and count, then the
    starts), as a failure miner or a user writes it, checked: the header's task is `task`'s, its count the number of
    starts (at least one), and every start fits `task`'s scene. The header's version and seed are the writer's to
    choose (a mined set names its mining run there). Raises SpecError naming the file and the field."""
    data = load_json(StartSetFile, path, what="start set")
    try:
        if data.task != task.name:
            raise SpecError("task", f"the start set is for task {data.task!r}, not {task.name!r}")
        if not data.starts:
            raise SpecError("starts", "a start set needs at least one start")
        _check_starts(data, task)
    except SpecError as err:
        raise SpecError(err.field, f"{err.reason} (in {path})") from None
    return data


def write_start_file(path: Path, task: Task[Any], version: str, starts: Sequence[StartState], seed: int = 0) -> Path:
    """Write `starts` (each checked against `task`'s scene) as a start-set file in the shipped format, atomically;
    `version` names the set (e.g. the mining run it came from), `seed` what drew it (0 when nothing did)."""
    starts = tuple(starts)
    if not starts:
        raise ValueError("write_start_file: no starts to write")
    data = StartSetFile(task.name, version, seed, len(starts), starts)
    _check_starts(data, task)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_json(data, path)
    return path


def _check_starts(data: StartSetFile, task: Task[Any]) -> None:
    """SpecError unless `data`'s count is its number of starts and every start fits `task`'s scene (the field
    named "starts[i]…")."""
    if len(data.starts) != data.count:
        raise SpecError("starts", f"header says {data.count} starts, the file holds {len(data.starts)}")
    for i, start in enumerate(data.starts):
        try:
            start.check(task.scene)
        except SpecError as err:
            raise err.under(f"starts[{i}]") from None


def load_start_set(path: Path, task: Task[Any], version: str, spec: StartSetSpec) -> tuple[StartState, ...]:
    """Read a start set file and check it: header equal to (task, version, spec), every start fits the scene.

    Raises SpecError naming the file and the field.
    """
    data = load_json(StartSetFile, path, what="start set")
    expected = {"task": task.name, "version": version, "seed": spec.seed, "count": spec.count}
    try:
        for key, value in expected.items():
            if getattr(data, key) != value:
                raise SpecError(key, f"expected {value!r}, got {getattr(data, key)!r}")
        _check_starts(data, task)
    except SpecError as err:
        raise SpecError(err.field, f"{err.reason} (in {path})") from None
    return data.starts
