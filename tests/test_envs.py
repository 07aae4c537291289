"""Environments, the policy seam and `run_episode`: offline and online through one code path, a batch equal to
its single environments, chunks followed as specified."""

from __future__ import annotations

import numpy as np
import pytest

from realissim.envs import BatchEnv, Env, EnvConfig
from realissim.eval.episode import EpisodeObserver, run_episode, run_episodes
from realissim.expert.scripted import ScriptedPush
from realissim.policy import ActionChunk, Observation, PerEnvPolicies, Policy
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.runtime import ArmConfig, RuntimeConfig
from realissim.spec.state import StartState
from realissim.tasks import Task, make
from realissim.twin import PhysicsConfig
from realissim.twin.state import TwinState


@pytest.fixture(scope="module")
def task() -> Task:
    return make("pusht")


def sampled(task: Task, n: int, seed: int) -> list[StartState]:
    rng = np.random.default_rng(seed)
    return [task.sample_start(rng) for _ in range(n)]


def assert_states_equal(a: TwinState, b: TwinState) -> None:
    for name in TwinState.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


class Recorder(EpisodeObserver):
    """Keeps every frame's twin state."""

    def __init__(self) -> None:
        self.states: list[TwinState] = []

    def on_frame(self, frame) -> None:  # type: ignore[no-untyped-def]
        self.states.append(frame.state)


def test_chunk_targets_reach_each_waypoint_when_due_and_hold_after() -> None:
    rng = np.random.default_rng(0)
    q0, waypoints = rng.normal(size=7), rng.normal(size=(32, 7))
    chunk = ActionChunk(waypoints, np.linspace(0.1, 0.5, 32), horizon=1.0)
    dt = 1 / 64  # two frames per waypoint
    q, progress = chunk.targets(q0, dt, 70)
    np.testing.assert_allclose(q[1::2][:32], waypoints, atol=1e-12)  # waypoint i at (i + 1) H / m
    np.testing.assert_allclose(q[0], 0.5 * (q0 + waypoints[0]), atol=1e-12)  # halfway to the first
    np.testing.assert_array_equal(q[64:], np.repeat(waypoints[-1:], 6, axis=0))  # held beyond the horizon
    assert progress[1] == pytest.approx(0.1) and progress[-1] == pytest.approx(0.5)
    batched = ActionChunk(np.stack([waypoints, waypoints + 1]), np.stack([chunk.progress] * 2), 1.0)
    qb, _ = batched.targets(np.stack([q0, q0 + 1]), dt, 70)
    np.testing.assert_array_equal(qb[:, 0], q)  # a batch row is the single computation, bit for bit


def test_chunks_are_validated() -> None:
    with pytest.raises(ValueError, match="finite"):
        ActionChunk(np.full((4, 7), np.nan), np.zeros(4))
    with pytest.raises(ValueError, match=r"shape|must be"):
        ActionChunk(np.zeros((4, 7)), np.zeros(3))
    with pytest.raises(ValueError, match="horizon"):
        ActionChunk(np.zeros((4, 7)), np.zeros(4), horizon=0.0)


def test_reset_puts_the_twin_at_the_start_and_observes_it(task: Task) -> None:
    start = sampled(task, 1, seed=3)[0]
    env = Env(task)
    obs = env.reset(start)
    np.testing.assert_array_equal(obs.object_pos, start.object_pos)
    np.testing.assert_allclose(obs.object_quat, start.object_quat, atol=1e-15)
    np.testing.assert_array_equal(obs.q, start.q_array)
    assert float(obs.time) == 0.0 and not obs.images and not obs.real_images
    assert not env.online and not env.runtime.config.follow and not env.runtime.config.correct


def test_scripted_push_moves_the_t_towards_its_goal(task: Task) -> None:
    env = Env(task)
    start = StartState.of_scene(task.scene)
    result = run_episode(env, ScriptedPush(task.scene), start, max_seconds=6.0, stop_on_success=False)
    goal = np.asarray(task.scene.goals[0].pose.pos[:2])
    assert np.linalg.norm(start.object_pos[0, :2] - goal) > 0.1
    assert result.final["pos_err"] < 0.02  # pushed onto the goal's position (not its yaw: a straight push)
    assert result.frames == 360 and result.duration == pytest.approx(6.0) and result.policy_calls == 6
    assert result.progress[-1] == 1.0 and len(result.progress) == 360
    assert result.times[-1] == pytest.approx(6.0) and len(result.coverage) == len(result.times)


