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


def test_objects_exact_changes_only_the_objects() -> None:
    """`objects_exact.json`: the default gap with the objects as the twin knows them (docs/results.md)."""
    default, exact = GapProfile(), load_gap(GAPS / "objects_exact.json")
    assert (exact.arm, exact.cameras, exact.lighting) == (default.arm, default.cameras, default.lighting)
    (objects,) = exact.objects
    assert (objects.name, objects.t_block, objects.friction_scale, objects.mass_scale) == ("*", None, 1.0, 1.0)
    assert objects.com_offset == (0.0, 0.0, 0.0)
