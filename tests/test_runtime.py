"""The frame loop (online and offline) and the sync metrics."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from helpers import scripted_targets
from realissim.assets.appearance import AppearanceConfig
from realissim.estimate.placement import place_object
from realissim.eval.sync.metrics import SyncRecorder
from realissim.geometry import yaw_quat
from realissim.real.surrogate import Disturbance, Surrogate, SurrogateConfig
from realissim.runtime import Runtime, RuntimeConfig, ViewsConfig
from realissim.spec.scene import SceneSpec


def test_sync_recorder_errors_and_recovery() -> None:
    rec = SyncRecorder()
    for k in range(100):
        t = k / 10
        err = 0.05 if 5.0 <= t < 5.8 else 0.001  # a 5 cm error for 0.8 s after an event at t = 5
        rec.add(t, [err, 0, 0], yaw_quat(math.radians(2)), [0, 0, 0], yaw_quat(0.0))
    summary = rec.summary(events=(5.0,))
    assert summary["pos_err_median_mm"] == pytest.approx(1.0)
    assert summary["yaw_err_median_deg"] == pytest.approx(2.0)
    assert summary["recovery_s"] == pytest.approx(0.8)
    rec.add(10.0, [0.05, 0, 0], yaw_quat(0.0), [0, 0, 0], yaw_quat(0.0))
    assert rec.recovery(5.0) == math.inf  # not recovered by the end


def test_offline_runtime_needs_no_world_and_refuses_switches_without_one(scene: SceneSpec) -> None:
    with pytest.raises(ValueError, match="real world"):
        Runtime(scene, RuntimeConfig())
    runtime = Runtime(scene, RuntimeConfig(follow=False, correct=False))
    targets = scripted_targets(scene, 1 / 60, 240)
    start = runtime.twin.state().object_pos[0].copy()
    for q in targets:
        report = runtime.frame(q)
    assert report.correction is None and set(report.timing) == {"sense", "physics"}
    assert np.linalg.norm(report.state.object_pos[0, :2] - start[:2]) > 0.05  # the scripted push moved the T


def test_online_lockstep_frames_couple_twin_and_world(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, RuntimeConfig(), world)
        runtime.reset()
        runtime.calibrate()
        targets = scripted_targets(scene, 1 / 60, 60)
        t0 = world.clock.now()
        for q in targets:
            report = runtime.frame(q)
        assert world.clock.now() == pytest.approx(t0 + 1.0)
        parts = {f"correct.{k}" for k in ("prepare", "forward", "backward", "optimiser")}
        assert set(report.timing) == {"sense", "correct", "sight", "physics", "follow", "world"} | parts
        assert sum(report.timing[k] for k in parts) == pytest.approx(report.timing["correct"], rel=0.2)
        assert not report.desynced
        assert report.correction is not None and report.correction.wrenches.shape == (1, 6)
        truth = world.oracle.read()
        # The real arm follows the twin arm (within a few frames of lag).
        assert np.abs(truth.q - report.state.q).max() < 0.05
        # The twin's T stays near the real one (both at rest here, the gap only in the details).
        assert np.linalg.norm(truth.object_pos[0, :2] - report.state.object_pos[0, :2]) < 0.02
        # While the detector says desync, both arms hold; the policy's targets wait until it re-arms.
        held_q, real_q = report.state.q.copy(), truth.q.copy()
        assert runtime.detector is not None
        for _ in range(runtime.detector.counts.frames):  # a residual far above its baseline fires it
            runtime.detector.update(1e3)
        away = targets[-1] + 0.2
        for _ in range(10):  # in sync again, but re-arming takes `frames` low frames
            report = runtime.frame(away)
        assert report.desynced
        # (Both settle on what they were doing when it fired: within 0.03 rad, not the 0.2 rad away.)
        assert np.abs(report.state.q - held_q).max() < 0.03
        assert np.abs(world.oracle.read().q - real_q).max() < 0.03
        for _ in range(40):
            report = runtime.frame(away)
        assert not report.desynced
        assert np.abs(report.state.q - held_q).max() > 0.05


def test_the_twin_views_take_the_runtime_appearance(scene: SceneSpec) -> None:
    """`ViewsConfig.appearance` lays out the Gaussians the correction renders and `eps2d` sets their low-pass (the
    world is unaffected)."""
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        counts = []
        for spacing, eps2d in ((0.01, 0.3), (0.02, 0.05)):
            config = RuntimeConfig(views=ViewsConfig(AppearanceConfig(object_spacing=spacing), eps2d=eps2d))
            runtime = Runtime(scene, config, world)
            assert runtime.correction is not None
            assert runtime.correction.views.eps2d == eps2d  # the low-pass every twin render in these views uses
            counts.append(int(runtime.correction.views.object_mask.sum()))
    assert counts[1] < 0.5 * counts[0]  # twice the spacing: about a quarter of the object's Gaussians


def test_correcting_every_other_frame_holds_the_wrench_between(scene: SceneSpec) -> None:
    with pytest.raises(ValueError, match="correct_every"):
        RuntimeConfig(correct_every=0)
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, RuntimeConfig(correct_every=2), world)
        # the detector is fed one frame in two: the same seconds in half the frames
        assert runtime.detector is not None and runtime.detector.counts.frames == 10
        runtime.reset()
        runtime.calibrate()
        applied: list[np.ndarray] = []
        apply = runtime.twin.apply_wrenches
        runtime.twin.apply_wrenches = lambda w: (applied.append(np.array(w)), apply(w))[1]  # type: ignore[method-assign]
        corrected = []
        for q in scripted_targets(scene, 1 / 60, 120):
            report = runtime.frame(q)
            corrected.append(report.correction is not None)
            if report.correction is None:  # a frame between two corrections pulls with the last one's wrench
                assert np.array_equal(applied[-1], applied[-2])
            else:
                assert np.array_equal(applied[-1], report.correction.wrenches)
        truth = world.oracle.read()
        state, every = report.state, len(applied)
        # A real-time loop catching up skips corrections (`correct=False`): the last wrench is held for the one
        # frame it was scaled for, never longer (held for the whole catch-up it threw the T at 50 m/s).
        before = len(applied)
        assert runtime.frame(q).correction is not None
        for _ in range(5):
            runtime.frame(q, correct=False)
        assert len(applied) - before == 2
    assert corrected == [k % 2 == 0 for k in range(120)]
    assert every == 120  # every frame, skipped ones included, applies a wrench
    assert np.linalg.norm(truth.object_pos[0, :2] - state.object_pos[0, :2]) < 0.01  # and it stays in sync


def test_a_wrench_held_over_two_frames_pulls_a_displaced_object_back_without_oscillating(scene: SceneSpec) -> None:
    # Corrected every other frame, the visual spring is an explicit feedback held for two physics frames: divided
    # by the frames held (k·T²/m 2.2 for the T), a T pulled loose slid back and forth ever faster (43 mm off within
    # 1 s here); divided by their square (1.1, as when every frame is corrected) it settles.
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90))) as world:
        runtime = Runtime(scene, RuntimeConfig(correct_every=2), world)
        runtime.reset()
        runtime.calibrate()
        twin = runtime.twin
        qpos = twin.data.qpos[twin.layout.object_qpos[0]].copy()
        place_object(twin, 0, qpos[:3] + np.array([0.008, 0.004, 0.0]), qpos[3:])
        displaced = np.linalg.norm(
            world.oracle.read().object_pos[0, :2] - twin.data.qpos[twin.layout.object_qpos[0][:2]]
        )
        home = np.asarray(scene.robot.home)
        errors, speeds = [], []
        for _ in range(60):
            report = runtime.frame(home)
            truth, state = world.oracle.read(), report.state
            errors.append(float(np.linalg.norm(truth.object_pos[0, :2] - state.object_pos[0, :2])))
            speeds.append(float(np.linalg.norm(state.object_linvel[0, :2])))
    assert displaced > 0.008  # 9 mm off at the start
    assert max(errors[15:]) < 0.003, np.round(errors, 4)  # back within 3 mm after 0.25 s and stays there
    assert max(speeds[15:]) < 0.02, np.round(speeds, 3)  # m/s: no growing oscillation
    assert not report.desynced


def test_faults_do_not_crash_the_loop(scene: SceneSpec) -> None:
    cam = scene.cameras[0].name
    faults = (
        Disturbance(kind="drop_frame", camera=cam, at=0.2, duration=1.0),  # long enough to stall the camera
        Disturbance(kind="occlude", camera=scene.cameras[1].name, at=0.3, duration=0.5),
        Disturbance(kind="freeze_camera", camera=scene.cameras[2].name, at=0.4, duration=0.5),
        Disturbance(kind="lighting", at=0.5, duration=0.5, intensity=0.5),
    )
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90), stall_frames=10)) as world:
        runtime = Runtime(scene, RuntimeConfig(), world)
        runtime.reset()
        runtime.calibrate()
        for fault in faults:
            world.disturb(fault)
        skipped = 0
        for q in scripted_targets(scene, 1 / 60, 120):
            report = runtime.frame(q)
            skipped += report.correction is None
        truth = world.oracle.read()
    assert 0 < skipped < 120  # correction paused while camera 0 stalled, then resumed
    assert report.correction is not None
    assert np.linalg.norm(truth.object_pos[0] - report.state.object_pos[0]) < 0.02  # no divergence


@pytest.mark.wall_clock
def test_realtime_scenario_runs_on_the_wall_clock() -> None:
    from realissim.eval.sync.scenario import ScenarioConfig, run_scenario
    from realissim.tasks import make

    start = time.monotonic()
    out = run_scenario(make("pusht"), ScenarioConfig(seconds=2.0, push_time=1.0, realtime=True), progress=False)
    assert time.monotonic() - start < 180  # a guard against a hang, not a speed check (~25 s idle, 84 s loaded)
    assert out["frames_per_iteration"] > 1  # fewer corrected loops than frames: the twin caught up with the clock
    assert 1.0 < out["loop_hz"] < 200 and np.isfinite(out["pos_err_median_mm"])
    # The episode's clock starts after the calibration (seconds of wall time): the hand pushes the T at 1 s of the
    # episode, not during the fit. The twin runs an iteration behind the wall clock, so it first sees the 5 cm push
    # at 0.93–0.95 s of its own time (four runs; before 0.9 s in a fifth), and re-acquisition has taken most of it
    # back by 1.0 s (the error there 2.0–4.3 cm in seven runs, 1.95 cm in one CI run): the check is where the push
    # first shows, not how large it still is at 1.0 s.
    time_s, err = np.asarray(out["series"]["time"]), np.asarray(out["series"]["pos_err"])
    seen = time_s[err > 0.04]
    assert len(seen) > 0 and 0.5 < seen[0] < 1.5, seen[:3]
    assert err[time_s < 0.5].max() < 0.02


def test_the_runtime_refuses_a_world_whose_frame_period_is_not_the_twins(scene: SceneSpec) -> None:
    slow = Surrogate(scene, SurrogateConfig(fps=30.0))  # (not started: the check comes before the world is used)
    assert slow.frame_period == pytest.approx(1 / 30)
    with pytest.raises(ValueError, match="frame period"):
        Runtime(scene, RuntimeConfig(), slow)
    offline = Runtime(scene, RuntimeConfig(follow=False, correct=False))
    assert Surrogate(scene, SurrogateConfig()).frame_period == pytest.approx(offline.dt)
