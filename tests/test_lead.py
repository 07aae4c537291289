"""The lead bound: the twin arm may not run ahead of the real arm by more than `max_lead` at its tip."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from realissim.assets import panda
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.real.follower import FollowerConfig
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.runtime import ArmConfig, Runtime, RuntimeConfig
from realissim.runtime.lead import LeadBound
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK
from realissim.twin.physics import TwinPhysics


def test_bound_shortens_a_far_step_onto_the_segment_and_never_steps_back(scene: SceneSpec) -> None:
    twin = TwinPhysics(scene)
    bound = LeadBound(twin.model, twin.layout.robot_qpos, 0.01)
    q_real = np.asarray(scene.robot.home, dtype=np.float64)
    far = q_real + np.array([0.4, 0.2, 0.0, -0.3, 0.0, 0.2, 0.0])
    q, lead = bound.bound(far, q_real, q_real)
    assert lead > 0.1  # the far target's tip is more than 10 cm ahead
    assert np.linalg.norm(bound.tip(q) - bound.tip(q_real)) == pytest.approx(0.01, rel=0.05)
    moved = far != q_real
    scale = (q - q_real)[moved] / (far - q_real)[moved]
    assert np.allclose(scale, scale[0]) and 0 < scale[0] < 0.2  # on the segment from q_real to far
    near = q_real + 1e-3
    q, lead = bound.bound(near, q_real, q_real)
    assert np.array_equal(q, near) and lead < 0.01
    # The real arm fell behind: the twin's desired joints already lead by more than the bound. They hold rather
    # than jump back; a step back towards the real arm is taken whole.
    ahead = q_real + 0.25 * (far - q_real)
    q, _ = bound.bound(far, ahead, q_real)
    assert np.allclose(q, ahead, atol=2e-3)
    q, _ = bound.bound(q_real + 0.1 * (far - q_real), ahead, q_real)
    assert np.allclose(q, q_real + 0.1 * (far - q_real))
    with pytest.raises(ValueError, match="finite"):
        bound.bound(np.full(7, np.nan), q_real, q_real)
    with pytest.raises(ValueError, match="max_lead"):
        LeadBound(twin.model, twin.layout.robot_qpos, 0.0)


def _off_path(scene: SceneSpec, path_frames: int | None) -> tuple[float, int]:
    """A tip path that travels 12 cm at hover height, then comes straight down (one target a frame, 60 fps); the
    real arm follows the targets 12 frames late. The largest distance (m) of the bounded desired tip from the path,
    and the frames it took to reach the path's end."""
    twin = TwinPhysics(scene)
    bound = LeadBound(twin.model, twin.layout.robot_qpos, 0.01, path_frames)
    ik = PusherIK(scene)
    corner = np.array([0.06, 0.0, 0.06])
    start, bottom = corner - [0.12, 0.0, 0.0], corner - [0.0, 0.0, 0.045]
    tips = sample_path(np.array([start, corner, bottom]), 0.6, 1 / 60, accel=6.0)
    q_start = ik.solve(start, np.asarray(scene.robot.home))
    targets = joint_trajectory(ik, tips, q_start, panda.VELOCITY_LIMIT, 1 / 60)
    desired, worst = q_start, 0.0
    for i in range(len(targets) + 60):
        target, real = targets[min(i, len(targets) - 1)], targets[max(0, min(i - 12, len(targets) - 1))]
        desired, _ = bound.bound(target, desired, real)
        tip = bound.tip(desired)
        travel = np.linalg.norm(tip - np.clip(tip, start, corner))  # from the hover leg, an x-aligned segment
        down = np.linalg.norm(tip - np.clip(tip, bottom, corner))  # from the vertical leg
        worst = max(worst, min(travel, down))
        if np.linalg.norm(tip - bottom) < 1e-3:
            return worst, i
    return worst, -1


def test_with_a_path_the_bounded_tip_turns_the_corner_instead_of_cutting_it(scene: SceneSpec) -> None:
    # Straight for the latest target, the lagging desired tip comes down diagonally while still travelling.
    cut, _ = _off_path(scene, None)
    assert cut > 0.01  # measured 18 mm
    # Along the policy's targets in order, it stays on the path (the joints' interpolation between targets a
    # frame apart bends it by well under a millimetre: measured 0.05 mm) and arrives as soon.
    kept, frames = _off_path(scene, 30)
    assert kept < 0.001 and frames == _off_path(scene, None)[1]
    # A path kept too short to cover the lag cuts the corner again (measured 15 mm).
    short, _ = _off_path(scene, 2)
    assert short > 0.01
    twin = TwinPhysics(scene)
    with pytest.raises(ValueError, match="path_frames"):
        LeadBound(twin.model, twin.layout.robot_qpos, 0.01, 0)


