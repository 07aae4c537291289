"""Twin physics: servo behaviour, wrench response, pushing robustness, exact state copies, batching."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from realissim.assets import panda
from realissim.assets.pusht import T_NAME
from realissim.expert.scripted import joint_trajectory, sample_path, sweep_waypoints
from realissim.geometry import quat_to_mat
from realissim.spec import Pose, SceneSpec
from realissim.twin import PhysicsConfig, PhysicsDivergedError, TwinBatch, TwinPhysics
from realissim.twin.kinematics import PusherIK

SETTLE_S = 0.25
"""Stated settling time: a 0.2 rad joint step is within 1 mrad of its target after this long."""


def _arm_only(scene: SceneSpec) -> SceneSpec:
    return dataclasses.replace(scene, objects=(), goals=())


def test_arm_holds_a_configuration_without_drift(scene: SceneSpec) -> None:
    twin = TwinPhysics(_arm_only(scene))
    q0 = twin.state().q
    for _ in range(600):  # 10 s
        twin.step()
    assert np.abs(twin.state().q - q0).max() < 1e-6
    assert np.abs(twin.state().qd).max() < 1e-6


@pytest.mark.parametrize("joint", range(7))
def test_joint_step_settles_within_stated_time(scene: SceneSpec, joint: int) -> None:
    twin = TwinPhysics(_arm_only(scene))
    target = np.array(scene.robot.home)
    # Step away from the table (joint 2 forward would drive the rod into it) and inside the limits.
    step = -0.2 if joint == 1 or target[joint] + 0.2 > panda.Q_UPPER[joint] else 0.2
    target[joint] += step
    errors = []
    for _ in range(60):
        twin.set_joint_targets(target)
        twin.step()
        errors.append(np.abs(twin.state().q - target).max())
    settled = round(SETTLE_S * 60)
    assert max(errors[settled:]) < 1e-3, f"joint {joint + 1}: error {max(errors[settled:]):.2e} after {SETTLE_S}s"
    assert errors[0] > 1e-2  # the step was real


def test_targets_beyond_limits_are_clipped_and_enforced(scene: SceneSpec) -> None:
    twin = TwinPhysics(_arm_only(scene))
    wild = np.array(panda.Q_UPPER) + 1.0
    wild[1] = scene.robot.home[1]  # keep the shoulder away from the table
    sent = twin.set_joint_targets(wild)
    np.testing.assert_array_equal(sent[[0, 2, 3, 4, 5, 6]], np.array(panda.Q_UPPER)[[0, 2, 3, 4, 5, 6]])
    for _ in range(120):
        twin.set_joint_targets(wild)
        twin.step()
    q = twin.state().q
    assert np.all(q <= np.array(panda.Q_UPPER) + 1e-3)
    with pytest.raises(ValueError, match="panda_joint3"):
        twin.set_joint_targets([0, 0, np.nan, -1, 0, 1, 0])
    with pytest.raises(ValueError, match="last axis"):
        twin.set_joint_targets([0.0, 0.0])


def test_wrench_gives_newtons_and_eulers_acceleration(scene: SceneSpec) -> None:
    lifted = dataclasses.replace(
        scene, objects=(dataclasses.replace(scene.objects[0], pose=Pose((0.1, 0.1, 0.5), (0.9, 0.1, 0.2, 0.14**0.5))),)
    )
    cfg = PhysicsConfig(mjcf=dataclasses.replace(PhysicsConfig().mjcf, gravity=False))
    twin = TwinPhysics(lifted, cfg)
    force, torque = np.array([0.3, -0.2, 0.5]), np.array([0.002, 0.003, -0.001])
    twin.apply_wrench(T_NAME, force, torque)
    twin.step()
    s = twin.state()
    obj = lifted.objects[0]
    dt = 1.0 / cfg.fps
    acc = s.object_linvel[0] / dt  # the body origin is the centre of mass for the T
    np.testing.assert_allclose(acc, force / obj.mass, rtol=0.02)
    ixx, iyy, izz, ixy, ixz, iyz = obj.inertia.inertia
    I_body = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    R = quat_to_mat(obj.pose.quat)
    alpha_expected = np.linalg.solve(R @ I_body @ R.T, torque)
    np.testing.assert_allclose(s.object_angvel[0] / dt, alpha_expected, rtol=0.02)
    twin.step()  # the wrench lasts one frame only
    np.testing.assert_allclose(twin.state().object_linvel[0], s.object_linvel[0], rtol=1e-9)
    with pytest.raises(ValueError, match="NaN"):
        twin.apply_wrench(T_NAME, [np.nan, 0, 0], [0, 0, 0])
    with pytest.raises(KeyError, match="nothing"):
        twin.apply_wrench("nothing", force, torque)


@pytest.mark.slow
def test_pushing_at_max_cartesian_speed_is_stable(scene: SceneSpec) -> None:
    """10 s of sweeps through the T at the Panda's top Cartesian speed (joint-speed limited)."""
    twin = TwinPhysics(scene)
    ik = PusherIK(scene)
    rod = scene.robot.pusher
    height = rod.radius + 0.005
    sweep = sweep_waypoints(scene.objects[0].pose.pos, 0.2, 5, height)
    path = np.concatenate([[ik.tip_position(scene.robot.home), (*sweep[0, :2], 0.08)], sweep, sweep[::-1], sweep])
    tips = sample_path(path, panda.CARTESIAN_SPEED_LIMIT, twin.dt, accel=13.0)
    targets = joint_trajectory(ik, tips, scene.robot.home, panda.VELOCITY_LIMIT, twin.dt)
    assert len(targets) >= 600
    obj = scene.objects[0]
    half_h = 0.0175
    centers = np.asarray(obj.spheres.centers)
    tip_speeds, depth, start = [], [], twin.state().object_pos[0].copy()
    prev_tip = twin.site_pose(panda.TIP_SITE)[0]
    for q in targets[:600]:
        twin.set_joint_targets(q)
        twin.step()  # raises PhysicsDivergedError on NaN or runaway speeds
        s = twin.state()
        tip, rot = twin.site_pose(panda.TIP_SITE)
        tip_speeds.append(np.linalg.norm(tip - prev_tip) / twin.dt)
        prev_tip = tip
        z = s.object_pos[0, 2]
        assert half_h - 0.003 < z < half_h + 0.01, f"T left the table: z = {z:.4f}"
        up = quat_to_mat(s.object_quat[0])[:, 2]
        assert up[2] > np.cos(np.radians(15)), "T tipped over"
        # No tunnelling: no sphere centre closer to the rod's axis segment than the radii allow.
        world = s.object_pos[0] + centers @ quat_to_mat(s.object_quat[0]).T
        axis_top = tip + rot[:, 2] * -rod.length
        seg = axis_top - tip
        t = np.clip((world - tip) @ seg / (seg @ seg), 0.0, 1.0)
        dist = np.linalg.norm(world - (tip + t[:, None] * seg), axis=1)
        depth.append(rod.radius + obj.spheres.radii[0] - dist.min())
    # Soft contacts let the rod sink in a little at a 4 ms step; passing through would take more than
    # the rod's radius (its axis inside a sphere).
    print(f"deepest rod penetration {max(depth) * 1e3:.1f} mm, top tip speed {max(tip_speeds):.2f} m/s")
    assert max(depth) < rod.radius, f"rod sank {max(depth) * 1e3:.1f} mm into the T"
    assert np.linalg.norm(twin.state().object_pos[0, :2] - start[:2]) > 0.05, "the T was never pushed"
    assert max(tip_speeds) > 1.0


