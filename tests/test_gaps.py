"""The shipped reality-gap profiles load and differ from the default where they say they do."""

from __future__ import annotations

from pathlib import Path

import realissim.real.surrogate.gap as gap_module
from realissim.real.surrogate.gap import GapProfile, load_gap

GAPS = Path(gap_module.__file__).with_name("gaps")


def test_shipped_profiles_load_and_widen_the_gap() -> None:
    default = GapProfile()
    physics = load_gap(GAPS / "large_physics.json")
    assert physics.objects[0].friction_scale < default.objects[0].friction_scale
    assert physics.objects[0].mass_scale > default.objects[0].mass_scale
    assert physics.arm.latency > default.arm.latency
    assert physics.cameras == default.cameras
    cameras = load_gap(GAPS / "large_cameras.json")
    assert sum(abs(x) for x in cameras.cameras[0].rotation_error) > 1.5 * sum(
        abs(x) for x in default.cameras[0].rotation_error
    )
    assert cameras.objects == default.objects
