"""Assets: Panda kinematics against Franka's published data, the T's geometry, the PushT preset."""

from __future__ import annotations

import dataclasses
import itertools

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realissim.assets import panda
from realissim.assets.mass import box_union_inertia, sphere_union_inertia
from realissim.assets.mjcf import scene_to_mjcf
from realissim.assets.pusht import (
    PUSHER_HOME_TIP,
    WORKSPACE_CENTER,
    WORKSPACE_HALF,
    PushTConfig,
    TBlock,
    pusht_scene,
)
from realissim.geometry import project_points
from realissim.spec import BoxSpec, Pose, SceneSpec, SpecError
from realissim.twin.kinematics import IKConfig, IKError, PusherIK


def _robot_model(scene: SceneSpec) -> tuple[mujoco.MjModel, mujoco.MjData]:
    robot_only = dataclasses.replace(scene, objects=(), goals=(), robot=dataclasses.replace(scene.robot, base=Pose()))
    model = mujoco.MjModel.from_xml_string(scene_to_mjcf(robot_only))
    return model, mujoco.MjData(model)


def test_flange_at_ready_matches_published_pose(scene: SceneSpec) -> None:
    flange = panda.dh_forward_kinematics(panda.READY_Q)
    assert np.linalg.norm(flange[:3, 3] - panda.READY_FLANGE_POS) < 1e-3
    np.testing.assert_allclose(flange[:3, 2], [0, 0, -1], atol=1e-9)  # flange axis points down
    model, data = _robot_model(scene)
    data.qpos[:] = panda.READY_Q
    mujoco.mj_kinematics(model, data)
    site = model.site(panda.FLANGE_SITE).id
    assert np.linalg.norm(data.site_xpos[site] - panda.READY_FLANGE_POS) < 1e-3


def test_mujoco_model_matches_dh_everywhere(scene: SceneSpec) -> None:
    model, data = _robot_model(scene)
    rng = np.random.default_rng(1)
    site = model.site(panda.FLANGE_SITE).id
    for _ in range(50):
        q = rng.uniform(panda.Q_LOWER, panda.Q_UPPER)
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        ref = panda.dh_forward_kinematics(q)
        np.testing.assert_allclose(data.site_xpos[site], ref[:3, 3], atol=1e-9)
        np.testing.assert_allclose(data.site_xmat[site].reshape(3, 3), ref[:3, :3], atol=1e-9)


def test_model_carries_published_limits_and_masses(scene: SceneSpec) -> None:
    model, _ = _robot_model(scene)
    for i, name in enumerate(panda.JOINT_NAMES):
        j = model.joint(name)
        np.testing.assert_allclose(j.range, [panda.Q_LOWER[i], panda.Q_UPPER[i]])
        np.testing.assert_allclose(model.jnt_actfrcrange[j.id], [-panda.TORQUE_LIMIT[i], panda.TORQUE_LIMIT[i]])
    arm_mass = sum(model.body(n).mass[0] for n in panda.LINK_NAMES[1:])
    assert arm_mass == pytest.approx(sum(m for m, _, _ in panda.LINK_INERTIALS[1:]))
    for name in (*panda.LINK_NAMES[1:], panda.PUSHER_BODY):
        assert model.body_gravcomp[model.body(name).id] == 1.0, f"{name} is not gravity compensated"


def test_unknown_robot_model_is_a_spec_error(scene: SceneSpec) -> None:
    bad = dataclasses.replace(scene, robot=dataclasses.replace(scene.robot, model="ur5"))
    with pytest.raises(SpecError, match="unknown robot model"):
        scene_to_mjcf(bad)


def test_tblock_dimensions_and_mass_properties() -> None:
    t = TBlock()
    bar, stem = t.boxes()
    assert 2 * bar.half[0] == pytest.approx(0.20) and 2 * bar.half[1] == pytest.approx(0.05)
    assert 2 * stem.half[0] == pytest.approx(0.05) and 2 * stem.half[1] == pytest.approx(0.15)
    assert 2 * bar.half[2] == pytest.approx(0.035)
    assert t.volume == pytest.approx((0.2 * 0.05 + 0.05 * 0.15) * 0.035)
    # The origin is the centre of mass: area-weighted box centres cancel.
    assert bar.volume * bar.center[1] + stem.volume * stem.center[1] == pytest.approx(0.0, abs=1e-15)
    exact = np.asarray(t.inertia(0.25).inertia)
    voxel = np.asarray(sphere_union_inertia(t.spheres(0.00875), 0.25, resolution=64).inertia)
    np.testing.assert_allclose(voxel[:3], exact[:3], rtol=0.04)  # fine spheres approach the exact T