def test_a_resting_object_sleeps_and_the_pusher_or_a_wrench_wakes_it(scene: SceneSpec) -> None:
    """With `sleep`, the T resting on the table is frozen and its 40 table contacts are not computed; the pusher
    reaching it wakes it and pushes it as far as without sleeping. Not bit for bit: a push through the T is
    chaotic at the micrometre (offsetting the T's start by 1 µm moves its end by ~1 mm here, 10 µm by ~8 mm), so
    the two runs agree to a centimetre. A wrench wakes it too."""
    ik = PusherIK(scene)
    sweep = sweep_waypoints(scene.objects[0].pose.pos, 0.12, 3, scene.robot.pusher.radius + 0.005)
    path = np.concatenate([[ik.tip_position(scene.robot.home), (*sweep[0, :2], 0.08)], sweep])
    ends, contacts, still = {}, {}, {}
    for sleep in (False, True):
        twin = TwinPhysics(scene, PhysicsConfig(sleep=sleep))
        targets = joint_trajectory(ik, sample_path(path, 0.3, twin.dt, accel=3.0), scene.robot.home,
                                   panda.VELOCITY_LIMIT, twin.dt)  # fmt: skip
        poses = []
        for k, q in enumerate([*targets, *[targets[-1]] * 120]):
            twin.set_joint_targets(q)
            twin.step()
            poses.append(twin.data.qpos[twin.layout.object_qpos[0]].copy())
            if k == 40:  # the arm still on its way: the T rests
                contacts[sleep] = twin.data.ncon
        still[sleep] = np.array_equal(poses[20], poses[40])
        ends[sleep] = poses[-1][:3]
        assert np.linalg.norm(ends[sleep][:2] - poses[0][:2]) > 0.1  # pushed along the sweep
        if sleep:
            assert still[True] and twin.data.qvel[twin.layout.object_dof[0]].tolist() == [0.0] * 6
            twin.apply_wrench(T_NAME, [2.0, 0.0, 0.0], np.zeros(3))
            twin.step()
            assert twin.data.qvel[twin.layout.object_dof[0][0]] > 0.01  # the wrench woke it
            for _ in range(60):
                twin.step()
            assert twin.data.ncon == 0  # asleep again
            x, body = twin.layout.object_qpos[0][0], twin.layout.object_bodies[0]
            before = twin.data.xpos[body, 0]
            twin.data.qpos[x] += 0.05  # a pose written to the sleeping T: seen at the next step
            twin.step()
            assert twin.data.ncon == 40 and abs(twin.data.xpos[body, 0] - before - 0.05) < 1e-4
    assert contacts[False] == 40 and contacts[True] == 0  # the resting T's contacts are not computed asleep
    assert not still[False]  # (awake, it creeps by float rounding)
    assert np.linalg.norm(ends[True] - ends[False]) < 0.01


