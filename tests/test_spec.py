"""Scene description: exact JSON round trips and one clear SpecError for every kind of bad input."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from realissim.assets.pusht import TBlock
from realissim.real.surrogate.gap import GapProfile, gap_to_dict, load_gap, save_gap
from realissim.spec import (
    BoxSpec,
    GaussianSetSpec,
    SceneSpec,
    SpecError,
    from_json,
    load_gaussians,
    load_scene,
    save_scene,
    scene_from_dict,
    scene_from_json,
    scene_to_dict,
    scene_to_json,
    to_json,
)
from realissim.spec.state import StartState


def test_preset_round_trips_exactly(scene: SceneSpec, tmp_path) -> None:
    assert scene_from_dict(scene_to_dict(scene)) == scene
    assert scene_from_json(scene_to_json(scene)) == scene
    save_scene(scene, tmp_path / "s.json")
    again = load_scene(tmp_path / "s.json")
    assert again == scene
    assert scene_to_json(again) == scene_to_json(scene)


def _doc(scene: SceneSpec) -> dict[str, Any]:
    return copy.deepcopy(scene_to_dict(scene))


def _expect(doc: dict[str, Any], field: str, words: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        scene_from_dict(doc)
    assert info.value.field == field, str(info.value)
    assert words in info.value.reason, str(info.value)
    return info.value


def test_unknown_and_missing_keys(scene: SceneSpec) -> None:
    doc = _doc(scene)
    doc["objects"][0]["mas"] = 1.0
    err = _expect(doc, "objects[0].mas", "unknown key")
    assert "mass" in err.reason  # suggests the close match
    doc = _doc(scene)
    del doc["robot"]["joints"][3]["jerk"]
    _expect(doc, "robot.joints[3].jerk", "missing required key")


def test_wrong_types(scene: SceneSpec) -> None:
    doc = _doc(scene)
    doc["cameras"][1]["width"] = 480.5
    _expect(doc, "cameras[1].width", "integer")
    doc = _doc(scene)
    doc["objects"][0]["mass"] = "heavy"
    _expect(doc, "objects[0].mass", "number")
    doc = _doc(scene)
    doc["objects"][0]["mass"] = True
    _expect(doc, "objects[0].mass", "number")
    doc = _doc(scene)
    doc["robot"]["base"]["pos"] = [0.0, 0.0]
    _expect(doc, "robot.base.pos", "exactly 3")


def test_non_finite_values(scene: SceneSpec) -> None:
    doc = _doc(scene)
    doc["objects"][0]["pose"]["pos"][1] = float("nan")
    _expect(doc, "objects[0].pose.pos[1]", "finite")
    text = scene_to_json(scene).replace('"friction": 0.5', '"friction": Infinity', 1)
    with pytest.raises(SpecError, match="not allowed"):
        scene_from_json(text)


def test_quaternion_norm(scene: SceneSpec) -> None:
    doc = _doc(scene)
    doc["goals"][0]["pose"]["quat"] = [1.0, 0.1, 0.0, 0.0]
    _expect(doc, "goals[0].pose.quat", "unit norm")
    doc["goals"][0]["pose"]["quat"] = [1.0 + 5e-5, 0.0, 0.0, 0.0]  # within tolerance
    scene_from_dict(doc)


def test_non_positive_sizes(scene: SceneSpec) -> None:
    doc = _doc(scene)
    doc["objects"][0]["mass"] = 0.0
    _expect(doc, "objects[0].mass", "> 0")
    doc = _doc(scene)
    doc["objects"][0]["spheres"]["radii"][5] = -0.01
    _expect(doc, "objects[0].spheres.radii[5]", "> 0")
    doc = _doc(scene)
    doc["robot"]["pusher"]["radius"] = 0.0
    _expect(doc, "robot.pusher.radius", "> 0")


def test_intrinsics_must_fit_the_image(scene: SceneSpec) -> None:
    doc = _doc(scene)
    doc["cameras"][0]["K"][0][2] = 600.0  # cx beyond a 480-px width
    _expect(doc, "cameras[0].K", "outside the image width")
    doc = _doc(scene)
    doc["cameras"][0]["K"][1][1] = -10.0
    _expect(doc, "cameras[0].K", "focal lengths")
    doc = _doc(scene)
    doc["cameras"][2]["X_WC"][0][0] = 2.0
    _expect(doc, "cameras[2].X_WC", "orthonormal")


def test_limits_and_duplicates(scene: SceneSpec) -> None:
    doc = _doc(scene)
    doc["robot"]["joints"][1]["lower"] = 2.0
    _expect(doc, "robot.joints[1].lower", "below upper")
    doc = _doc(scene)
    doc["cameras"][2]["name"] = doc["cameras"][0]["name"]
    _expect(doc, "cameras[2].name", "duplicate")
    doc = _doc(scene)
    doc["robot"]["joints"][6]["name"] = doc["robot"]["joints"][0]["name"]
    _expect(doc, "robot.joints[6].name", "duplicate")
    doc = _doc(scene)
    doc["robot"]["home"][3] = 0.5  # joint 4 must stay below -0.0698
    _expect(doc, "robot.home[3]", "outside")
    doc = _doc(scene)
    doc["goals"][0]["object"] = "nothing"
    _expect(doc, "goals[0].object", "no object")


def test_object_boxes_are_optional_and_checked(scene: SceneSpec) -> None:
    """`boxes` (the exact shape) round-trips as [{"center": [...], "half": [...]}, ...]; a scene written without
    the key loads with none; a malformed box is a SpecError naming the field."""
    doc = _doc(scene)
    stem = TBlock().boxes()[1]
    assert doc["objects"][0]["boxes"][1] == {"center": list(stem.center), "half": list(stem.half)}
    assert stem.half == pytest.approx((0.025, 0.075, 0.0175))
    del doc["objects"][0]["boxes"]
    assert scene_from_dict(doc).objects[0].boxes is None
    assert scene_from_dict(doc) == dataclasses.replace(
        scene, objects=(dataclasses.replace(scene.objects[0], boxes=None),)
    )
    for path, value, field, words in [
        ((), [], "objects[0].boxes", "at least one box"),
        ((), {"center": [0, 0, 0], "half": [1, 1, 1]}, "objects[0].boxes", "must be"),
        ((1, "half", 2), 0.0, "objects[0].boxes[1].half", "> 0"),
        ((0, "half", 0), -0.1, "objects[0].boxes[0].half", "> 0"),
        ((0, "center"), [0.0, 0.0], "objects[0].boxes[0].center", "exactly 3"),
        ((0, "center", 1), "up", "objects[0].boxes[0].center[1]", "number"),
        ((1, "size"), [0.1, 0.1, 0.1], "objects[0].boxes[1].size", "unknown key"),
    ]:
        doc = _doc(scene)
        target: Any = doc["objects"][0]
        keys = ("boxes", *path)
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
        _expect(doc, field, words)
    doc = _doc(scene)
    del doc["objects"][0]["boxes"][0]["half"]
    _expect(doc, "objects[0].boxes[0].half", "missing required key")
    with pytest.raises(SpecError, match="half"):
        BoxSpec((0.0, 0.0, 0.0), (0.1, math.nan, 0.1))
    with pytest.raises(SpecError, match="center"):
        BoxSpec((math.inf, 0.0, 0.0), (0.1, 0.1, 0.1))


def test_load_scene_names_the_file(tmp_path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"name": "x", ')
    with pytest.raises(SpecError, match=r"broken\.json"):
        load_scene(path)
    with pytest.raises(SpecError, match="cannot read"):
        load_scene(tmp_path / "missing.json")


def _scene_doc(scene: SceneSpec, where: str, value: Any) -> dict[str, Any]:
    doc = _doc(scene)
    if where == "unknown":
        doc["objects"][0]["mas"] = value
    else:
        doc["objects"][0]["pose"]["pos"][1] = value
    return doc


def _gap_doc(where: str, value: Any) -> dict[str, Any]:
    doc = gap_to_dict(GapProfile())
    if where == "unknown":
        doc["arm"]["latncy"] = value
    else:
        doc["arm"]["kp"][2] = value
    return doc


@pytest.mark.parametrize(
    ("kind", "where", "value", "field", "words"),
    [
        ("scene", "value", math.nan, "objects[0].pose.pos[1]", "JSON constant NaN is not allowed"),
        ("scene", "value", -math.inf, "objects[0].pose.pos[1]", "JSON constant -Infinity is not allowed"),
        ("scene", "unknown", 1.0, "objects[0].mas", "unknown key (did you mean 'mass'?)"),
        ("gap", "value", math.nan, "arm.kp[2]", "JSON constant NaN is not allowed"),
        ("gap", "value", math.inf, "arm.kp[2]", "JSON constant Infinity is not allowed"),
        ("gap", "unknown", 0.1, "arm.latncy", "unknown key (did you mean 'latency'?)"),
    ],
)
def test_scene_and_gap_files_fail_alike_naming_file_and_field(
    scene: SceneSpec, tmp_path, kind: str, where: str, value: Any, field: str, words: str
) -> None:
    """Both loaders are the one strict JSON reader: NaN/±Infinity and unknown keys are named where they are."""
    doc, load = (_scene_doc(scene, where, value), load_scene) if kind == "scene" else (_gap_doc(where, value), load_gap)
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(doc))  # Python's json writes the NaN / Infinity tokens
    with pytest.raises(SpecError) as info:
        load(path)
    assert info.value.field == field
    assert words in info.value.reason and str(path) in info.value.reason


def test_saving_is_atomic_and_any_spec_round_trips(scene: SceneSpec, tmp_path) -> None:
    path = tmp_path / "gap.json"
    path.write_text("old")
    save_gap(GapProfile(), path)
    assert load_gap(path) == GapProfile()
    save_scene(scene, tmp_path / "scene.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gap.json", "scene.json"]  # no temporary file left
    start = StartState.of_scene(scene)
    assert from_json(StartState, to_json(start)) == start


def _gaussians(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    quats = rng.normal(size=(n, 4))
    return {
        "means": rng.normal(size=(n, 3)) * 0.05,
        "quats": quats / np.linalg.norm(quats, axis=1, keepdims=True),
        "scales": rng.uniform(0.001, 0.01, size=(n, 3)),
        "colors": rng.uniform(size=(n, 3)),
        "opacities": rng.uniform(size=n),
    }


def test_gaussians_inline_and_by_reference(scene: SceneSpec, tmp_path) -> None:
    arrays = _gaussians(5)
    inline = GaussianSetSpec(**{k: tuple(map(tuple, v)) if v.ndim == 2 else tuple(v) for k, v in arrays.items()})
    np.savez(tmp_path / "t.npz", **arrays)
    doc = _doc(scene)
    doc["objects"][0]["gaussians"] = "t.npz"
    doc["ground"]["gaussians"] = scene_to_dict(inline)
    parsed = scene_from_dict(doc)
    assert scene_from_json(scene_to_json(parsed)) == parsed
    by_ref = load_gaussians(parsed.objects[0].gaussians, tmp_path)
    by_value = load_gaussians(parsed.ground.gaussians)
    for name in arrays:
        np.testing.assert_array_equal(by_ref[name], by_value[name])
    arrays["opacities"][2] = 1.5
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(SpecError) as info:
        load_gaussians("bad.npz", tmp_path, field="objects[0].gaussians")
    assert info.value.field == "objects[0].gaussians.opacities[2]"


# ---- fuzzing: no malformed document fails with anything but SpecError ----

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:6]):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_documents(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = draw(st.sampled_from(["replace", "delete", "add", "scale"]))
        if action == "replace":
            parent[key] = draw(json_values)
        elif action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(json_values)
        elif action == "scale" and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            factor = draw(st.sampled_from([-1.0, 0.0, 1e-9, 1e9, 1e308, math.nan]))
            try:
                parent[key] = parent[key] * factor
            except OverflowError:  # an integer beyond a float's range, drawn by an earlier "replace"
                parent[key] = math.copysign(math.inf, parent[key]) * factor
    return doc


_BASE = None


def _base() -> dict[str, Any]:
    global _BASE
    if _BASE is None:
        from realissim.assets.pusht import pusht_scene

        _BASE = scene_to_dict(pusht_scene())
    return _BASE


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_documents_fail_only_with_spec_error(data: st.DataObject) -> None:
    doc = data.draw(mutated_documents(_base()))
    try:
        parsed = scene_from_dict(doc)
    except SpecError as err:
        assert err.reason
        return
    assert scene_from_dict(scene_to_dict(parsed)) == parsed


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200) | st.binary(max_size=200))
def test_random_text_fails_only_with_spec_error(text: str | bytes) -> None:
    with pytest.raises(SpecError):
        scene_from_json(text)


@settings(max_examples=100, deadline=None)
@given(
    mass=st.floats(1e-3, 1e3),
    friction=st.floats(1e-3, 2.0),
    pos=st.tuples(*[st.floats(-1.0, 1.0)] * 3),
    yaw=st.floats(-math.pi, math.pi),
)
def test_valid_variations_round_trip(mass: float, friction: float, pos: tuple, yaw: float) -> None:
    doc = copy.deepcopy(_base())
    obj = doc["objects"][0]
    obj["mass"], obj["friction"], obj["pose"]["pos"] = mass, friction, list(pos)
    obj["pose"]["quat"] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
    parsed = scene_from_dict(doc)
    assert json.loads(scene_to_json(parsed)) == scene_to_dict(parsed)
    assert scene_from_json(scene_to_json(parsed)) == parsed


def test_optional_scalars_and_tuples_decode_strictly() -> None:
    from realissim.spec.codec import from_dict, to_dict

    @dataclasses.dataclass(frozen=True)
    class Options:
        crop: int | None = 88
        scale: float | None = None
        size: tuple[int, int] | None = None
        name: str | None = None

    given = Options(crop=64, scale=2.0, size=(3, 4), name="x")
    assert from_dict(Options, to_dict(given)) == given
    assert from_dict(Options, {"crop": None, "scale": 1}) == Options(crop=None, scale=1.0)
    with pytest.raises(SpecError, match=r"crop: must be one of \['int', 'null'\], got str"):
        from_dict(Options, {"crop": "88"})
    with pytest.raises(SpecError, match="crop"):
        from_dict(Options, {"crop": True})


def test_a_description_without_exact_shapes_matches_one_with_them() -> None:
    from realissim.spec.codec import UNDESCRIBED_OK, first_difference

    old = {"objects": [{"name": "tblock", "mass": 0.25}]}  # written before objects carried `boxes`
    new = {"objects": [{"name": "tblock", "mass": 0.25, "boxes": [{"center": [0, 0, 0], "half": [1, 1, 1]}]}]}
    assert first_difference(old, new, "scene", undescribed_ok=UNDESCRIBED_OK) is None
    assert first_difference(new, old, "scene", undescribed_ok=UNDESCRIBED_OK) is None
    assert first_difference(old, new, "scene").startswith("scene.objects[0].boxes (old null, new [")  # type: ignore[union-attr]
    other = {"objects": [{"name": "tblock", "mass": 0.25, "boxes": [{"center": [0, 0, 0], "half": [2, 1, 1]}]}]}
    assert "boxes[0].half[0]" in str(first_difference(new, other, "scene", undescribed_ok=UNDESCRIBED_OK))