def test_episode_stops_at_the_end_of_the_chunk_that_succeeds(task: Task) -> None:
    goal = task.scene.goals[0].pose
    at_goal = StartState((goal,), tuple(task.scene.robot.home))
    result = run_episode(Env(task), ScriptedPush(task.scene), at_goal, max_seconds=10.0)
    assert result.success and result.success_time == pytest.approx(0.1)
    assert result.frames == 60 and result.policy_calls == 1


def test_replan_period_asks_for_chunks_more_often(task: Task) -> None:
    calls = []

    class Counting(ScriptedPush):
        def act(self, observation: Observation) -> ActionChunk:
            calls.append(float(observation.time))
            return super().act(observation)

    env = Env(task, EnvConfig(replan_every=0.25))
    result = run_episode(env, Counting(task.scene), StartState.of_scene(task.scene), 2.0, stop_on_success=False)
    assert result.policy_calls == 8
    np.testing.assert_allclose(calls, np.arange(8) * 0.25, atol=1e-9)
    assert isinstance(Counting(task.scene), Policy)


def test_batch_env_equals_single_envs_bit_for_bit(task: Task) -> None:
    starts = sampled(task, 3, seed=11)
    batch = BatchEnv(task, 3, nthread=2)
    recorder = Recorder()
    policies = PerEnvPolicies([ScriptedPush(task.scene) for _ in starts])
    batched = run_episodes(batch, policies, starts, max_seconds=5.0, observers=[recorder], stop_on_success=False)
    for b, start in enumerate(starts):
        env = Env(task)
        single_recorder = Recorder()
        single = run_episode(env, ScriptedPush(task.scene), start, 5.0, [single_recorder], stop_on_success=False)
        assert len(single_recorder.states) == len(recorder.states) == 300
        for k in (0, 150, 299):
            for name in ("object_pos", "object_quat", "q", "q_des"):
                np.testing.assert_array_equal(
                    getattr(recorder.states[k], name)[b], getattr(single_recorder.states[k], name)
                )
        assert single.coverage == batched[b].coverage and single.progress == batched[b].progress
        assert single.final == batched[b].final
    moved = [np.linalg.norm(recorder.states[-1].object_pos[b, 0] - s.object_pos[0]) for b, s in enumerate(starts)]
    assert max(moved) > 0.05  # the episodes did push the T (so equality is not trivially at rest)


@pytest.mark.slow
def test_online_and_offline_envs_share_one_code_path(task: Task) -> None:
    """With the correction, the lead bound and the arm shaping off, the world cannot act on the twin: an online
    episode's twin must then be the offline episode's twin bit for bit, while the real arm follows it. With the
    bound and shaping (the default), the real arm's measured joints do act on the twin arm."""
    start = sampled(task, 1, seed=5)[0]
    offline = Recorder()
    awake = EnvConfig(sleep=False)  # (an online twin never sleeps)
    run_episode(Env(task, awake), ScriptedPush(task.scene), start, 2.0, [offline], stop_on_success=False)
    online = Recorder()
    runtime = RuntimeConfig(follow=True, correct=False, arm=ArmConfig(max_lead=None, limits=None))
    config = EnvConfig(runtime=runtime, real_images=True)
    waiting = Recorder()
    with Surrogate(task.scene, SurrogateConfig(camera_size=(160, 90))) as world:
        env = Env(task, config, world)
        result = run_episode(env, ScriptedPush(task.scene), start, 2.0, [online], stop_on_success=False)
        truth = world.oracle.read()
        obs = env.observe()
        bounded = Env(task, EnvConfig(runtime=RuntimeConfig(follow=True, correct=False)), world)
        run_episode(bounded, ScriptedPush(task.scene), start, 2.0, [waiting], stop_on_success=False)
        with pytest.raises(ValueError, match="online twin must not sleep"):
            Env(task, EnvConfig(runtime=RuntimeConfig(physics=PhysicsConfig(sleep=True))), world)
    assert not np.array_equal(waiting.states[-1].q, offline.states[-1].q)
    assert env.online and type(env.runtime) is type(Env(task).runtime)
    assert not env.runtime.twin.config.sleep and Env(task).runtime.twin.config.sleep
    assert len(online.states) == len(offline.states) == 120
    for a, b in zip(online.states, offline.states):
        assert_states_equal(a, b)
    assert np.abs(truth.q - online.states[-1].q).max() < 0.05  # the real arm followed the twin arm
    assert set(obs.real_images) == {c.name for c in task.scene.cameras}
    assert obs.real_images["front"].shape == (90, 160, 3)
    assert result.frames == 120


