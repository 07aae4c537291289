"""`realissim demo`: the main demo, the closed loop on a task (default PushT), correction on and off (`apps.demo`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.apps.demo import LoopDemoConfig
from realissim.cli.common import FAILED, INVALID, TaskChoice, fail


@dataclass
class Demo:
    """The main demo: the closed Real-is-Sim loop on a task (default PushT) against a surrogate real world (with a
    reality gap), run with visual correction on and off; prints the sync metrics side by side and writes a rerun
    recording (demo.rrd), error plots (errors.png), camera views and a report."""

    config: Annotated[LoopDemoConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=LoopDemoConfig)
    out: Path | None = Path("runs/demo")
    """Output folder (None: write nothing)."""
    task: Annotated[TaskChoice, tyro.conf.OmitArgPrefixes] = field(default_factory=TaskChoice)
    progress: bool = True
    """Show progress bars."""

    def run(self) -> int:
        config = self.config
        if config.realtime:
            from realissim.util.threads import reserve_core_for_world

            reserve_core_for_world()
        from realissim.apps.demo import format_table, run_loop_demo
        from realissim.real.surrogate.gap import load_gap
        from realissim.real.surrogate.process import SurrogateError
        from realissim.spec.errors import SpecError

        try:
            if config.gap is not None:
                load_gap(config.gap)  # fail here, with the field named, rather than in the surrogate's process
            task = self.task.make()
        except (SpecError, ValueError) as err:
            return fail("invalid option", err, INVALID)
        try:
            results = run_loop_demo(config, task, self.out, self.progress)
        except SurrogateError as err:
            return fail("surrogate failed", err, FAILED)
        clock = "real time" if config.realtime else "lock-step"
        title = f"Closed loop on {task.name}: gap {config.gap or 'default'}, {clock}, {config.seconds:g} s"
        print(format_table(results, title + f", hand push at {config.seconds / 2:g} s"))
        if self.out is not None:
            print(f"outputs in {self.out}/: " + ", ".join(results["outputs"]))
        return 0