def test_box_union_inertia_counts_shared_volume_once() -> None:
    """One box, the same box cut in two touching halves, and two overlapping boxes covering it: the same mass
    properties; an off-centre box has its centroid as centre of mass."""
    whole = BoxSpec((0.01, 0.02, 0.0), (0.1, 0.05, 0.02))
    halves = (BoxSpec((-0.04, 0.02, 0.0), (0.05, 0.05, 0.02)), BoxSpec((0.06, 0.02, 0.0), (0.05, 0.05, 0.02)))
    overlapping = (BoxSpec((-0.02, 0.02, 0.0), (0.07, 0.05, 0.02)), BoxSpec((0.04, 0.02, 0.0), (0.07, 0.05, 0.02)))
    expected = box_union_inertia((whole,), 0.3)
    a, b, c = 0.2, 0.1, 0.04
    np.testing.assert_allclose(
        expected.inertia, np.array([b * b + c * c, a * a + c * c, a * a + b * b, 0, 0, 0]) * 0.3 / 12
    )
    np.testing.assert_allclose(expected.com, whole.center, atol=1e-15)
    for boxes in (halves, overlapping, (*overlapping, whole)):
        got = box_union_inertia(boxes, 0.3)
        np.testing.assert_allclose(got.com, expected.com, atol=1e-15)
        np.testing.assert_allclose(got.inertia, expected.inertia, rtol=1e-12, atol=1e-18)