def test_restore_gives_bit_identical_continuation(scene: SceneSpec) -> None:
    twin = TwinPhysics(scene)
    rng = np.random.default_rng(3)
    home = np.array(scene.robot.home)
    for _ in range(30):
        twin.set_joint_targets(home + rng.normal(scale=0.05, size=7))
        twin.apply_wrench(T_NAME, rng.normal(size=3), rng.normal(scale=0.01, size=3))
        twin.step()
    snap = twin.snapshot()
    commands = [(home + rng.normal(scale=0.05, size=7), rng.normal(size=3)) for _ in range(60)]

    def run() -> np.ndarray:
        out = []
        for q, f in commands:
            twin.set_joint_targets(q)
            twin.apply_wrench(T_NAME, f, np.zeros(3))
            twin.step()
            out.append(twin.snapshot().state)
        return np.array(out)

    first = run()
    twin.restore(snap)
    assert twin.frame == snap.frame
    second = run()
    assert np.array_equal(first, second)


def test_batch_equals_separate_twins(scene: SceneSpec) -> None:
    n = 5
    rng = np.random.default_rng(4)
    batch = TwinBatch(scene, n, nthread=2)
    singles = [TwinPhysics(scene) for _ in range(n)]
    home = np.array(scene.robot.home)
    for _ in range(40):
        q = home + rng.normal(scale=0.05, size=(n, 7))
        w = rng.normal(scale=0.5, size=(n, 1, 6)) * [1, 1, 1, 0.01, 0.01, 0.01]
        batch.set_joint_targets(q)
        batch.apply_wrenches(w)
        batch.step()
        for i, twin in enumerate(singles):
            twin.set_joint_targets(q[i])
            twin.apply_wrenches(w[i])
            twin.step()
    bs = batch.state()
    for i, twin in enumerate(singles):
        assert np.array_equal(batch.snapshot().states[i], twin.snapshot().state), f"twin {i} differs"
        s = twin.state()
        for field in dataclasses.fields(s):
            # Derived (rotated) quantities may differ in the last bit between batched and single maths.
            np.testing.assert_allclose(getattr(bs, field.name)[i], getattr(s, field.name), rtol=0, atol=1e-14)
    snap = batch.snapshot()
    batch.step()
    after = batch.state().object_pos.copy()
    batch.restore(snap)
    batch.step()
    assert np.array_equal(batch.state().object_pos, after)


