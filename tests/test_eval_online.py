"""Online evaluation through the surrogate: an always- and a never-successful policy, a lying progress, and a
surrogate killed or hung mid-episode (that episode is an error, the others are kept, a fresh surrogate goes on)."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest

from helpers import HoldStill, HoldStillFactory, descendants, near_goal_starts, terminate_and_check
from realissim.envs import EnvConfig
from realissim.envs.env import FrameInfo
from realissim.eval.episode import EpisodeObserver
from realissim.eval.online import evaluate_online, write_online_report
from realissim.expert.pusht import PushTExpert
from realissim.real.surrogate import Disturbance, Surrogate, SurrogateConfig
from realissim.runtime import RuntimeConfig, SupervisionConfig
from realissim.spec.state import StartState
from realissim.tasks import make

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task():
    return make("pusht")


class Sabotage(EpisodeObserver):
    """Sends `sig` to the surrogate at frame `frame` of episode `episode` (counting resets)."""

    def __init__(self, worlds: list[Surrogate], episode: int, frame: int, sig: int) -> None:
        self.worlds, self.episode, self.frame, self.sig = worlds, episode, frame, sig
        self.resets = -1

    def on_reset(self, env, observation) -> None:  # type: ignore[no-untyped-def]
        self.resets += 1

    def on_frame(self, frame: FrameInfo) -> None:
        if self.resets == self.episode and frame.frame == self.frame:
            pid = self.worlds[-1].pid
            assert pid is not None
            os.kill(pid, self.sig)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_a_failed_surrogate_ends_its_episode_as_an_error_and_a_fresh_one_carries_on(task, sig, tmp_path) -> None:
    starts = near_goal_starts(task, [(0.0, 0.04, 0.0)])
    worlds: list[Surrogate] = []

    def world() -> Surrogate:  # a 4 s answer timeout: short for the hung case, long enough for a loaded machine
        worlds.append(Surrogate(task.scene, SurrogateConfig(camera_size=(160, 90), timeout=4.0)))
        return worlds[-1]

    sabotage = Sabotage(worlds, episode=1, frame=20, sig=sig)
    following = EnvConfig(runtime=RuntimeConfig(correct=False))  # (what fails is the world: the twin need not see it)
    report = evaluate_online(task, HoldStill(), starts, 3, 1.0, following, world=world, observers=[sabotage],
                             progress=False)  # fmt: skip
    errors = [e.error for e in report.episodes]
    assert errors[0] is None and errors[2] is None  # the episode before is kept, the one after runs
    expected = "SurrogateDiedError" if sig == signal.SIGKILL else "SurrogateHungError"
    assert errors[1] is not None and errors[1].startswith(expected)
    assert len(worlds) == 2 and not worlds[0].pid  # the failed one was closed, a fresh one took over
    s = report.summary()
    assert s["episodes"] == 2 and s["errors"] == 1 and s["success"] == 0.0  # an error is not a failure
    assert report.episodes[2].result is not None and report.episodes[2].result.duration == pytest.approx(1.0)
    write_online_report(report, tmp_path, {"what": "test"})
    assert len((tmp_path / "episodes.csv").read_text().splitlines()) == 4


def test_online_a_start_on_the_goal_succeeds_one_held_off_it_never_does_and_a_lie_shows(task) -> None:
    """Scoring on the oracle, one surrogate: the T already on its goal succeeds at the first judged frame; held
    still off it, never, even though the policy claims it did (progress 1.0): the lie shows in the agreement."""
    goal = next(g.pose for g in task.scene.goals)
    on_goal = StartState.from_arrays(np.asarray(goal.pos)[None], np.asarray(goal.quat)[None],
                                     np.asarray(task.scene.robot.home))  # fmt: skip
    starts = [on_goal, *near_goal_starts(task, [(-0.03, 0.03, -0.4)])]
    following = EnvConfig(runtime=RuntimeConfig(correct=False))  # (judged on the oracle: the twin need not see)
    report = evaluate_online(task, HoldStill(1.0), starts, 1, 1.0, following, progress=False)
    assert [e.result.success for e in report.episodes if e.result is not None] == [True, False]
    summary = report.summary()
    assert summary["success"] == 0.5 and summary["errors"] == 0 and summary["progress_success"] == 1.0
    assert summary["progress_agreement_matrix"] == [[0, 1], [0, 1]]


@pytest.mark.slow
def test_the_expert_solves_a_near_goal_start_online_with_the_twin_in_sync(task) -> None:
    """Contact is chaotic, so how long the expert takes differs between CPUs of one kind (this start: 9.9 s on one
    machine, 14.2 s on another); over six near-goal starts it took 9.9–21.9 s (docs/decisions.md, "The lead
    bound"). What holds everywhere: it succeeds within 40 s, and the corrected twin keeps the T where the world
    has it. The episode ends at success, so the limit costs nothing where it is fast."""
    starts = near_goal_starts(task, [(-0.03, 0.03, -0.4)])
    expert = evaluate_online(task, PushTExpert(task.scene), starts, 1, 40.0, progress=False).summary()
    assert expert["success"] == 1.0 and expert["errors"] == 0
    assert expert["sync_error_mean_mm"] < 10.0


class UnseenHand(EpisodeObserver):
    """Moves the real T by `displacement` m at frame `frame` of every episode (the twin is not told)."""

    def __init__(self, frame: int, displacement: tuple[float, float, float]) -> None:
        self.frame, self.displacement = frame, displacement

    def on_frame(self, frame: FrameInfo) -> None:
        if frame.frame == self.frame:
            world = frame.env.world
            assert world is not None
            world.disturb(Disturbance("move_object", object="tblock", displacement=self.displacement))


def test_an_episode_the_detector_holds_too_long_is_abandoned(task) -> None:
    """The real T moved 15 cm with the search off: the detector fires and holds the arm for good; the episode
    ends `max_held_s` later as abandoned (a failure), not at its time limit."""
    starts = near_goal_starts(task, [(0.0, 0.04, 0.0)])
    config = EnvConfig(runtime=RuntimeConfig(supervision=SupervisionConfig(reacquire=False)), max_held_s=1.0)
    hand = UnseenHand(frame=15, displacement=(0.15, 0.0, 0.0))
    report = evaluate_online(task, HoldStill(), starts, 1, 20.0, config, observers=[hand], progress=False)
    result = report.episodes[0].result
    assert result is not None and result.abandoned and not result.success
    fired = result.desync_events[0]
    assert fired[1] == "fired" and fired[0] < 1.0
    assert fired[0] + 1.0 <= result.duration <= fired[0] + 2.0 + 1e-6  # the cap, to the end of its 1 s chunk
    assert report.summary()["abandoned"] == 1


class CountResets(EpisodeObserver):
    def __init__(self) -> None:
        self.resets = 0

    def on_reset(self, env, observation) -> None:  # type: ignore[no-untyped-def]
        self.resets += 1


def test_an_online_evaluation_cut_off_resumes_from_its_journal(task, tmp_path) -> None:
    starts = near_goal_starts(task, [(0.0, 0.04, 0.0)])
    journal, key = tmp_path / "episodes.jsonl", {"checkpoint": "hold-still"}
    config = EnvConfig(calibrate="never")  # the journal is the point here, not the twin's appearance
    whole = evaluate_online(task, HoldStill(), starts, 2, 0.5, config, progress=False, journal=journal,
                            journal_key=key)  # fmt: skip
    lines = journal.read_text().splitlines()
    assert len(lines) == 3  # the header and one line per episode
    # Cut off during the second episode: its line half written.
    journal.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])
    counter = CountResets()
    resumed = evaluate_online(task, HoldStill(), starts, 2, 0.5, config, observers=[counter], progress=False,
                              journal=journal, journal_key=key)  # fmt: skip
    assert counter.resets == 1  # only the cut-off episode ran again
    assert [(e.start_index, e.trial) for e in resumed.episodes] == [(0, 0), (0, 1)]
    first, again = whole.episodes[0], resumed.episodes[0]  # read back from the journal
    assert again.result is not None and first.result is not None
    assert again.result.summary() == first.result.summary() and again.sync_errors == first.sync_errors
    assert again.result.coverage == first.result.coverage and again.result.start is starts[0]
    rerun = resumed.episodes[1].result
    assert rerun is not None and rerun.duration == pytest.approx(0.5)
    assert len(journal.read_text().splitlines()) == 3
    with pytest.raises(ValueError, match="journal was written for"):
        evaluate_online(task, HoldStill(), starts, 2, 0.5, config, progress=False, journal=journal,
                        journal_key={"checkpoint": "another"})  # fmt: skip


def test_an_online_evaluation_given_more_starts_runs_only_the_further_ones(task, tmp_path) -> None:
    starts = near_goal_starts(task, [(0.0, 0.04, 0.0), (0.03, 0.0, 0.2)])
    journal, key = tmp_path / "episodes.jsonl", {"checkpoint": "hold-still"}
    config = EnvConfig(calibrate="never")
    first = evaluate_online(task, HoldStill(), starts[:1], 1, 0.5, config, progress=False, journal=journal,
                            journal_key=key)  # fmt: skip
    counter = CountResets()
    both = evaluate_online(task, HoldStill(), starts, 1, 0.5, config, observers=[counter], progress=False,
                           journal=journal, journal_key=key)  # fmt: skip
    assert counter.resets == 1  # the first start was read back from the journal
    assert [e.start_index for e in both.episodes] == [0, 1]
    assert both.episodes[0].result.summary() == first.episodes[0].result.summary()  # type: ignore[union-attr]
    assert json.loads(journal.read_text().splitlines()[0])["starts"] == 2
    fewer = evaluate_online(task, HoldStill(), starts[:1], 1, 0.5, config, observers=[counter], progress=False,
                            journal=journal, journal_key=key)  # fmt: skip
    assert counter.resets == 1 and [e.start_index for e in fewer.episodes] == [0]


def test_workers_run_the_same_episodes_as_one_process(task) -> None:
    starts = near_goal_starts(task, [(0.0, 0.04, 0.0), (0.03, 0.0, 0.2)])
    config = EnvConfig(calibrate="never")  # so an episode does not depend on which surrogate ran it first
    local = evaluate_online(task, HoldStill(), starts, 2, 0.5, config, progress=False)
    shared = evaluate_online(task, HoldStillFactory(), starts, 2, 0.5, config, progress=False, workers=2)
    assert [(e.start_index, e.trial) for e in shared.episodes] == [(0, 0), (1, 0), (0, 1), (1, 1)]

    def scalars(e):  # type: ignore[no-untyped-def]
        assert e.result is not None and e.error is None
        return {k: v for k, v in e.result.summary().items() if k not in ("wall_s", "policy_s")}, e.sync_errors

    # The same episodes: every count and flag equal; every float equal to float rounding (a worker process runs its
    # numerics with other thread counts, so sums may round differently: up to 1.4e-14 relative measured); NaN
    # (frames_on_time in lock-step) in both.
    for (a, errors_a), (b, errors_b) in zip(map(scalars, shared.episodes), map(scalars, local.episodes), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], float):
                assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12, nan_ok=True), key
            else:
                assert a[key] == b[key], key
        np.testing.assert_allclose(errors_a, errors_b, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="policy factory"):
        evaluate_online(task, HoldStill(), starts, 2, 0.5, config, progress=False, workers=2)


def test_the_online_environment_checks_alarms_unless_told_not_to() -> None:
    from realissim.eval.online import online_env_config

    assert online_env_config().runtime.supervision.alarm_check == SupervisionConfig().alarm_check == 0.02
    assert online_env_config(alarm_check=False).runtime.supervision.alarm_check is None


def test_a_terminated_parallel_evaluation_ends_its_workers(tmp_path) -> None:
    """SIGTERM to a parallel online evaluation ends its worker processes and their surrogates (before, they ran on
    after the parent had gone); the process exits with 143."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = """
import numpy as np
from helpers import HoldStillFactory, near_goal_starts
from realissim.envs import EnvConfig
from realissim.eval.online import evaluate_online
from realissim.tasks import make
task = make("pusht")
starts = near_goal_starts(task, [(0.0, 0.04, 0.0), (0.03, 0.0, 0.2)])
evaluate_online(task, HoldStillFactory(), starts, 4, 60.0, EnvConfig(calibrate="never"), progress=False, workers=2)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while len(below := descendants(child.pid)) < 4 and time.monotonic() < deadline:  # 2 workers, 2 surrogates
            assert child.poll() is None, "the evaluation ended before its workers were up"
            time.sleep(0.5)
        assert len(below) >= 4, below
        time.sleep(2.0)  # episodes under way
        terminate_and_check(child, below)
    finally:
        if child.poll() is None:
            child.kill()
