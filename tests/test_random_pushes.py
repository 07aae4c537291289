"""The contact-rich scenario's pusher (`RandomPushes`): a way round the T at pushing height, a plan that waits for
an arm held back, pushes dropped when the T is no longer where they were planned for; `sample_path(through=True)`."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from realissim.envs import Env, EnvConfig
from realissim.eval.episode import EpisodeObserver, run_episode
from realissim.expert.random_pushes import RandomPushes, RandomPushesConfig, lifted_pushes
from realissim.expert.scripted import sample_path
from realissim.geometry import yaw_quat
from realissim.policy import Observation
from realissim.tasks import Task, make


@pytest.fixture(scope="module")
def task() -> Task:
    return make("pusht")


def test_a_path_through_its_corners_does_not_stop_there_and_stays_on_the_polyline() -> None:
    corners = np.array([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.2, 0.2, 0.0]])
    dt = 1 / 60
    through = sample_path(corners, 0.5, dt, accel=4.0, through=True)
    stops = sample_path(corners, 0.5, dt, accel=4.0)
    np.testing.assert_allclose(through[[0, -1]], corners[[0, -1]], atol=1e-12)
    speed = np.linalg.norm(np.diff(through, axis=0), axis=1) / dt
    at_corner = int(np.argmin(np.linalg.norm(through - corners[1], axis=1)))
    assert speed[at_corner - 1] > 0.3  # turns the corner near its peak speed of 0.5 m/s (a stop: < 0.1)
    assert len(through) < len(stops) - 5  # the stop-at-corners path comes to rest there
    on_first = (np.abs(through[:, 1]) < 1e-12) & (through[:, 0] <= 0.2 + 1e-12)
    on_second = np.abs(through[:, 0] - 0.2) < 1e-12
    assert np.all(on_first | on_second)  # every point on one of the two legs


class Frames(EpisodeObserver):
    """Per frame: the twin's T (x, y, z) and the pusher tip (x, y, z)."""

    def __init__(self, env: Env, policy: RandomPushes) -> None:
        self.env, self.policy, self.rows = env, policy, []

    def on_frame(self, frame) -> None:  # type: ignore[no-untyped-def]
        s = self.env.runtime.twin.state()
        self.rows.append(np.r_[s.object_pos[0], self.policy.ik.tip_position(s.q)])


def offline(task: Task, config: RandomPushesConfig, seconds: float, start_seed: int) -> np.ndarray:
    policy = RandomPushes(task.scene, config)
    env = Env(task, EnvConfig(replan_every=config.lead * config.horizon / config.waypoints))
    frames = Frames(env, policy)
    start = task.sample_start(np.random.default_rng(start_seed))
    run_episode(env, policy, start, seconds, [frames], stop_on_success=False)
    return np.array(frames.rows)


def test_going_round_the_t_keeps_the_tip_low_and_the_t_flat_and_moving(task: Task) -> None:
    """After its first descent the tip never lifts (it goes round the T at pushing height), the T never tips, and
    it moves in most frames, more than under stop 51's pushes (which do lift)."""
    config = RandomPushesConfig(seed=2)
    rows = offline(task, config, 8.0, start_seed=2)
    down = int(np.argmax(rows[:, 5] < config.push_height + 0.005))  # the first descent is done
    assert np.all(rows[down:, 5] < config.push_height + 0.01)
    assert np.all(rows[:, 2] < 0.035 / 2 + 0.003)  # flat on the table
    moving = np.mean(np.linalg.norm(np.diff(rows[:, :2], axis=0), axis=1) * 60 > 0.01)
    before = offline(task, lifted_pushes(seed=2), 8.0, start_seed=2)
    moved = np.mean(np.linalg.norm(np.diff(before[:, :2], axis=0), axis=1) * 60 > 0.01)
    assert np.any(before[down:, 5] > config.hover - 0.01)  # those do lift
    assert moving > 0.5 and moving > moved, (moving, moved)


def observe(task: Task, q: np.ndarray, time: float, pos: tuple[float, float], yaw: float) -> Observation:
    return Observation(
        time=np.asarray(time),
        q=q,
        qd=np.zeros_like(q),
        q_des=q,
        object_pos=np.array([[pos[0], pos[1], 0.035 / 2]]),
        object_quat=np.array([yaw_quat(yaw)]),
    )


