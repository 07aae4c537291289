"""`realissim push`: the twin alone pushes the T towards its goal (`apps.push`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.apps.push import PushDemoConfig
from realissim.assets.pusht import PushTConfig
from realissim.cli.common import print_report
from realissim.twin.physics import PhysicsConfig


@dataclass
class Push:
    """The twin alone (offline, no real world): the PushT twin pushes the T towards its goal; prints a report."""

    config: Annotated[PushDemoConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=PushDemoConfig)
    out: Path | None = Path("runs/push")
    """Folder for scene.json, model.xml, states.npz, config.json, report.json, views.png (None: write nothing)."""
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    pusht: PushTConfig = field(default_factory=PushTConfig)
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        from realissim.apps.push import run_push_demo
        from realissim.tasks import make

        report = run_push_demo(make("pusht", scene=self.pusht), self.physics, self.config, self.out, self.progress)
        print_report("PushT twin physics demo", report, self.out)
        return 0
