"""Appearance: surface Gaussians of the T, the arm and the table, bound to MuJoCo bodies and posed by them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realissim.assets import panda
from realissim.assets.appearance import GROUND_BODY, AppearanceConfig, box_union_gaussians, scene_gaussians
from realissim.assets.gaussians import (
    DEFAULT_OVERLAP,
    GaussianArrays,
    box_gaussians,
    capsule_gaussians,
    plane_gaussians,
)
from realissim.assets.mjcf import KEYFRAME_HOME
from realissim.assets.pusht import T_NAME, TBlock
from realissim.geometry import axis_angle_quat, quat_mul, quat_to_mat, yaw_quat
from realissim.spec import BoxSpec, GaussianSetSpec, ObjectSpec, Pose, SceneSpec, SphereSetSpec
from realissim.twin.physics import PhysicsConfig, build_model
from realissim.views.appearance import SceneAppearance

SPACING = 0.01


@pytest.fixture(scope="module")
def model(scene: SceneSpec) -> mujoco.MjModel:
    return build_model(scene, PhysicsConfig())


@pytest.fixture(scope="module")
def appearance(scene: SceneSpec, model: mujoco.MjModel) -> SceneAppearance:
    return SceneAppearance.from_scene(scene, model)


def _random_data(model: mujoco.MjModel, scene: SceneSpec, seed: int) -> mujoco.MjData:
    """Data at random robot joints (within limits) and a random T pose, after mj_forward."""
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(model)
    data.qpos[[model.joint(j).qposadr[0] for j in panda.JOINT_NAMES]] = rng.uniform(panda.Q_LOWER, panda.Q_UPPER)
    quat = rng.normal(size=4)
    data.qpos[_t_qpos(model)] = [*rng.uniform(-0.3, 0.3, 3), *(quat / np.linalg.norm(quat))]
    mujoco.mj_forward(model, data)
    return data


def _t_qpos(model: mujoco.MjModel) -> slice:
    start = int(model.joint(T_NAME).qposadr[0])
    return slice(start, start + 7)


def _thin_axes(g: GaussianArrays) -> np.ndarray:
    """Unit direction (N, 3) of each Gaussian's smallest standard deviation, in g's frame."""
    rot = quat_to_mat(g.quats)
    return rot[np.arange(len(g)), :, np.argmin(g.scales, axis=1)]


def _gaussians(n: int = 4) -> dict[str, np.ndarray]:
    return {
        "means": np.zeros((n, 3)),
        "quats": np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)),
        "scales": np.full((n, 3), 0.01),
        "colors": np.full((n, 3), 0.5),
        "opacities": np.full(n, 0.9),
    }


def test_pusht_counts_are_in_budget(scene: SceneSpec) -> None:
    bodies = scene_gaussians(scene)
    robot = sum(len(bodies[name]) for name in (*panda.LINK_NAMES, panda.PUSHER_BODY))
    assert 400 <= len(bodies[T_NAME]) <= 900
    assert 1500 <= robot <= 3000
    assert 1500 <= len(bodies[GROUND_BODY]) <= 4000
    assert set(bodies) == {GROUND_BODY, T_NAME, panda.PUSHER_BODY, *panda.LINK_NAMES}


def test_t_gaussians_lie_on_its_surface_and_cover_it() -> None:
    t = TBlock()
    boxes = t.boxes()
    g = box_union_gaussians(boxes, (0.8, 0.2, 0.2), SPACING)
    # Distance outside each box (0 on or in it) and depth inside it (> 0 only strictly inside).
    outside = np.stack([np.linalg.norm(np.maximum(np.abs(g.means - b.center) - b.half, 0), axis=1) for b in boxes])
    depth = np.stack([np.min(np.asarray(b.half) - np.abs(g.means - b.center), axis=1) for b in boxes])
    assert np.all(outside.min(axis=0) < 1.5e-3)
    assert np.all(depth.max(axis=0) < 1e-9), "a Gaussian lies inside the T"
    # Any point on the top face is within half a cell diagonal of a Gaussian.
    rng = np.random.default_rng(0)
    top = rng.uniform([-0.1, -0.2, t.height / 2], [0.1, 0.1, t.height / 2], size=(4000, 3))
    top = top[t.contains(top)]
    nearest = np.min(np.linalg.norm(top[:, None] - g.means[None], axis=2), axis=1)
    assert nearest.max() < SPACING * np.sqrt(0.5) + 1e-9


def test_box_face_gaussians_are_flat_along_the_normal() -> None:
    center, half = np.array([0.1, -0.2, 0.3]), np.array([0.05, 0.02, 0.03])
    g = box_gaussians(center, half, (0.5, 0.5, 0.5), 0.01)
    on_face = np.isclose(np.abs(g.means - center), half, atol=1e-12)
    assert np.all(on_face.sum(axis=1) == 1)
    normals = on_face * np.sign(g.means - center)
    np.testing.assert_allclose(np.abs(np.sum(_thin_axes(g) * normals, axis=1)), 1.0, atol=1e-9)
    assert np.all(g.scales.min(axis=1) <= 0.001 + 1e-12)
    # Along each tangent axis the std-dev is the overlap fraction of the cell size on that axis.
    uneven = box_gaussians(center, half, (0.5, 0.5, 0.5), 0.012)
    cells = 2 * half / np.ceil(2 * half / 0.012)
    rot = quat_to_mat(uneven.quats)
    variance = np.einsum("nij,nj,nij->ni", rot, uneven.scales**2, rot)  # diagonal of R S² Rᵀ
    tangent = ~np.isclose(np.abs(uneven.means - center), half, atol=1e-12)
    np.testing.assert_allclose(np.sqrt(variance[tangent]), (DEFAULT_OVERLAP * cells[None] * tangent)[tangent])


def test_capsule_gaussians_lie_on_the_capsule_facing_out() -> None:
    p0, p1, radius = np.array([0.1, 0.0, 0.2]), np.array([-0.05, 0.12, 0.1]), 0.04
    g = capsule_gaussians(p0, p1, radius, (0.9, 0.9, 0.9), 0.01)
    axis = p1 - p0
    t = np.clip((g.means - p0) @ axis / (axis @ axis), 0, 1)
    radial = g.means - (p0 + t[:, None] * axis)
    np.testing.assert_allclose(np.linalg.norm(radial, axis=1), radius, atol=1e-12)
    cos = np.sum(_thin_axes(g) * radial / radius, axis=1)
    np.testing.assert_allclose(np.abs(cos), 1.0, atol=1e-9)
    assert (t == 0).any() and (t == 1).any() and ((t > 0) & (t < 1)).any()  # both caps and the side


def test_plane_gaussians_cover_the_table_with_a_checker() -> None:
    g = plane_gaussians(0.4, 0.3, (0.5, 0.4, 0.3), 0.03, checker=0.1)
    assert np.all(g.means[:, 2] == 0)
    assert np.all(np.abs(g.means[:, :2]) <= [0.4, 0.3])
    np.testing.assert_allclose(_thin_axes(g)[:, 2], 1.0)
    parity = (np.floor(g.means[:, 0] / 0.1) + np.floor(g.means[:, 1] / 0.1)) % 2 == 1
    assert g.colors[parity].mean() - g.colors[~parity].mean() > 0.08


def test_robot_gaussians_lie_on_the_models_capsules(
    scene: SceneSpec, model: mujoco.MjModel, appearance: SceneAppearance
) -> None:
    data = _random_data(model, scene, seed=1)
    world = appearance.world_from_data(data)
    for name in (*panda.LINK_NAMES, panda.PUSHER_BODY):
        body = model.body(name).id
        mask = appearance.body_index == body
        assert mask.any(), name
        gaps = []
        for geom in np.flatnonzero(model.geom_bodyid == body):
            radius, half_len = model.geom_size[geom, :2]
            axis = data.geom_xmat[geom].reshape(3, 3)[:, 2]
            rel = world.means[mask] - data.geom_xpos[geom]
            along = np.clip(rel @ axis, -half_len, half_len)
            gaps.append(np.linalg.norm(rel - along[:, None] * axis, axis=1) - radius)
        gaps = np.stack(gaps)
        assert np.all(np.min(np.abs(gaps), axis=0) < 1e-9), name  # on one capsule's surface ...
        assert np.all(gaps.min(axis=0) > -1e-6), name  # ... and inside none


def test_world_poses_follow_mujoco_bodies(scene: SceneSpec, model: mujoco.MjModel, appearance: SceneAppearance) -> None:
    data = _random_data(model, scene, seed=2)
    world = appearance.world_from_data(data)
    b = appearance.body_index
    xmat = data.xmat.reshape(-1, 3, 3)[b]
    expected = data.xpos[b] + np.einsum("nij,nj->ni", xmat, appearance.local.means)
    np.testing.assert_allclose(world.means, expected, atol=1e-12)
    np.testing.assert_allclose(quat_to_mat(world.quats), xmat @ quat_to_mat(appearance.local.quats), atol=1e-12)
    np.testing.assert_array_equal(world.colors, appearance.local.colors)


def test_moving_the_t_moves_only_its_gaussians(
    scene: SceneSpec, model: mujoco.MjModel, appearance: SceneAppearance
) -> None:
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key(KEYFRAME_HOME).id)
    mujoco.mj_forward(model, data)
    before = appearance.world_from_data(data)
    data.qpos[_t_qpos(model)] = [0.1, 0.05, 0.0175, *yaw_quat(0.7)]
    mujoco.mj_forward(model, data)
    after = appearance.world_from_data(data)
    moved = np.any(before.means != after.means, axis=1)
    np.testing.assert_array_equal(moved, appearance.objects)
    t_old = np.asarray(scene.object(T_NAME).pose.pos)
    rot = quat_to_mat(yaw_quat(0.7)) @ quat_to_mat(scene.object(T_NAME).pose.quat).T
    np.testing.assert_allclose(
        after.means[appearance.objects], (before.means[appearance.objects] - t_old) @ rot.T + [0.1, 0.05, 0.0175]
    )
    assert appearance.static.sum() == len(scene_gaussians(scene)[GROUND_BODY])
    assert not np.any(appearance.static & appearance.robot) and not np.any(appearance.objects & appearance.robot)
    assert np.all(appearance.static | appearance.objects | appearance.robot)


def test_world_subset_matches_the_full_set(
    scene: SceneSpec, model: mujoco.MjModel, appearance: SceneAppearance
) -> None:
    data = _random_data(model, scene, seed=3)
    full = appearance.world_from_data(data)
    part = appearance.world_from_data(data, appearance.objects)
    np.testing.assert_array_equal(part.means, full.means[appearance.objects])
    np.testing.assert_array_equal(part.quats, full.quats[appearance.objects])
    with pytest.raises(ValueError, match="xpos"):
        appearance.world(data.xpos[1:], data.xquat)


def test_binding_names_bodies_missing_from_the_model(scene: SceneSpec) -> None:
    arm_only = build_model(dataclasses.replace(scene, objects=(), goals=()), PhysicsConfig())
    with pytest.raises(KeyError, match=T_NAME):
        SceneAppearance.from_scene(scene, arm_only)


def test_scene_gaussians_are_deterministic(scene: SceneSpec) -> None:
    a, b = scene_gaussians(scene), scene_gaussians(scene)
    c = scene_gaussians(scene, config=AppearanceConfig(seed=1))
    for name in a:
        np.testing.assert_array_equal(a[name].means, b[name].means)
        np.testing.assert_array_equal(a[name].colors, b[name].colors)
    assert not np.array_equal(a[T_NAME].colors, c[T_NAME].colors)


def test_scene_gaussians_from_the_scene_file_are_used(scene: SceneSpec, tmp_path: Path) -> None:
    given_t = GaussianArrays(**_gaussians(3))
    np.savez(tmp_path / "t.npz", **_gaussians(3))
    ground = GaussianArrays(**_gaussians(5))
    custom = dataclasses.replace(
        scene,
        objects=(dataclasses.replace(scene.object(T_NAME), gaussians="t.npz"),),
        ground=dataclasses.replace(scene.ground, gaussians=ground.to_spec()),
    )
    bodies = scene_gaussians(custom, base_dir=tmp_path)
    np.testing.assert_array_equal(bodies[T_NAME].means, given_t.means)
    np.testing.assert_array_equal(bodies[GROUND_BODY].opacities, ground.opacities)


def test_objects_of_unknown_shape_are_drawn_on_their_spheres(scene: SceneSpec) -> None:
    centers, radii = np.array([[0.0, 0.0, 0.0], [0.03, 0.0, 0.0]]), np.array([0.02, 0.025])
    ball = ObjectSpec(
        name="pair",
        pose=Pose((0.2, 0.2, 0.025)),
        mass=0.1,
        friction=0.5,
        spheres=SphereSetSpec(tuple(map(tuple, centers)), tuple(radii)),  # type: ignore[arg-type]
        color=(0.1, 0.6, 0.2),
    )
    g = scene_gaussians(dataclasses.replace(scene, objects=(ball,), goals=()))["pair"]
    gap = np.linalg.norm(g.means[:, None] - centers[None], axis=2) - radii
    assert np.all(np.min(np.abs(gap), axis=1) < 1e-12) and np.all(gap.min(axis=1) > -1e-9)
    assert abs(g.colors.mean(axis=0) - [0.1, 0.6, 0.2]).max() < 0.01


def test_an_object_described_with_boxes_is_drawn_on_them_whatever_its_name(scene: SceneSpec) -> None:
    """The exact shape comes from the description: an "L" of two overlapping boxes named "bracket" gets Gaussians
    on the union's outer surface (none inside it, none where the boxes overlap), not on its collision sphere."""
    boxes = (BoxSpec((0.0, 0.0, 0.0), (0.05, 0.01, 0.01)), BoxSpec((0.04, 0.03, 0.0), (0.01, 0.04, 0.01)))
    bracket = ObjectSpec(
        name="bracket",
        pose=Pose((0.2, 0.2, 0.01)),
        mass=0.1,
        friction=0.5,
        spheres=SphereSetSpec(((0.0, 0.0, 0.0),), (0.01,)),
        color=(0.2, 0.3, 0.7),
        boxes=boxes,
    )
    g = scene_gaussians(dataclasses.replace(scene, objects=(bracket,), goals=()))["bracket"]
    outside = np.stack([np.linalg.norm(np.maximum(np.abs(g.means - b.center) - b.half, 0), axis=1) for b in boxes])
    depth = np.stack([np.min(np.asarray(b.half) - np.abs(g.means - b.center), axis=1) for b in boxes])
    assert np.all(outside.min(axis=0) < 1.5e-3), "a Gaussian lies off the boxes"
    assert np.all(depth.max(axis=0) < 1e-9), "a Gaussian lies inside the union"
    assert np.ptp(g.means[:, 0]) > 0.09 and np.ptp(g.means[:, 1]) > 0.07  # spans both boxes, not the 1 cm sphere


