"""The shipped reality-gap profiles load and differ from the default where they say they do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import realissim.real.surrogate.gap as gap_module
from realissim.real.surrogate.gap import DEFAULT_GAP_PATH, GapProfile, gap_from_dict, load_gap
from realissim.spec.errors import SpecError

GAPS = Path(gap_module.__file__).with_name("gaps")
CORNER_GAPS = Path(__file__).resolve().parents[1] / "experiments" / "corner_gaps"
SHIPPED = [DEFAULT_GAP_PATH, *sorted(GAPS.glob("*.json")), *sorted(CORNER_GAPS.glob("*.json"))]


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
    assert (objects.name, objects.shape, objects.boxes) == ("*", "spheres", None)
    assert (objects.friction_scale, objects.mass_scale) == (1.0, 1.0)
    assert objects.com_offset == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_profile_loads_with_the_ts_shape_as_described(path: Path) -> None:
    """The T collides on its described boxes ("exact") wherever a profile names it; "*" keeps the sphere sets."""
    gap = load_gap(path)
    shapes = {o.name: (o.shape, o.boxes) for o in gap.objects}
    assert shapes["*"] == ("spheres", None)
    if "tblock" in shapes:
        assert shapes["tblock"] == ("exact", None)


def test_a_profile_with_the_retired_t_block_key_says_what_replaced_it(tmp_path: Path) -> None:
    doc = json.loads(DEFAULT_GAP_PATH.read_text())
    del doc["objects"][1]["shape"]
    doc["objects"][1]["t_block"] = None
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecError) as err:
        load_gap(path)
    assert err.value.field == "objects[1].t_block"
    for words in ("no longer read", '"shape": "exact"', '"shape": "spheres"', '"boxes"', str(path)):
        assert words in err.value.reason
    with pytest.raises(SpecError, match=r"objects\[0\]\.t_block: key of an older format"):
        gap_from_dict({"objects": [{"name": "tblock", "t_block": {"bar_length": 0.2}}]})


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"shape": "boxes"}, "objects[0].shape", "must be one of"),
        (
            {"shape": "spheres", "boxes": [{"center": [0, 0, 0], "half": [0.01, 0.01, 0.01]}]},
            "objects[0].boxes",
            "exact",
        ),
        ({"boxes": []}, "objects[0].boxes", "at least one box"),
        ({"boxes": [{"center": [0, 0, 0], "half": [0.01, -0.01, 0.01]}]}, "objects[0].boxes[0].half", "> 0"),
        ({"boxes": [{"center": [0, 0], "half": [0.01, 0.01, 0.01]}]}, "objects[0].boxes[0].center", "exactly 3"),
    ],
)
def test_bad_object_shapes_name_the_field(entry: dict, field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        gap_from_dict({"objects": [{"name": "tblock", **entry}]})
    assert (err.value.field, words in err.value.reason) == (field, True), str(err.value)
