"""`realissim surrogate`: the surrogate real world alone, its arm following the twin's scripted push."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.cli.common import FAILED, INVALID, TaskChoice, fail, print_report


@dataclass
class Surrogate:
    """Run the surrogate real world alone: the follower moves its arm; writes camera views and ground truth."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default profile)."""
    write_gap: Path | None = None
    """Write the default reality-gap profile (documented JSON, to edit) here and exit."""
    seconds: float = 6.0
    """Simulated duration, s."""
    camera_size: tuple[int, int] = (480, 270)
    """Rendered image size of every camera, px (width, height)."""
    seed: int = 0
    """Seed of the world's noise and disturbances."""
    out: Path | None = Path("runs/surrogate")
    """Folder for views.png, truth.npz, scene.json, config.json, report.json (None: write nothing)."""
    task: Annotated[TaskChoice, tyro.conf.OmitArgPrefixes] = field(default_factory=TaskChoice)
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        from realissim.apps.surrogate import drive_surrogate
        from realissim.real.surrogate import GapProfile, SurrogateConfig, SurrogateError, load_gap, save_gap
        from realissim.spec.errors import SpecError

        if self.write_gap is not None:
            save_gap(GapProfile(), self.write_gap)
            print(f"wrote the default reality-gap profile to {self.write_gap}")
            return 0
        try:
            if self.gap is not None:
                load_gap(self.gap)  # fail here, with the field named, rather than in the child
            config = SurrogateConfig(gap=self.gap, seed=self.seed, camera_size=self.camera_size)
            task = self.task.make()
        except SpecError as err:
            return fail("invalid reality-gap profile", err, INVALID)
        except ValueError as err:
            return fail("invalid option", err, INVALID)
        try:
            report = drive_surrogate(task, config, self.seconds, self.out, self.progress)
        except SpecError as err:
            return fail("invalid reality-gap profile", err, INVALID)
        except SurrogateError as err:
            return fail("surrogate failed", err, FAILED)
        title = "Surrogate real world (lock-step), the real arm following the twin's scripted push"
        print_report(title, report, self.out)
        return 0
