"""A policy asked beside the real-time loop (`policy.asynchronous`): chunks followed from the time passed since their
observation, the loop going on with the last chunk meanwhile, failures raised in the loop."""

from __future__ import annotations

import time

import numpy as np
import pytest

from realissim.envs import Env, EnvConfig
from realissim.eval.episode import EpisodeObserver, run_episode
from realissim.expert.scripted import ScriptedPush
from realissim.policy import ActionChunk, Observation
from realissim.policy.asynchronous import PolicyThread
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.spec.state import StartState
from realissim.tasks import Task, make


@pytest.fixture(scope="module")
def task() -> Task:
    return make("pusht")


def chunk(seed: int = 0, m: int = 8, horizon: float = 0.8) -> ActionChunk:
    rng = np.random.default_rng(seed)
    return ActionChunk(rng.normal(size=(m, 7)), np.linspace(0.1, 0.8, m), horizon=horizon)


@pytest.mark.parametrize("k", [1, 5, 20, 47, 48, 60])
def test_a_chunk_taken_up_part_way_goes_on_as_it_would_have(k: int) -> None:
    c, dt = chunk(), 1 / 60
    q0 = np.random.default_rng(1).normal(size=7)
    whole, progress = c.targets(q0, dt, 70)
    later, later_progress = c.targets(whole[k - 1], dt, 70 - k, offset=k * dt)
    np.testing.assert_allclose(later, whole[k:], atol=1e-12)
    np.testing.assert_allclose(later_progress, progress[k:], atol=1e-12)


def test_a_late_chunk_skips_the_waypoints_already_due() -> None:
    c, dt = chunk(), 1 / 60
    now = np.zeros(7)
    q, _ = c.targets(now, dt, 30, offset=0.35)  # waypoints every 0.1 s: the first three are past
    # from the joints commanded now (at 0.35 s) straight towards waypoint 3 (due at 0.4 s), then on along the chunk
    np.testing.assert_allclose(q[1], now + (c.q_des[3] - now) * (2 * dt) / 0.05, atol=1e-12)
    np.testing.assert_allclose(q[2], c.q_des[3], atol=1e-12)  # at 0.35 + 3/60 s = 0.4 s
    np.testing.assert_allclose(q[8], c.q_des[4], atol=1e-12)  # at 0.5 s
    assert np.abs(q - c.q_des[:3, None]).min() > 0  # never back to a past waypoint
    beyond, _ = c.targets(now, dt, 4, offset=2.0)  # answered after its horizon: its end
    np.testing.assert_array_equal(beyond, np.repeat(c.q_des[-1:], 4, axis=0))
    with pytest.raises(ValueError, match="offset"):
        c.targets(now, dt, 4, offset=-0.1)


class Slow(ScriptedPush):
    """The scripted push, taking `seconds` of wall time to answer."""

    def __init__(self, task: Task, seconds: float, fail_at: int | None = None) -> None:
        super().__init__(task.scene)
        self.seconds, self.fail_at, self.calls = seconds, fail_at, 0

    def act(self, observation: Observation) -> ActionChunk:
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise FloatingPointError("the policy's network returned NaN")
        time.sleep(self.seconds)
        return super().act(observation)


def test_the_thread_answers_while_the_caller_goes_on_and_raises_its_failures(task: Task) -> None:
    env = Env(task)
    observation = env.reset(StartState.of_scene(task.scene))
    with PolicyThread(Slow(task, 0.1, fail_at=2)) as thread:
        thread.submit(observation)
        assert thread.pending and not thread.done()  # (0.1 s to answer)
        with pytest.raises(RuntimeError, match="pending"):
            thread.submit(observation)
        answer, seconds = thread.collect(timeout=30)
        assert isinstance(answer, ActionChunk) and seconds >= 0.1 and not thread.pending
        thread.submit(observation)
        with pytest.raises(RuntimeError, match="NaN"):
            thread.collect(timeout=30)
        with pytest.raises(RuntimeError, match="nothing was submitted"):
            thread.collect()


def test_follow_goes_on_with_the_chunk_until_told(task: Task) -> None:
    env = Env(task, EnvConfig(replan_every=0.2))
    start = StartState.of_scene(task.scene)
    policy = ScriptedPush(task.scene)
    observation = env.reset(start)
    c = policy.act(observation)
    _, step = env.step(c, max_frames=1000)
    asked = []

    def until() -> bool:
        asked.append(1)
        return len(asked) > 7

    info = env.follow(c, until, max_frames=1000, offset=step.frames * env.dt)
    assert step.frames == 12 and info.frames == 7  # until() true on its eighth question: seven frames
    # the same frames as following the chunk in one go
    again = Env(task)
    again.reset(start)
    again.step(c, max_frames=19)
    np.testing.assert_allclose(env.runtime.twin.data.qpos, again.runtime.twin.data.qpos, atol=1e-9)
    assert env.follow(c, lambda: True, max_frames=100).frames == 0


class Lateness(EpisodeObserver):
    def __init__(self) -> None:
        self.late: list[float] = []

    def on_frame(self, frame) -> None:  # type: ignore[no-untyped-def]
        self.late.append(frame.late_s)


@pytest.mark.wall_clock
def test_a_slow_policy_asked_beside_the_loop_does_not_make_frames_late(task: Task) -> None:
    start = StartState.of_scene(task.scene)
    late = {}
    with Surrogate(task.scene, SurrogateConfig(mode="realtime", camera_size=(160, 90))) as world:
        for beside in (False, True):
            env = Env(task, EnvConfig(replan_every=0.25, policy_beside=beside, calibrate="never"), world)
            assert env.policy_beside is beside
            policy, watch = Slow(task, 0.06), Lateness()
            result = run_episode(env, policy, start, 2.0, [watch], stop_on_success=False)
            env.close()
            assert result.frames == 120 and result.policy_calls == policy.calls >= 5
            late[beside] = int(np.sum(np.asarray(watch.late[15:]) > env.dt))  # (after the first chunk, asked inline)
            if beside:
                assert result.policy_s >= 0.06 * result.policy_calls
    # Inline, each 60 ms answer makes the next frames late (~3 of them); beside, the loop keeps its frames.
    assert late[False] >= 2 * 6, late
    assert late[True] < late[False] / 2, late