def test_a_batch_follows_a_planned_chunk_as_it_follows_frame_by_frame_targets(scene: SceneSpec) -> None:
    """`plan_targets` checks a chunk's frames at once; set frame by frame they command the servos exactly as
    `set_joint_targets` called on each frame does (positions clipped, velocities the finite differences)."""
    rng = np.random.default_rng(5)
    home = np.array(scene.robot.home)
    planned, direct = TwinBatch(scene, 3, nthread=1), TwinBatch(scene, 3, nthread=1)
    for _ in range(3):  # chunks of 8 frames, a few targets beyond the joint limits
        targets = home + rng.normal(scale=0.05, size=(8, 3, 7)) + rng.choice([0.0, 3.0], size=(8, 3, 7), p=[0.9, 0.1])
        commands, velocities = planned.plan_targets(targets)
        for k in range(8):
            planned.set_planned(commands[k], velocities[k])
            planned.step()
            direct.set_joint_targets(targets[k])
            direct.step()
            assert np.array_equal(planned.snapshot().states, direct.snapshot().states)
    bad = np.tile(home, (4, 3, 1))
    bad[2, 1, 3] = np.nan
    with pytest.raises(ValueError, match=r"joint target for .* is not finite"):
        planned.plan_targets(bad)


def test_a_batch_applies_a_wrench_for_one_frame_only(scene: SceneSpec) -> None:
    batch, single = TwinBatch(scene, 2, nthread=1), TwinPhysics(scene)
    w = np.zeros((2, 1, 6))
    w[:, 0, 0] = 3.0  # N along x
    batch.apply_wrenches(w)
    single.apply_wrenches(w[0])
    for _ in range(30):
        batch.step()
        single.step()
    assert np.array_equal(batch.snapshot().states[0], single.snapshot().state)
    pos, quat = batch.object_poses()
    assert np.array_equal(pos, batch.state().object_pos) and np.array_equal(quat, batch.state().object_quat)


def test_divergence_is_reported_with_body_frame_and_history(scene: SceneSpec) -> None:
    twin = TwinPhysics(scene, PhysicsConfig(guard_history=5))
    for _ in range(10):
        twin.step()
    twin.apply_wrench(T_NAME, [1e9, 0, 0], [0, 0, 0])
    with pytest.raises(PhysicsDivergedError) as info:
        twin.step()
    err = info.value
    assert err.body == T_NAME and err.frame == 11 and "frame 11" in str(err)
    assert len(err.history) == 5 and err.history[-1].frame == 10
    twin.restore(err.history[-1])  # the last good state, with the pending wrench: replays the failure
    with pytest.raises(PhysicsDivergedError):
        twin.step()
    twin.restore(err.history[-1])
    twin.apply_wrench(T_NAME, [0, 0, 0], [0, 0, 0])
    twin.step()
    assert np.isfinite(twin.state().object_pos).all()
    batch = TwinBatch(scene, 3)
    wrenches = np.zeros((3, 1, 6))
    wrenches[2, 0, 0] = 1e9
    batch.apply_wrenches(wrenches)
    with pytest.raises(PhysicsDivergedError, match="twin 2"):
        batch.step()
