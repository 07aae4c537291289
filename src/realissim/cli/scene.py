"""`realissim scene`: write a task's scene (default PushT), or check a scene file; optionally its MuJoCo model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.cli.common import INVALID, TaskChoice, fail


@dataclass
class Scene:
    """Write a task's scene (default PushT), or check a scene file; optionally export its MuJoCo model."""

    check: Path | None = None
    """Scene JSON to validate (instead of writing the task's scene)."""
    out: Path | None = None
    """Where to write the task's scene JSON."""
    mjcf: Path | None = None
    """Where to write the generated MJCF of the (checked or task's) scene."""
    task: Annotated[TaskChoice, tyro.conf.OmitArgPrefixes] = field(default_factory=TaskChoice)

    def run(self) -> int:
        from realissim.assets.mjcf import scene_to_mjcf
        from realissim.spec.errors import SpecError
        from realissim.spec.io import load_scene, save_scene
        from realissim.twin.physics import PhysicsConfig

        try:
            scene = load_scene(self.check) if self.check is not None else self.task.make().scene
            xml = scene_to_mjcf(scene, PhysicsConfig().mjcf_options())
        except SpecError as err:
            return fail("invalid scene", err, INVALID)
        except ValueError as err:
            return fail("invalid option", err, INVALID)
        if self.check is not None:
            print(
                f"{self.check}: valid scene {scene.name!r} with {len(scene.objects)} objects, "
                f"{len(scene.cameras)} cameras"
            )
        if self.out is not None:
            save_scene(scene, self.out)
            print(f"wrote {self.out}")
        if self.mjcf is not None:
            self.mjcf.write_text(xml)
            print(f"wrote {self.mjcf}")
        return 0
