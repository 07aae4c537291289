"""A task's expert, by the task's own declaration (`Task.expert`): generic code asks for "the expert of this task"
and never names one."""

from __future__ import annotations

import importlib
from typing import Any

from realissim.policy.base import Policy
from realissim.tasks import Task


def make_expert(task: Task[Any], **settings: object) -> Policy:
    """The expert policy of `task` with these settings (its config's fields; unknown ones raise TypeError naming
    them); ValueError if the task declares none."""
    if task.expert is None:
        raise ValueError(f"task {task.name!r} has no expert")
    module, _, attr = task.expert.partition(":")
    factory: Any = importlib.import_module(module)
    for part in attr.split("."):
        factory = getattr(factory, part)
    return factory(task.scene, **settings)