def test_the_t_is_drawn_from_its_boxes_not_its_name(scene: SceneSpec) -> None:
    """Renamed, the T gets the very same Gaussians; without its boxes, it is drawn on its spheres."""
    t = scene.object(T_NAME)
    drawn = scene_gaussians(scene)[T_NAME]
    renamed = dataclasses.replace(scene, objects=(dataclasses.replace(t, name="widget"),), goals=())
    again = scene_gaussians(renamed)["widget"]
    for name in ("means", "quats", "scales", "colors", "opacities"):
        np.testing.assert_array_equal(getattr(again, name), getattr(drawn, name))
    spheres = dataclasses.replace(scene, objects=(dataclasses.replace(t, boxes=None),))
    on_spheres = scene_gaussians(spheres)[T_NAME]
    radius = t.spheres.radii[0]
    gap = np.linalg.norm(on_spheres.means[:, None] - np.asarray(t.spheres.centers)[None], axis=2) - radius
    assert np.all(np.min(np.abs(gap), axis=1) < 1e-12)


def test_spec_round_trip() -> None:
    g = box_gaussians((0, 0, 0), (0.02, 0.02, 0.02), (0.3, 0.3, 0.3), 0.02)
    spec = g.to_spec()
    assert isinstance(spec, GaussianSetSpec)
    back = GaussianArrays.from_spec(spec)
    for name in ("means", "quats", "scales", "colors", "opacities"):
        np.testing.assert_array_equal(getattr(back, name), getattr(g, name))
    assert len(GaussianArrays.concat([g, back])) == 2 * len(g)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("means", np.zeros((4, 2))),
        ("quats", np.zeros((3, 4))),
        ("scales", np.zeros(4)),
        ("colors", np.full((4, 3), np.nan)),
        ("opacities", np.array([0.5, np.inf, 0.5, 0.5])),
        ("quats", np.tile([2.0, 0.0, 0.0, 0.0], (4, 1))),
        ("scales", np.zeros((4, 3))),
        ("colors", np.full((4, 3), 1.5)),
    ],
)
def test_bad_gaussians_raise_naming_the_field(field: str, value: np.ndarray) -> None:
    arrays = _gaussians() | {field: value}
    with pytest.raises(ValueError, match=field):
        GaussianArrays(**arrays)


