"""Tasks: what an episode is run against — a scene, a goal, seeded start states and named start sets, and
the metrics of object poses (docs/design.md §7).

`make("pusht", success_threshold=0.9)` builds a registered task with options overriding its config's
defaults; `start_set("pusht/eval-v1")` returns a shipped, fixed start set, and `start_set("mined.json")` one from
a file in the same format (`read_start_file`, `write_start_file`). A task registers with one line in
`_TASKS` ("module:Class", imported on first use, so importing this package stays cheap).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from realissim.spec.state import StartState
from realissim.tasks.base import (
    StartSetFile,
    StartSetSpec,
    Task,
    TaskMetrics,
    configure,
    generate_start_set,
    read_start_file,
    write_start_file,
    write_start_set,
)

_TASKS: dict[str, str] = {
    "pusht": "realissim.tasks.pusht:PushTTask",
}


def names() -> tuple[str, ...]:
    """The registered task names, sorted."""
    return tuple(sorted(_TASKS))


def task_type(name: str) -> type[Task[Any]]:
    """The class of registered task `name`; KeyError listing the registered names for an unknown one."""
    try:
        target = _TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; registered tasks: {', '.join(names())}") from None
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def make(name: str, **overrides: Any) -> Task[Any]:
    """Registered task `name` with its config's defaults replaced by `overrides` (field name → value).

    Raises KeyError for an unknown task, ValueError naming an unknown field and listing the valid ones.
    """
    cls = task_type(name)
    return cls(configure(cls.config_type, overrides))


def start_set_names() -> tuple[str, ...]:
    """Every shipped start set as "<task>/<version>"."""
    return tuple(f"{name}/{version}" for name in names() for version in task_type(name).start_sets)


def is_start_file(name: str) -> bool:
    """Whether `name` (a `start_set` argument) names a start-set file rather than a shipped set: it ends in ".json"
    or is an existing file."""
    return name.endswith(".json") or Path(name).is_file()


def start_set(name: str, task: str | None = None) -> tuple[StartState, ...]:
    """The shipped start set `name` ("<task>/<version>", e.g. "pusht/eval-v1"), for the task's defaults; or, when
    `name` is a start-set file (`is_start_file`: a miner's or a user's, in the shipped format), its starts, checked
    against its task's scene (`read_start_file`). `task` (a registered name), if given, must be the set's task.

    Raises KeyError listing the known sets for an unknown name, SpecError naming the file and field for a bad file,
    ValueError for a set of another task.
    """
    if is_start_file(name):
        header = read_start_file(Path(name), make(task) if task else _header_task(Path(name)))
        return header.starts
    task_name, _, version = name.partition("/")
    if task is not None and task_name != task:
        raise ValueError(f"start set {name!r} is for task {task_name!r}, not {task!r}")
    if task_name not in _TASKS or version not in task_type(task_name).start_sets:
        raise KeyError(f"unknown start set {name!r}; known sets: {', '.join(start_set_names())}")
    return make(task_name).start_set(version)


def start_set_task(name: str) -> str:
    """The task (registered name) of start set `name`: a shipped set's prefix, or a start-set file's header."""
    return _header_task(Path(name)).name if is_start_file(name) else name.partition("/")[0]


def start_set_label(name: str) -> str:
    """A folder-safe label of start set `name`: "pusht_eval-v1" for a shipped set, the file's stem for a file."""
    return Path(name).stem if is_start_file(name) else name.replace("/", "_")


def _header_task(path: Path) -> Task[Any]:
    """The registered task a start-set file's header names (SpecError naming the file if unreadable)."""
    from realissim.spec.errors import SpecError
    from realissim.spec.io import load_json

    name = load_json(StartSetFile, path, what="start set").task
    if name not in _TASKS:
        raise SpecError("task", f"unknown task {name!r}; registered tasks: {', '.join(names())} (in {path})")
    return make(name)


__all__ = [
    "StartSetFile",
    "StartSetSpec",
    "Task",
    "TaskMetrics",
    "generate_start_set",
    "is_start_file",
    "make",
    "names",
    "read_start_file",
    "start_set",
    "start_set_label",
    "start_set_names",
    "start_set_task",
    "task_type",
    "write_start_file",
    "write_start_set",
]
