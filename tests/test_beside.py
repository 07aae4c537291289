"""The correction beside the loop (`runtime.beside`): its own thread on a replica of the twin, results applied
later with their age, the period it manages scaling the spring and the detector, failures raised in the loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers import scripted_targets
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.runtime import Runtime, RuntimeConfig
from realissim.runtime.desync import DesyncConfig, DesyncDetector
from realissim.spec.scene import SceneSpec


def test_the_loop_steps_on_while_the_thread_corrects_and_applies_its_results_later(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, RuntimeConfig(correct_beside=True), world)
        assert runtime.beside
        runtime.reset()
        runtime.calibrate()
        twin_before = runtime.twin.data.qpos.copy()
        reports = []
        for q in scripted_targets(scene, 1 / 60, 90):
            reports.append(runtime.frame(q))
        truth = world.oracle.read()
        runtime.reset()  # waits for the pending job; its outcome belonged to the last episode
        after_reset = runtime.frame(np.asarray(scene.robot.home))
        runtime.close()
    arrived = [r for r in reports if r.correction is not None]
    assert arrived and len(arrived) < len(reports)  # results arrive on some frames, later than they were asked for
    assert all(r.correction_age > 0 for r in arrived)
    assert all(math.isnan(r.correction_age) for r in reports if r.correction is None)
    # the loop does not pay for the correction: its time is the thread's, reported apart
    assert all("correct" not in r.timing and "beside.correct" in r.timing for r in arrived)
    assert not any("correct" in r.timing for r in reports)
    assert after_reset.correction is None
    assert not np.array_equal(twin_before, reports[-1].state.object_pos)
    # the corrected twin stays with the world through the push (a generous bound: the result's age varies)
    assert np.linalg.norm(truth.object_pos[0, :2] - reports[-1].state.object_pos[0, :2]) < 0.01


def test_a_failure_in_the_thread_is_raised_in_the_loop(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, RuntimeConfig(correct_beside=True), world)
        runtime.reset()
        assert runtime.correction is not None

        def broken(*args: object, **kwargs: object) -> None:
            raise FloatingPointError("the renderer produced NaN")

        runtime.correction.correct = broken  # type: ignore[method-assign]
        home = np.asarray(scene.robot.home)
        with pytest.raises(RuntimeError, match=r"correction thread failed.*NaN"):
            for _ in range(600):  # the first job fails; a later frame collects the failure
                runtime.frame(home)
        runtime.close()


def test_a_wrench_beside_the_loop_is_held_at_least_beside_min_held_frames(scene: SceneSpec) -> None:
    # In lock-step a frame is quicker than a correction, so the measured period is several frames but far under 50:
    # the floor, not the period, must set what the wrench is held and scaled for.
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, RuntimeConfig(correct_beside=True, beside_min_held=50), world)
        runtime.reset()
        for q in scripted_targets(scene, 1 / 60, 30):
            runtime.frame(q)
        runtime.reset()  # waits for the pending job
        assert runtime.correction is not None and runtime.correction.held_frames == 50
        runtime.close()
    with pytest.raises(ValueError, match="beside_min_held"):
        RuntimeConfig(beside_min_held=0)


def test_inline_is_the_lockstep_default_and_beside_the_real_time_one(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        assert not Runtime(scene, RuntimeConfig(), world).beside
    realtime = Surrogate(scene, SurrogateConfig(camera_size=(160, 90), mode="realtime"))  # (not started)
    runtime = Runtime(scene, RuntimeConfig(), realtime)
    assert runtime.beside
    runtime.close()
    assert not Runtime(scene, RuntimeConfig(correct_beside=False), realtime).beside


def test_the_detector_counts_its_seconds_at_the_period_it_is_fed() -> None:
    detector = DesyncDetector(DesyncConfig(fire_s=1 / 3, baseline_s=5.0), frame_dt=1 / 60)
    assert detector.counts.frames == 20 and detector.counts.baseline_window == 300
    for _ in range(400):
        detector.update(0.01)
    detector.set_period(3 / 60)  # fed every third frame from now on
    assert detector.counts.frames == 7 and detector.counts.baseline_window == 100
    assert detector.baseline == pytest.approx(0.01)  # learnt values kept (the latest window's worth)
    for _ in range(6):
        detector.update(1.0)  # high residuals, 0.3 s at the new period: not yet
    assert not detector.desynced
    detector.update(1.0, frame=123)  # the seventh: 0.35 s ≥ fire_s
    assert detector.desynced and detector.events[-1] == (123, "fired")


def test_a_correction_ending_between_frames_is_taken_up_at_once(scene: SceneSpec) -> None:
    """`Runtime.idle` (the wait between two frames on the wall clock): a job that ends meanwhile is collected and
    the next one handed over then, not at the next frame's start; not twice in one frame. Each correction here waits
    for the test's go-ahead, so the order is deterministic."""
    import threading
    import time

    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, RuntimeConfig(correct_beside=True), world)
        runtime.reset()
        assert runtime.correction is not None
        real = runtime.correction.correct
        started: list[float] = []
        go = [threading.Event() for _ in range(4)]

        def gated(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            started.append(time.monotonic())
            go[len(started) - 1].wait(10.0)
            return real(*args, **kwargs)

        runtime.correction.correct = gated  # type: ignore[method-assign]
        home = np.asarray(scene.robot.home)
        assert runtime.frame(home).images is not None  # job 1 handed over
        second = runtime.frame(home)  # job 1 still running: nothing collected, nothing handed over
        assert second.correction is None and second.images is None
        threading.Timer(0.1, go[0].set).start()
        until = time.monotonic() + 1.0
        runtime.idle(until)
        assert time.monotonic() >= until
        assert len(started) == 2, "job 1 ended during the wait: job 2 is handed over then, not at the next frame"
        third = runtime.frame(home)
        assert third.correction is not None and third.images is not None  # job 1's outcome, job 2's frames
        threading.Timer(0.1, go[1].set).start()
        runtime.idle(time.monotonic() + 0.5)  # job 2 ends: taken up (this frame handed none over yet)
        assert len(started) == 3
        fourth = runtime.frame(home)
        assert fourth.correction is not None
        go[2].set()
        go[3].set()
        runtime.idle(time.monotonic() + 0.5)  # job 3 ends; job 4 handed over; it ends too: kept for the next frame
        assert len(started) == 4
        runtime.close()