def test_virtual_cameras_in_observations_match_between_env_and_batch(task: Task) -> None:
    starts = sampled(task, 2, seed=21)
    config = EnvConfig(cameras=("wrist", "front"), image_size=(64, 48))
    batch = BatchEnv(task, 2, config, nthread=1)
    policies = PerEnvPolicies([ScriptedPush(task.scene) for _ in starts])
    obs = batch.reset(starts)
    obs, _ = batch.step(policies.act(obs))
    assert obs.images["wrist"].shape == (2, 48, 64, 3) and obs.images["wrist"].dtype == np.uint8
    for b, start in enumerate(starts):
        env = Env(task, config)
        policy = ScriptedPush(task.scene)
        single = env.reset(start)
        single, _ = env.step(policy.act(single))
        for name in ("wrist", "front"):
            np.testing.assert_array_equal(single.images[name], obs.images[name][b])
    assert not np.array_equal(obs.images["wrist"][0], obs.images["wrist"][1])  # each twin its own view


def test_random_pushes_keep_the_t_moving_and_repeat_for_a_seed(task: Task) -> None:
    from realissim.expert.random_pushes import RandomPushes, RandomPushesConfig

    config = EnvConfig(replan_every=0.25)

    def positions(seed: int) -> np.ndarray:
        recorder = Recorder()
        policy = RandomPushes(task.scene, RandomPushesConfig(seed=seed))
        run_episode(Env(task, config), policy, sampled(task, 1, seed=4)[0], 8.0, [recorder], stop_on_success=False)
        return np.array([s.object_pos[0, :2] for s in recorder.states])

    a, b, c = positions(0), positions(0), positions(1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    speed = np.linalg.norm(np.diff(a, axis=0), axis=1) * 60
    assert np.mean(speed > 0.01) > 0.3  # the T moves for a good part of the time
    assert np.all(np.abs(a) < 0.3)  # and stays on the table, near the workspace


def test_calibration_happens_at_the_goal_and_the_episode_at_its_start(task: Task) -> None:
    """`calibrate_at="goal"`: the appearance is fitted with the T on its goal (the arm at home), then twin and world
    both go to the episode's start; `"start"` fits it at the start itself."""
    start = sampled(task, 1, seed=3)[0]
    goal = task.goal[0].pose
    at_goal = Env(task, EnvConfig(calibrate_at="goal")).calibration_state(start)
    assert at_goal.objects[0] == goal and at_goal.q == tuple(task.scene.robot.home)
    assert Env(task, EnvConfig(calibrate_at="start")).calibration_state(start) == start
    seen: list[np.ndarray] = []
    with Surrogate(task.scene, SurrogateConfig(camera_size=(160, 90))) as world:
        env = Env(task, EnvConfig(calibrate_at="goal"), world)
        calibrate = env.runtime.calibrate

        def spy() -> None:  # where the world's T is when the twin calibrates
            assert world.oracle is not None
            seen.append(world.oracle.read().object_pos[0].copy())
            calibrate()

        env.runtime.calibrate = spy  # type: ignore[method-assign]
        env.reset(start)
        truth = world.oracle.read()
        twin = env.runtime.twin.state()
        env.reset(start)  # calibrated once ("first_reset")
    assert len(seen) == 1 and np.linalg.norm(seen[0][:2] - np.asarray(goal.pos)[:2]) < 1e-3
    assert np.linalg.norm(truth.object_pos[0, :2] - start.object_pos[0, :2]) < 1e-3
    assert np.linalg.norm(twin.object_pos[0, :2] - start.object_pos[0, :2]) < 1e-3