def test_a_path_the_real_arm_cannot_close_on_gives_way_to_the_latest_target(scene: SceneSpec) -> None:
    # The real arm stays where it is (held by contact, say). The first target is far ahead of it, the latest near:
    # along the path the desired joints wait at the bound on the way to the first, then, stalled, head for the
    # latest as the bound without a path does at once.
    twin = TwinPhysics(scene)
    bound = LeadBound(twin.model, twin.layout.robot_qpos, 0.01, path_frames=60)
    q_real = np.asarray(scene.robot.home, dtype=np.float64)
    far, near = q_real + np.array([0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), q_real + 1e-3
    desired, _ = bound.bound(far, q_real, q_real)
    assert 0 < np.abs(desired - q_real).max() < 0.1
    steps = []
    for _ in range(LeadBound.STALL_FRAMES + 2):
        desired, _ = bound.bound(near, desired, q_real)
        steps.append(desired)
    assert np.array_equal(steps[0], steps[LeadBound.STALL_FRAMES - 1])  # waiting on the way to the first
    assert np.array_equal(steps[-1], near) and bound.behind == 0  # then given way to the latest


def test_the_bound_grows_with_the_real_tips_speed_by_the_lag(scene: SceneSpec) -> None:
    twin = TwinPhysics(scene)
    fixed = LeadBound(twin.model, twin.layout.robot_qpos, 0.01)
    lagged = LeadBound(twin.model, twin.layout.robot_qpos, 0.01, lag_frames=3.0)
    home = np.asarray(scene.robot.home, dtype=np.float64)
    far = home + np.array([0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    before, now = home, home + np.array([0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # the real arm moved this frame
    moved = np.linalg.norm(fixed.tip(now) - fixed.tip(before))
    for bound in (fixed, lagged):
        bound.bound(far, before, before)  # the first frame: no travel known yet, the fixed bound
    q_fixed, _ = fixed.bound(far, now, now)
    q_lagged, _ = lagged.bound(far, now, now)
    assert np.linalg.norm(fixed.tip(q_fixed) - fixed.tip(now)) == pytest.approx(0.01, rel=0.02)
    assert np.linalg.norm(fixed.tip(q_lagged) - fixed.tip(now)) == pytest.approx(0.01 + 3 * moved, rel=0.02)
    # A real arm that stops gets the fixed bound back at once.
    q, _ = lagged.bound(far, now, now)
    assert np.linalg.norm(fixed.tip(q) - fixed.tip(now)) == pytest.approx(0.01, rel=0.02)
    with pytest.raises(ValueError, match="lag_frames"):
        LeadBound(twin.model, twin.layout.robot_qpos, 0.01, lag_frames=-1.0)
    with pytest.raises(ValueError, match="lead_lag_frames"):
        ArmConfig(lead_lag_frames=math.nan)
    with pytest.raises(ValueError, match="lead_path_s"):
        ArmConfig(lead_path_s=0.0)


def _tip_gaps(scene: SceneSpec, **changes: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 2 s online run (follower on, no correction) asked to jump 0.5 rad on the shoulder: per frame, the twin
    tip's distance from the real tip (oracle, m) and the reported lead; and the twin's final joint error."""
    config = RuntimeConfig(correct=False, arm=replace(ArmConfig(), **changes))
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, config, world)
        runtime.reset()
        bound = LeadBound(runtime.twin.model, runtime.twin.layout.robot_qpos, 1.0)  # for its forward kinematics
        target = np.asarray(scene.robot.home, dtype=np.float64) + np.array([0.5, 0, 0, 0, 0, 0, 0])
        gaps, leads = [], []
        for _ in range(120):
            report = runtime.frame(target)
            gaps.append(np.linalg.norm(bound.tip(report.state.q) - bound.tip(world.oracle.read().q)))
            leads.append(report.lead)
    return np.asarray(gaps), np.asarray(leads), report.state.q - target


def test_the_twin_arm_waits_for_the_real_one_and_still_arrives(scene: SceneSpec) -> None:
    # Neither bounded nor shaped, the twin's tip runs far ahead of the real one (measured 15 cm).
    gaps, leads, miss = _tip_gaps(scene, max_lead=None, limits=None)
    assert gaps.max() > 0.05 and np.isnan(leads).all() and np.abs(miss).max() < 0.02
    # Shaped within 0.8 of the arm's limits, it still leads by the real arm's delay at speed (measured 31 mm).
    gaps, leads, miss = _tip_gaps(scene, max_lead=None, limits=0.8)
    assert gaps.max() > 0.02
    # Bounded but not shaped, it waits while the target is far, but stops abruptly and the real arm, at speed
    # right behind, overshoots it (measured 35 mm).
    gaps, leads, miss = _tip_gaps(scene, max_lead=0.01, limits=None)
    approach = leads > 0.05
    assert approach.sum() > 10 and gaps[approach].max() < 0.015 and gaps.max() > 0.02
    # Both, the default: within the bound all the way (measured ≤ 10 mm), and the twin arm arrives.
    assert (ArmConfig().max_lead, ArmConfig().limits) == (0.01, 0.8)
    gaps, leads, miss = _tip_gaps(scene)
    assert leads[0] > 0.1 and gaps.max() < 0.013
    assert np.abs(miss).max() < 0.02


def test_a_target_the_arms_cannot_reach_does_not_stall_the_path(scene: SceneSpec) -> None:
    # The elbow's target lies inside the follower's margin at its limit (0.1 rad here): the real arm stops short of
    # it, further than the bound from its tip. Clipped to what the arms reach before bounding, the desired joints
    # arrive there and go on along the path to the next target; bounded towards the unreachable tip, they would
    # never reach it and never go on.
    config = RuntimeConfig(correct=False, arm=ArmConfig(FollowerConfig(position_margin=0.1), lead_path_s=1.0))
    home = np.asarray(scene.robot.home, dtype=np.float64)
    edge = home.copy()
    edge[3] = scene.robot.joints[3].lower + 0.005
    after = home + np.array([0.15, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, config, world)
        runtime.reset()
        for _ in range(90):
            report = runtime.frame(edge)
        assert report.state.q[3] == pytest.approx(scene.robot.joints[3].lower + 0.1, abs=0.02)
        for _ in range(90):
            report = runtime.frame(after)
    assert np.abs(report.state.q - after).max() < 0.01