@pytest.mark.parametrize("radius", [0.0175, 0.01, 0.006])
def test_spheres_lie_inside_and_cover_the_t(radius: float) -> None:
    t = TBlock()
    spheres = t.spheres(radius)
    centers = np.asarray(spheres.centers)
    # Every ball inside the exact T: sample points on each sphere's surface.
    dirs = np.random.default_rng(0).normal(size=(200, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    for c in centers:
        assert t.contains(c + 0.999 * radius * dirs).all()
    # Coverage: every point of the T's mid-plane lies within one spacing (= radius) of a sphere.
    grid = np.stack(np.meshgrid(np.linspace(-0.1, 0.1, 81), np.linspace(-0.14, 0.07, 85), [0.0]), -1).reshape(-1, 3)
    inside = grid[t.contains(grid)]
    dist = np.min(np.linalg.norm(inside[:, None] - centers[None], axis=2), axis=1)
    assert dist.max() <= radius * 1.5
    with pytest.raises(ValueError, match="radius"):
        t.spheres(0.02)


def test_cameras_together_see_the_whole_workspace(scene: SceneSpec) -> None:
    cx, cy = WORKSPACE_CENTER
    xs = np.linspace(cx - WORKSPACE_HALF - 0.1, cx + WORKSPACE_HALF + 0.1, 15)
    ys = np.linspace(cy - WORKSPACE_HALF - 0.1, cy + WORKSPACE_HALF + 0.1, 15)
    pts = np.array([(x, y, z) for x in xs for y in ys for z in (0.0, 0.035)])
    seen = np.zeros(len(pts), dtype=int)
    for cam in scene.cameras:
        uv, depth = project_points(pts, cam.K_array, cam.X_WC_array)
        seen += (depth > 0) & (uv[:, 0] >= 0) & (uv[:, 0] < cam.width) & (uv[:, 1] >= 0) & (uv[:, 1] < cam.height)
    assert seen.min() >= 2, "every workspace point (T included) must be in view of at least two cameras"


def test_camera_size_is_configurable() -> None:
    small = pusht_scene(PushTConfig(camera_width=160, camera_height=90))
    assert all((c.width, c.height) == (160, 90) for c in small.cameras)
    assert small.cameras[0].K[0][2] == 80.0


def test_pusher_reaches_the_whole_workspace_at_table_height(scene: SceneSpec) -> None:
    ik = PusherIK(scene, IKConfig(max_iterations=1000, tolerance=2e-4))
    q_mid = ik.solve((*WORKSPACE_CENTER, 0.05), scene.robot.home)
    rod = scene.robot.pusher
    assert rod is not None
    for x in np.linspace(-WORKSPACE_HALF, WORKSPACE_HALF, 5):
        for y in np.linspace(-WORKSPACE_HALF, WORKSPACE_HALF, 5):
            q = ik.solve((x, y, rod.radius + 0.005), q_mid)
            assert np.all(q >= np.asarray(panda.Q_LOWER)) and np.all(q <= np.asarray(panda.Q_UPPER))
    np.testing.assert_allclose(ik.tip_position(scene.robot.home), PUSHER_HOME_TIP, atol=1e-3)


def test_pusher_joints_are_a_function_of_the_tip_not_of_the_path(scene: SceneSpec) -> None:
    """With the home posture target, a tip path that returns returns the arm to the same joints, and a twisted
    seed (reached by null-space drift along long paths: q1 and q3 counter-rotated near the base) does not keep the
    arm twisted. With the seed as posture target the twist stays (the reason for the default)."""
    home = np.asarray(scene.robot.home)
    corners = [(0.0, 0.0), (-0.2, 0.05), (-0.22, 0.2), (0.1, 0.2), (0.2, -0.25), (-0.2, -0.2), (0.0, 0.0)]
    pts = [np.array([x, y, 0.015]) for x, y in corners]
    path = np.concatenate([np.linspace(a, b, 40) for a, b in itertools.pairwise(pts)])
    ik = PusherIK(scene)
    q = first = ik.solve(path[0], home)
    for p in path:
        q = ik.solve(p, q, strict=False)
        assert np.linalg.norm(ik.tip_position(q) - p) < 2e-4
    np.testing.assert_allclose(q, first, atol=1e-3)
    twisted = np.array([-0.8, -0.37, 1.39, -2.86, 0.84, 2.64, 0.35])
    tip = ik.tip_position(twisted)
    np.testing.assert_allclose(ik.solve(tip, twisted), ik.solve(tip, home), atol=1e-3)
    assert abs(ik.solve(tip, twisted)[0]) < 0.4
    drifting = PusherIK(scene, IKConfig(posture="seed"))
    assert abs(drifting.solve(tip, twisted)[0] - twisted[0]) < 0.05


def test_compiled_ik_agrees_with_mink(scene: SceneSpec) -> None:
    """The compiled solver and mink's solve the same problem: both put the tip on the target with the rod vertical,
    and agree on every joint but the rod's spin about its own (vertical) axis, which does not move the tip. Past the
    arm's reach (not strict) both stop within the joint limits."""
    compiled, reference = PusherIK(scene), PusherIK(scene, IKConfig(solver="mink"))
    rng = np.random.default_rng(3)
    home = np.asarray(scene.robot.home)
    lower, upper = np.asarray(panda.Q_LOWER), np.asarray(panda.Q_UPPER)
    for _ in range(25):
        p = np.array([*(np.asarray(WORKSPACE_CENTER) + rng.uniform(-WORKSPACE_HALF, WORKSPACE_HALF, 2)),
                      rng.uniform(0.012, 0.08)])  # fmt: skip
        a, b = compiled.solve(p, home), reference.solve(p, home)
        assert np.linalg.norm(compiled.tip_position(a) - p) < 1e-4
        compiled._scratch.qpos[:] = a
        mujoco.mj_kinematics(compiled.model, compiled._scratch)
        assert compiled._scratch.site_xmat[compiled._site][8] < -1 + 1e-6, "the rod must point straight down"
        np.testing.assert_allclose(a[:6], b[:6], atol=0.03)
    far = np.array([1.0, 0.0, 0.015])  # 1.5 m from the base: out of reach
    for ik in (compiled, reference):
        with pytest.raises(IKError):
            ik.solve(far, home)
        q = ik.solve(far, home, strict=False)
        assert np.all(q >= lower - 1e-9) and np.all(q <= upper + 1e-9)
    with pytest.raises(ValueError, match="solver"):
        IKConfig(solver="scipy")  # type: ignore[arg-type]


def test_compiled_ik_reaches_a_target_against_joint_4s_limit(scene: SceneSpec) -> None:
    """A push target of a shipped start close to the base (pusht/eval-v1): the arm folds with joint 4 at its lower
    limit, where the posture's pull alone held the tip 0.1 mm off until the solver drops it once the error stalls.
    Strict from home, the tip is reached, within the limits."""
    ik = PusherIK(scene)
    target = np.array([-0.25595784, -0.0690715, 0.015])
    q = ik.solve(target, np.asarray(scene.robot.home))  # raises IKError if not reached
    assert np.linalg.norm(ik.tip_position(q) - target) < 1e-4
    assert abs(q[3] - panda.Q_LOWER[3]) < 1e-3, "joint 4 at its limit: the case this checks"
    assert np.all(q >= np.asarray(panda.Q_LOWER) - 1e-9) and np.all(q <= np.asarray(panda.Q_UPPER) + 1e-9)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_ik_steps_box_qp_is_the_bounded_minimiser(seed: int) -> None:
    """Each compiled IK step is a 7-variable quadratic programme within the joint limits' box: its answer is the
    box-constrained minimiser (scipy's bounded least squares on the same problem as the reference)."""
    from scipy.optimize import lsq_linear

    from realissim.twin.kinematics import _box_qp

    rng = np.random.default_rng(seed)
    a = rng.normal(size=(9, 7))
    h = a.T @ a + 1e-3 * np.eye(7)
    g = rng.normal(size=7)
    lo = -rng.uniform(0.0, 1.0, 7) * (rng.random(7) < 0.7)  # some bounds at 0: a joint at its limit
    hi = rng.uniform(0.0, 1.0, 7)
    x = _box_qp(h, g, lo, hi)
    chol = np.linalg.cholesky(h)  # ½xᵀhx + gᵀx = ½|cholᵀx + chol⁻¹g|² + const
    ref = lsq_linear(chol.T, -np.linalg.solve(chol, g), bounds=(lo, hi + 1e-12), tol=1e-12).x
    assert np.all(x >= lo - 1e-12) and np.all(x <= hi + 1e-12)
    value = lambda v: 0.5 * v @ h @ v + g @ v  # noqa: E731
    assert value(x) <= value(ref) + 1e-9 * (1 + abs(value(ref)))
