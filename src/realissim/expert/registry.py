"""A task's expert, by the task's own declaration (`Task.expert`): generic code asks for "the expert of this task"
and never names one."""

from __future__ import annotations

from typing import Any

from realissim.policy.base import Policy
from realissim.tasks import Task
from realissim.util.imports import resolve


def make_expert(task: Task[Any], **settings: object) -> Policy:
    """The expert policy of `task` with these settings (its config's fields; unknown ones raise TypeError naming
    them); ValueError if the task declares none."""
    if task.expert is None:
        raise ValueError(f"task {task.name!r} has no expert")
    return resolve(task.expert)(task.scene, **settings)  # type: ignore[no-any-return]