def test_the_plan_waits_for_a_held_arm_and_drops_a_push_the_t_has_left(task: Task) -> None:
    q0 = np.asarray(task.scene.robot.home, dtype=np.float64)
    for closed in (True, False):
        policy = RandomPushes(task.scene, RandomPushesConfig(seed=0, closed_loop=closed))
        first = policy.act(observe(task, q0, 0.0, (0.05, 0.0), 0.3))
        # 0.5 s later the arm has not moved (held back): the plan's next target is its first one again
        held = policy.act(observe(task, q0, 0.5, (0.05, 0.0), 0.3))
        gap = np.linalg.norm(policy.ik.tip_position(held.q_des[0]) - policy.ik.tip_position(first.q_des[0]))
        assert (gap < 0.01) == closed, gap
        # the T is knocked 5 cm away before the tip reaches it: the push is dropped and planned again
        policy.act(observe(task, q0, 0.75, (0.05, 0.05), 0.3))
        assert policy.replans == (1 if closed else 0)


def kinematic_episode(task: Task, config: RandomPushesConfig, seconds: float, knock: float = 0.0) -> RandomPushes:
    """The pusher against a kinematic world: the arm reaches each planned waypoint on time, and the T (no rotation)
    is pushed out of the rod's way, so it keeps contact while pushed and stays put while the tip travels. With
    `knock` > 0, the T is moved that far along +x whenever the tip has been clear of it for 0.5 s (a T that moves
    before the tip gets back to it). Returns the policy after `seconds` s, re-planning every `lead`·H/m s."""
    policy = RandomPushes(task.scene, config)
    rod, dt = policy.rod, config.horizon / config.waypoints
    q = np.asarray(task.scene.robot.home, dtype=np.float64)
    pos, yaw, t, clear_since = np.array([0.05, 0.0]), 0.3, 0.0, None
    R = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
    tip = policy.ik.tip_position(q)
    while t < seconds:
        chunk = policy.act(observe(task, q, t, (pos[0], pos[1]), yaw))
        for k in range(config.lead):
            q = chunk.q_des[k]
            new = policy.ik.tip_position(q)
            for s in np.linspace(0.0, 1.0, 9)[1:]:  # the rod sweeps the step in 8 substeps
                p = tip + s * (new - tip)
                if p[2] > 0.035 + rod:
                    continue
                body = R.T @ (p[:2] - pos)
                gap = float(policy.block.distance(body))
                if gap < rod:  # push the T straight away from the rod, out to contact
                    eps = 1e-6
                    grad = np.array([policy.block.distance(body + e) - policy.block.distance(body - e)
                                     for e in np.eye(2) * eps]) / (2 * eps)  # fmt: skip
                    away = R @ grad if np.linalg.norm(grad) > 0.5 else (new - tip)[:2]
                    pos = pos - away / np.linalg.norm(away) * (rod - gap)
            tip, t = new, t + dt
            near = float(policy.block.distance(R.T @ (tip[:2] - pos))) < rod + 0.005
            clear_since = None if near else (t if clear_since is None else clear_since)
            if knock > 0 and clear_since is not None and t - clear_since > 0.5:
                pos, clear_since = pos + np.array([knock, 0.0]), None
    return policy


def test_pushes_the_t_follows_are_kept_and_a_t_that_moves_before_the_tip_returns_drops_the_push(
    task: Task, caplog: pytest.LogCaptureFixture
) -> None:
    """Pushes planned ahead (appended to the plan, for where the push still under way will leave the T) are checked
    like fresh ones: while the tip goes round an undisturbed T to its next push, hardly anything is dropped; a T
    that moves 1.5 cm meanwhile (the tip still within `lost` of it) drops the push. (Fails with stop 52's defect, an
    appended push's travel checked as pushing, and without `predict`.) Undisturbed, a push is still dropped now and
    then where the T, pushed sideways off the rod, ends more than `stale` from where the push was planned for: one
    drop in 3 of these 12 seeds (the same count before the first move from home stopped at its corners)."""
    drops = [kinematic_episode(task, RandomPushesConfig(seed=s), 8.0).replans for s in range(12)]
    assert sum(drops) <= 4 and max(drops) <= 1, drops
    with caplog.at_level(logging.DEBUG, logger="realissim.expert.random_pushes"):
        knocked = [kinematic_episode(task, RandomPushesConfig(seed=s), 8.0, knock=0.015).replans for s in range(12)]
    assert sum(knocked) >= sum(drops) + 6, (knocked, drops)  # measured 14 against 3
    assert any("(T moved)" in r.getMessage() for r in caplog.records)  # dropped for the moved T, not as lost
