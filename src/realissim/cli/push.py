"""`realissim push`: the twin alone pushes the task's object towards its goal (`apps.push`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.apps.push import PushDemoConfig
from realissim.cli.common import INVALID, TaskChoice, fail, print_report
from realissim.twin.physics import PhysicsConfig


@dataclass
class Push:
    """The twin alone (offline, no real world): the task's twin (default PushT) pushes its first object towards its
    goal with a scripted push; prints a report."""

    config: Annotated[PushDemoConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=PushDemoConfig)
    out: Path | None = Path("runs/push")
    """Folder for scene.json, model.xml, states.npz, config.json, report.json, views.png (None: write nothing)."""
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    task: Annotated[TaskChoice, tyro.conf.OmitArgPrefixes] = field(default_factory=TaskChoice)
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        from realissim.apps.push import run_push_demo

        try:
            task = self.task.make()
        except ValueError as err:
            return fail("invalid option", err, INVALID)
        report = run_push_demo(task, self.physics, self.config, self.out, self.progress)
        print_report(f"{task.name} twin physics demo", report, self.out)
        return 0
