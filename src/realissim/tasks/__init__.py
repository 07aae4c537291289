"""Tasks: what an episode is run against — a scene, a goal, seeded start states and named start sets, and
the metrics of object poses (docs/design.md §7).

`make("pusht", success_threshold=0.9)` builds a registered task with options overriding its config's
defaults; `start_set("pusht/eval-v1")` returns a shipped, fixed start set. A task registers with one line in
`_TASKS` ("module:Class", imported on first use, so importing this package stays cheap).
"""

from __future__ import annotations

import importlib
from typing import Any

from realissim.spec.state import StartState
from realissim.tasks.base import (
    StartSetSpec,
    Task,
    TaskMetrics,
    configure,
    generate_start_set,
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


def start_set(name: str) -> tuple[StartState, ...]:
    """The shipped start set `name` ("<task>/<version>", e.g. "pusht/eval-v1"), for the task's defaults.

    Raises KeyError listing the known sets for an unknown name.
    """
    task_name, _, version = name.partition("/")
    if task_name not in _TASKS or version not in task_type(task_name).start_sets:
        raise KeyError(f"unknown start set {name!r}; known sets: {', '.join(start_set_names())}")
    return make(task_name).start_set(version)


__all__ = [
    "StartSetSpec",
    "Task",
    "TaskMetrics",
    "generate_start_set",
    "make",
    "names",
    "start_set",
    "start_set_names",
    "task_type",
    "write_start_set",
]