def test_arrays_are_copied_and_read_only() -> None:
    arrays = _gaussians()
    g = GaussianArrays(**arrays)
    arrays["means"][0, 0] = 1.0
    assert g.means[0, 0] == 0.0
    with pytest.raises(ValueError):
        g.means[0, 0] = 1.0


_unit = st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(lambda q: np.linalg.norm(q) > 0.1)
_vec = st.lists(st.floats(-1, 1), min_size=3, max_size=3)


@settings(max_examples=50, deadline=None)
@given(pa=_vec, qa=_unit, pb=_vec, qb=_unit)
def test_transformed_composes_like_poses(pa: list[float], qa: list[float], pb: list[float], qb: list[float]) -> None:
    qa_n, qb_n = np.asarray(qa) / np.linalg.norm(qa), np.asarray(qb) / np.linalg.norm(qb)
    g = capsule_gaussians((0, 0, 0), (0.1, 0, 0), 0.02, (0.5, 0.5, 0.5), 0.02)
    stepwise = g.transformed(pb, qb_n).transformed(pa, qa_n)
    once = g.transformed(np.asarray(pa) + quat_to_mat(qa_n) @ pb, quat_mul(qa_n, qb_n))
    np.testing.assert_allclose(stepwise.means, once.means, atol=1e-12)
    np.testing.assert_allclose(quat_to_mat(stepwise.quats), quat_to_mat(once.quats), atol=1e-12)
    # Covariances R S² Rᵀ rotate with the pose.
    cov = quat_to_mat(g.quats) @ (g.scales[:, :, None] ** 2 * quat_to_mat(g.quats).transpose(0, 2, 1))
    rot = quat_to_mat(qa_n)
    moved = g.transformed(pa, qa_n)
    cov_moved = quat_to_mat(moved.quats) @ (moved.scales[:, :, None] ** 2 * quat_to_mat(moved.quats).transpose(0, 2, 1))
    np.testing.assert_allclose(cov_moved, rot @ cov @ rot.T, atol=1e-15)


def test_transformed_by_a_quarter_turn() -> None:
    g = GaussianArrays(**_gaussians(1) | {"means": np.array([[1.0, 0.0, 0.0]])})
    moved = g.transformed((0.0, 0.0, 1.0), axis_angle_quat((0, 0, 1), np.pi / 2))
    np.testing.assert_allclose(moved.means, [[0.0, 1.0, 1.0]], atol=1e-15)
