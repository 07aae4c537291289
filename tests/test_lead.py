"""The lead bound: the twin arm may not run ahead of the real arm by more than `max_lead` at its tip."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.runtime import Runtime, RuntimeConfig
from realissim.runtime.lead import LeadBound
from realissim.spec.scene import SceneSpec
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


def _tip_gaps(scene: SceneSpec, **changes: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 2 s online run (follower on, no correction) asked to jump 0.5 rad on the shoulder: per frame, the twin
    tip's distance from the real tip (oracle, m) and the reported lead; and the twin's final joint error."""
    config = replace(RuntimeConfig(correct=False), **changes)
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
    gaps, leads, miss = _tip_gaps(scene, max_lead=None, arm_limits=None)
    assert gaps.max() > 0.05 and np.isnan(leads).all() and np.abs(miss).max() < 0.02
    # Shaped within 0.8 of the arm's limits, it still leads by the real arm's delay at speed (measured 31 mm).
    gaps, leads, miss = _tip_gaps(scene, max_lead=None, arm_limits=0.8)
    assert gaps.max() > 0.02
    # Bounded but not shaped, it waits while the target is far, but stops abruptly and the real arm, at speed
    # right behind, overshoots it (measured 35 mm).
    gaps, leads, miss = _tip_gaps(scene, max_lead=0.01, arm_limits=None)
    approach = leads > 0.05
    assert approach.sum() > 10 and gaps[approach].max() < 0.015 and gaps.max() > 0.02
    # Both, the default: within the bound all the way (measured ≤ 10 mm), and the twin arm arrives.
    assert (RuntimeConfig().max_lead, RuntimeConfig().arm_limits) == (0.01, 0.8)
    gaps, leads, miss = _tip_gaps(scene)
    assert leads[0] > 0.1 and gaps.max() < 0.013
    assert np.abs(miss).max() < 0.02
