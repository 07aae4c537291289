"""What every verb shares: the report printer, the exit codes, and the choice of task."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from realissim.tasks import Task

INVALID = 2
"""Exit code: an invalid option or input file (the message names it)."""
FAILED = 3
"""Exit code: the work itself failed (a dataset, checkpoint, surrogate or worker error; the message says which)."""


def fail(kind: str, err: BaseException, code: int) -> int:
    """Print `kind: err` to stderr and return `code`."""
    print(f"{kind}: {err}", file=sys.stderr)
    return code


def print_report(title: str, report: dict, out: Path | None) -> None:
    """A command's report as aligned `key  value` lines under a title, and where its outputs went."""
    width = max(len(k) for k in report)
    print(title)
    for key, value in report.items():
        print(f"  {key:<{width}}  {value:.4g}" if isinstance(value, float) else f"  {key:<{width}}  {value}")
    if out is not None:
        print(f"outputs in {out}/")


@dataclass
class TaskChoice:
    """Which registered task a verb runs, and options of its config (flags `--task`, `--task-option`)."""

    task: str = "pusht"
    """The task (registry name, `realissim.tasks.names()`): its scene, goal, start sets and expert."""
    task_option: tuple[str, ...] = ()
    """Options of the task's config as KEY=VALUE; a dotted KEY reaches a nested config (e.g.
    `scene.camera_width=320 success_threshold=0.9` for PushT); VALUE is read as JSON, a bare word as a string."""

    def make(self) -> Task[Any]:
        """The task with its options applied; ValueError naming a malformed option or an unknown task or field."""
        from realissim.tasks import make, task_type

        try:
            config_type = task_type(self.task).config_type
        except KeyError as err:
            raise ValueError(err.args[0]) from None
        return make(self.task, **task_overrides(config_type, self.task_option))


def task_overrides(config_type: type, options: tuple[str, ...]) -> dict[str, Any]:
    """Top-level overrides of dataclass `config_type` from KEY=VALUE `options` (dotted keys reach nested dataclass
    fields, built on the field's default); a JSON list becomes a tuple where the default is one.

    Raises ValueError naming the option: no "=", an unknown field, a nested key into a non-dataclass field.
    """
    nested: dict[str, Any] = {}
    for option in options:
        key, sep, text = option.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"task option {option!r}: expected KEY=VALUE")
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = text
        node = nested
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"task option {option!r}: {part!r} is given both a value and nested options")
        node[leaf] = value
    return _apply(config_type, nested, config_type.__name__)


def _apply(config_type: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(config_type) if f.init}
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in fields:
            raise ValueError(f"unknown option {name!r} for {where}; valid options: {', '.join(fields)}")
        default = _default(fields[name])
        if isinstance(value, dict):
            if not dataclasses.is_dataclass(default):
                raise ValueError(f"option {where}.{name} is not a config with options of its own")
            out[name] = dataclasses.replace(default, **_apply(type(default), value, f"{where}.{name}"))  # type: ignore[type-var]
        else:
            out[name] = tuple(value) if isinstance(value, list) and isinstance(default, tuple) else value
    return out


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None
