"""`realissim scene`: write the PushT preset scene, or check a scene file; optionally its MuJoCo model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from realissim.assets.pusht import PushTConfig
from realissim.cli.common import INVALID, fail


@dataclass
class Scene:
    """Write the PushT preset scene, or check a scene file; optionally export its MuJoCo model."""

    check: Path | None = None
    """Scene JSON to validate (instead of writing the preset)."""
    out: Path | None = None
    """Where to write the preset scene JSON."""
    mjcf: Path | None = None
    """Where to write the generated MJCF of the (checked or preset) scene."""
    pusht: PushTConfig = field(default_factory=PushTConfig)

    def run(self) -> int:
        from realissim.assets.mjcf import scene_to_mjcf
        from realissim.assets.pusht import pusht_scene
        from realissim.spec.errors import SpecError
        from realissim.spec.io import load_scene, save_scene
        from realissim.twin.physics import PhysicsConfig

        try:
            scene = load_scene(self.check) if self.check is not None else pusht_scene(self.pusht)
            xml = scene_to_mjcf(scene, PhysicsConfig().mjcf_options())
        except SpecError as err:
            return fail("invalid scene", err, INVALID)
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
