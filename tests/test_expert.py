"""The PushT expert: its push model, its choices, and whole episodes offline."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from realissim.assets.pusht import TBlock
from realissim.envs import Env
from realissim.eval.episode import run_episode
from realissim.expert.push_model import PushModel
from realissim.expert.pusht import PushTExpert, t_keypoints, t_outline
from realissim.expert.routing import route_in_plane
from realissim.geometry import yaw_quat
from realissim.policy import Policy
from realissim.tasks import make, start_set


@pytest.fixture(scope="module")
def task():
    return make("pusht")


@pytest.fixture(scope="module")
def expert(task):
    return PushTExpert(task.scene)


def test_outline_is_the_t_and_keypoints_lie_on_it() -> None:
    block = TBlock()
    outline = t_outline(block)
    x, y = outline[:, 0], outline[:, 1]
    area = 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))
    assert area == pytest.approx(sum(4 * b.half[0] * b.half[1] for b in block.boxes()), rel=1e-12)  # CCW, exact
    assert np.allclose(block.distance(t_keypoints(block)[:6]), 0.0)
    assert block.distance(np.array([0.5, 0.5])) > 0.3


def test_push_model_pushes_the_t_along_the_rod_and_leaves_it_alone_otherwise(task) -> None:
    model = PushModel(task.scene)
    pos = np.array([[0.1, 0.0, 0.0175]])
    quat = np.array([yaw_quat(0.0)])
    # The rod starts 4 cm below the stem's end (body −y) and moves +y by 8 cm, through the stem's axis.
    stem_end = t_outline(TBlock())[0, 1]
    start = np.array([0.1, stem_end - 0.04])
    state = model.initial_state(pos, quat, start)
    n = 90
    push = start + np.linspace(0, 0.08, n)[:, None] * np.array([0.0, 1.0])
    still = np.repeat(start[None], n, axis=0)
    out_pos, _, rod = model.rollout(state, np.stack([push, still]))
    assert out_pos[0, 0, 1] == pytest.approx(0.08 - 0.04 + 0.01, abs=0.01)  # moved by the push beyond contact
    assert abs(out_pos[0, 0, 0] - 0.1) < 0.005  # straight on: no sideways drift
    assert np.allclose(out_pos[1, 0], pos[0], atol=2e-4)  # untouched T stays put
    assert np.allclose(rod[1], start, atol=1e-4)


def test_expert_is_a_policy_whose_push_lowers_the_model_cost(task, expert) -> None:
    assert isinstance(expert, Policy)
    s = start_set("pusht/eval-v1")[3]
    now = float(expert.cost(s.object_pos[0][:2], math.atan2(*_sin_cos(s.object_quat[0]))))
    push = expert.plan_push(s.object_pos, s.object_quat)
    assert push.cost < now - 0.005  # the chosen push is predicted to remove at least 5 mm of keypoint error
    assert np.linalg.norm(push.direction) == pytest.approx(1.0)


def test_reseeded_expert_chooses_the_same_push_for_the_same_state(task) -> None:
    from dataclasses import replace

    from realissim.expert.pusht import PushTExpertConfig

    s = start_set("pusht/eval-v1")[3]
    chosen = {}
    for reseed in (True, False):
        expert = PushTExpert(task.scene, replace(PushTExpertConfig(), reseed=reseed))
        pushes = [expert.plan_push(s.object_pos, s.object_quat) for _ in range(3)]  # later decisions, same state
        chosen[reseed] = {(tuple(p.approach.round(6)), tuple(p.direction.round(6)), round(p.length, 6)) for p in pushes}
    assert len(chosen[True]) == 1  # a function of the state
    assert len(chosen[False]) > 1  # without: also of the decisions before it (the refinement's draws differ)


def _sin_cos(quat: np.ndarray) -> tuple[float, float]:
    w, x, y, z = quat
    return 2 * (w * z + x * y), 1 - 2 * (y * y + z * z)


def test_expert_chunks_are_valid_and_progress_is_an_estimate_in_unit_range(task, expert) -> None:
    env = Env(task)
    obs = env.reset(start_set("pusht/eval-v1")[5])
    expert.reset()
    previous = 0.0
    for _ in range(6):
        chunk = expert.act(obs)
        assert chunk.q_des.shape[1] == 7 and 1 <= chunk.waypoints <= 32
        assert np.all((chunk.progress >= 0) & (chunk.progress <= 1))
        assert np.all(np.diff(chunk.progress) >= -1e-12)
        assert chunk.progress[0] >= previous - 0.35  # may fall back when a push disappoints, but not collapse
        previous = float(chunk.progress[-1])
        obs, _ = env.step(chunk)


@pytest.mark.slow
def test_expert_solves_held_out_starts_offline(task) -> None:
    """Starts of the eval set far apart in pose; each must be solved within the task's 60 s."""
    env = Env(task)
    expert = PushTExpert(task.scene)
    starts = start_set("pusht/eval-v1")
    for i in (31, 77):
        result = run_episode(env, expert, starts[i], 60.0)
        assert result.success, f"start {i}: final {result.final}"
        assert result.success_time < 40.0


def _legs(route: np.ndarray, n: int = 200) -> np.ndarray:
    return np.concatenate([np.linspace(p, q, n) for p, q in itertools.pairwise(route)])


def test_route_in_plane_goes_around_the_t_on_the_shorter_side_and_straight_when_clear() -> None:
    block = TBlock()
    xy, yaw = np.array([0.1, 0.05]), 0.3
    R = np.array([[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]])

    a, b = xy + R @ np.array([0.0, -0.2]), xy + R @ np.array([0.01, 0.2])  # stem end to beyond the bar
    route = route_in_plane(a, b, xy, yaw, block, block.distance, 0.022, 0.026)
    assert route is not None and len(route) >= 3
    assert np.allclose(route[0], a) and np.allclose(route[-1], b)
    assert block.distance((_legs(route) - xy) @ R).min() >= 0.022 - 1e-9  # clear of the T all the way
    assert np.sum(np.linalg.norm(np.diff(route, axis=0), axis=1)) < 0.4 + 2 * 0.12  # not the long way round
    # Both ends clear and the segment between them too: one straight leg.
    c = xy + R @ np.array([0.2, -0.2])
    assert np.allclose(route_in_plane(a, c, xy, yaw, block, block.distance, 0.022, 0.026), [a, c])
    # An end closer than the clearance (just behind a contact) is reached, never closer to the T than it is.
    near = xy + R @ np.array([0.0, 0.0857 + 0.015])  # 1.5 cm beyond the bar's far side
    route = route_in_plane(a, near, xy, yaw, block, block.distance, 0.022, 0.026)
    assert route is not None and block.distance((_legs(route) - xy) @ R).min() >= 0.015 - 1e-6
    # Nowhere allowed to pass: no route.
    assert route_in_plane(a, b, xy, yaw, block, block.distance, 0.022, 0.026, allowed=lambda p: p[:, 0] < -1.0) is None


def test_planar_expert_keeps_the_tip_at_pushing_height(task, expert) -> None:
    env = Env(task)
    obs = env.reset(start_set("pusht/eval-v1")[7])
    expert.reset()
    heights = []
    for _ in range(12):
        chunk = expert.act(obs)
        heights += [expert.ik.tip_position(q)[2] for q in chunk.q_des]
        obs, _ = env.step(chunk)
    heights = np.asarray(heights)
    low = heights[np.argmax(heights < expert.config.push_height + 0.005) :]  # after the first descent from home
    assert len(low) > 100 and np.abs(low - expert.config.push_height).max() < 0.006
