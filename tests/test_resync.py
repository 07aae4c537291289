"""The runtime finds a lost object again: the detector fires on a loss (from images alone), the follower holds
the real arm, a global search puts the twin's object where the cameras see it, and the loop resumes; over an
episode in sync the detector stays quiet. Online over the surrogate, lock-step, 3 cameras at 160 × 90."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from helpers import scripted_targets
from realissim.estimate.placement import place_object
from realissim.geometry import quat_mul, quat_to_mat, quat_yaw, yaw_quat
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.runtime import FrameReport, Runtime, RuntimeConfig, SupervisionConfig
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.twin.rests import tipped_rests

pytestmark = pytest.mark.slow

FPS = 60


@pytest.fixture(scope="module")
def online(scene: SceneSpec) -> Iterator[tuple[Surrogate, Runtime]]:
    """A surrogate and a runtime calibrated to it at the scene's start (as `Env` does on its first reset). The
    early search is off, so that a loss goes through the alarm (the tests of the early search turn it on)."""
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90), seed=3)) as world:
        runtime = Runtime(scene, RuntimeConfig(supervision=SupervisionConfig(early_search=0.0)), world)
        runtime.reset()
        runtime.calibrate()
        yield world, runtime


@pytest.fixture(scope="module")
def unsearched(scene: SceneSpec) -> Iterator[tuple[Surrogate, Runtime]]:
    """As `online`, with re-acquisition off: a loss stays a loss."""
    with Surrogate(scene, SurrogateConfig(camera_size=(160, 90), seed=4)) as world:
        runtime = Runtime(scene, RuntimeConfig(supervision=SupervisionConfig(reacquire=False)), world)
        runtime.reset()
        runtime.calibrate()
        yield world, runtime


def _errors(world: Surrogate, report: FrameReport) -> tuple[float, float]:
    """The twin's T against the oracle (evaluation only): planar position error, m, and yaw error, rad."""
    truth = world.oracle.read()
    pos = float(np.linalg.norm(report.state.object_pos[0, :2] - truth.object_pos[0, :2]))
    yaw = abs(math.remainder(quat_yaw(report.state.object_quat[0]) - quat_yaw(truth.object_quat[0]), 2 * math.pi))
    return pos, yaw


def _teleport(runtime: Runtime, distance: float, turn: float, direction: float) -> None:
    """Move the twin's T (not the real one) `distance` m in the planar direction `direction` rad and turn it by
    `turn` rad; it must land clear of the arm."""
    s = runtime.twin.state()
    pos = s.object_pos[0] + distance * np.array([math.cos(direction), math.sin(direction), 0.0])
    placed = place_object(runtime.twin, 0, pos, yaw_quat(quat_yaw(s.object_quat[0]) + turn))
    assert placed.placed and not placed.shift.any()


def _settle(runtime: Runtime, home: np.ndarray, frames: int) -> FrameReport:
    report = None
    for _ in range(frames):
        report = runtime.frame(home)
        assert not report.desynced, "the detector fired while twin and world agree"
    assert report is not None
    return report


@pytest.mark.parametrize("direction", [0.6, 3.5])
def test_a_t_teleported_15_cm_and_90_degrees_away_is_resynced_within_a_second(
    online: tuple[Surrogate, Runtime], direction: float
) -> None:
    world, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    runtime.reset()
    _settle(runtime, home, 15)
    _teleport(runtime, 0.15, math.pi / 2, direction)
    fired = rearmed = None
    for frame in range(FPS):
        report = runtime.frame(home)
        if report.desynced and fired is None:
            fired = frame
        if fired is not None and not report.desynced:
            rearmed = frame
            break
    assert fired is not None and fired <= 12, "the detector must fire within 0.2 s of the loss"
    assert runtime.reacquisitions and runtime.reacquisitions[0].placed
    assert rearmed is not None, "the twin must be back in sync (detector re-armed) within 1 s"
    pos, yaw = _errors(world, report)
    assert pos < 0.01 and yaw < math.radians(3.0), (pos, math.degrees(yaw))


def test_the_detector_fires_on_a_forced_loss_and_the_follower_holds(unsearched: tuple[Surrogate, Runtime]) -> None:
    """Re-acquisition off: the twin's T held 6 cm from the real one must be flagged, and while flagged the
    real arm must not move however the policy commands it."""
    world, runtime = unsearched
    runtime.reset()
    home = np.asarray(runtime.scene.robot.home)
    _settle(runtime, home, 10)
    held = runtime.twin.state().object_pos[0] + np.array([0.0, 0.06, 0.0])
    quat = runtime.twin.state().object_quat[0]
    fired = None
    for frame in range(30):
        place_object(runtime.twin, 0, held, quat)  # keep the twin's T away from the real one
        report = runtime.frame(home)
        if report.desynced and fired is None:
            fired = frame
    assert fired is not None and fired <= 12
    q_held = world.oracle.read().q.copy()
    away = home + np.array([0.15, 0.1, 0.0, -0.1, 0.0, 0.1, 0.0])
    for _ in range(30):
        place_object(runtime.twin, 0, held, quat)
        report = runtime.frame(away)
        assert report.desynced
    assert np.abs(world.oracle.read().q - q_held).max() < 0.01, "the real arm moved while desynced"
    assert not runtime.reacquisitions


def test_after_reacquisition_the_follower_resumes(online: tuple[Surrogate, Runtime]) -> None:
    world, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    runtime.reset()
    _settle(runtime, home, 10)
    _teleport(runtime, 0.12, -math.pi / 2, 2.0)
    away = home + np.array([0.1, 0.0, 0.0, -0.08, 0.0, 0.08, 0.0])  # above the table, clear of the T
    q0 = world.oracle.read().q.copy()
    desynced = []
    for _ in range(2 * FPS):
        desynced.append(runtime.frame(away).desynced)
    assert any(desynced) and not desynced[-1], "fired, then re-armed after the re-acquisition"
    assert np.abs(world.oracle.read().q - away).max() < 0.02, "the real arm must reach the new target"
    assert np.abs(q0 - away).max() > 0.05


def test_the_detector_stays_quiet_over_an_episode_in_sync(online: tuple[Surrogate, Runtime]) -> None:
    """The scene's scripted push of the T, then holding: 5 s, no alarm, nothing placed. The detector's own evidence
    may cross during the push if the search's check then finds the twin right (the alarm is vetoed, nothing moves):
    with the Gauss–Newton correction it did at 1.8 s, once or twice, when this test ran after the others in this file
    (issue 61's note: the detector's thresholds were set on Adam's residual)."""
    world, runtime = online
    runtime.reset()
    targets = scripted_targets(runtime.scene, runtime.dt, 5 * FPS)
    moved, start = 0.0, world.oracle.read().object_pos[0, :2].copy()
    for k, q in enumerate(targets):
        report = runtime.frame(q)
        assert not report.desynced, f"false alarm at {k / FPS:.2f} s"
        moved = max(moved, float(np.linalg.norm(world.oracle.read().object_pos[0, :2] - start)))
    assert all(r.check and r.placement is None for r in runtime.reacquisitions), runtime.reacquisitions
    assert moved > 0.03, "the episode must actually push the T"
    assert _errors(world, report)[0] < 0.01


def test_supervision_config_rejects_bad_retry_periods() -> None:
    with pytest.raises(ValueError, match="retry_frames"):
        replace(SupervisionConfig(), retry_frames=0)
    with pytest.raises(ValueError, match="early_search"):
        replace(SupervisionConfig(), early_search=1.0)
    with pytest.raises(ValueError, match="early_every"):
        replace(SupervisionConfig(), early_every=0)


def test_an_early_search_puts_a_drifting_t_back_before_the_detector_fires(
    online: tuple[Surrogate, Runtime],
) -> None:
    """The twin's T moved 3 cm and 60° from the real one: without the early search (the default) the detector
    fires (and the search then re-acquires it); with it the search runs in sync on half the evidence, places the
    T, and the detector never fires nor holds the arm."""
    world, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    default = runtime.supervisor.config
    outcomes = {}
    try:
        for early in (0.0, 0.5):
            runtime.supervisor.config = replace(default, early_search=early)
            runtime.reset()
            _settle(runtime, home, 15)
            _teleport(runtime, 0.03, math.radians(60), 1.0)
            before = len(runtime.reacquisitions)
            fired, report = False, None
            for _ in range(FPS):
                report = runtime.frame(home)
                fired |= report.desynced
            assert report is not None
            attempts = runtime.reacquisitions[before:]
            outcomes[early] = (fired, [a.early for a in attempts if a.placed], _errors(world, report))
    finally:
        runtime.supervisor.config = default
    fired, placed_early, _ = outcomes[0.0]
    assert fired and placed_early == [False], "without the early search the detector fires, then the T is re-placed"
    fired, placed_early, (pos, yaw) = outcomes[0.5]
    assert not fired, "the early search must put the T back before the detector fires"
    assert placed_early == [True]
    assert pos < 0.005 and yaw < math.radians(3)


def test_with_the_early_search_a_t_teleported_15_cm_is_resynced_without_an_alarm(
    online: tuple[Surrogate, Runtime],
) -> None:
    """The issue's re-acquisition case with the early search on (0.5): teleported 15 cm and 90° away, the twin's T
    is found and put back within 1 s, by the early search, before the detector fires."""
    world, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    default = runtime.supervisor.config
    try:
        runtime.supervisor.config = replace(default, early_search=0.5)
        runtime.reset()
        _settle(runtime, home, 15)
        _teleport(runtime, 0.15, math.pi / 2, 2.4)
        before = len(runtime.reacquisitions)
        back = None
        for frame in range(FPS):
            report = runtime.frame(home)
            assert not report.desynced, "the early search must put the T back before the detector fires"
            if back is None and _errors(world, report)[0] < 0.01:
                back = frame
    finally:
        runtime.supervisor.config = default
    assert back is not None and back < 12, back
    assert [a.early for a in runtime.reacquisitions[before:] if a.placed] == [True]
    pos, yaw = _errors(world, report)
    assert pos < 0.01 and yaw < math.radians(3.0), (pos, math.degrees(yaw))


def test_the_alarm_check_vetoes_a_near_loss_and_confirms_a_loss(online: tuple[Surrogate, Runtime]) -> None:
    """The detector made to fire on the sighting at 6 mm, the twin's T held 1 cm from the real one: the check's
    search finds the T within `alarm_check` (2 cm) of the twin's, so no alarm is raised, only vetoes; without
    the check the detector fires. Held 4 cm away, the check confirms the loss and the detector fires."""
    _, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    default, detector = runtime.supervisor.config, runtime.detector
    assert detector is not None and default.alarm_check == 0.02
    original = detector.config
    sensitive = replace(original, sight_distance=0.006)
    outcomes = {}
    try:
        detector.config = sensitive
        for check, distance in ((0.02, 0.01), (None, 0.01), (0.02, 0.04)):
            runtime.supervisor.config = replace(default, alarm_check=check)
            runtime.reset()
            _settle(runtime, home, 15)
            s = runtime.twin.state()
            held = s.object_pos[0] + distance * np.array([math.cos(1.0), math.sin(1.0), 0.0])
            fired = None
            for frame in range(30):
                place_object(runtime.twin, 0, held, s.object_quat[0])  # keep the twin's T off the real one
                if runtime.frame(home).desynced and fired is None:
                    fired = frame
            outcomes[check, distance] = (fired, len(detector.vetoes))
    finally:
        runtime.supervisor.config, detector.config = default, original
    fired, vetoes = outcomes[0.02, 0.01]
    assert fired is None and vetoes >= 3, "a near-loss the search finds within 2 cm must not raise an alarm"
    fired, vetoes = outcomes[None, 0.01]
    assert fired is not None and fired <= 10 and vetoes == 0, "without the check the same evidence fires"
    fired, vetoes = outcomes[0.02, 0.04]
    assert fired is not None and fired <= 10 and vetoes == 0, "a loss the search confirms must fire as before"


def test_while_held_the_lost_object_rests_instead_of_being_pulled(unsearched: tuple[Surrogate, Runtime]) -> None:
    """Re-acquisition off, the twin's T kept 3 cm from the real one until the detector fires: from then on the
    correction's wrench is withheld (`rest_while_held`), so the T stays where it was lost; with it off, the
    correction keeps pulling the held T (here back towards the real one: the correction sees it)."""
    world, runtime = unsearched
    home = np.asarray(runtime.scene.robot.home)
    moved, closer = {}, {}
    for rest in (True, False):
        runtime.supervisor.config = replace(runtime.supervisor.config, rest_while_held=rest)
        runtime.reset()
        _settle(runtime, home, 10)
        s = runtime.twin.state()
        held = s.object_pos[0] + 0.03 * np.array([math.cos(1.2), math.sin(1.2), 0.0])
        for _ in range(30):  # the T kept away until the detector fires, then let go
            place_object(runtime.twin, 0, held, s.object_quat[0])
            report = runtime.frame(home)
            if report.desynced:
                break
        assert report.desynced, "a 3 cm loss must be flagged"
        fired_err, _ = _errors(world, report)
        for _ in range(30):  # the pull applied while it was kept away has thrown it; it slides to a stop
            runtime.frame(home)
        held_at = runtime.twin.state().object_pos[0, :2].copy()
        for _ in range(20):
            report = runtime.frame(home)
        moved[rest] = float(np.linalg.norm(report.state.object_pos[0, :2] - held_at))
        closer[rest] = fired_err - _errors(world, report)[0]
    assert moved[True] < 0.5e-3, (moved, closer)
    assert closer[False] > 0.01 and closer[False] > closer[True] + 0.01, (moved, closer)


def test_a_lost_object_rests_until_placed_then_the_correction_tracks_again(
    online: tuple[Surrogate, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rest_while_held`: from the alarm to the search's placement no wrench is applied (here the search places
    the T in the frame the detector fires; the rest itself is the test above); from the placement on the
    correction pulls again, also in the frames the detector still holds before it re-arms."""
    _, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    runtime.reset()
    _settle(runtime, home, 10)
    applied: list[bool] = []
    apply = runtime.twin.apply_wrenches
    monkeypatch.setattr(runtime.twin, "apply_wrenches", lambda w: (applied.append(True), apply(w)))
    _teleport(runtime, 0.12, math.pi / 2, 0.6)
    lost, found = [], []  # whether a wrench was applied in each held frame before / after the placement
    placed = False
    for _ in range(FPS):
        was_held = runtime.desynced
        applied.clear()
        report = runtime.frame(home)
        if was_held:
            (found if placed else lost).append(bool(applied))
        placed |= any(a.placed for a in report.reacquisitions)
        if placed and not report.desynced:
            break
    assert placed and not report.desynced
    assert not any(lost), "a wrench was applied to the lost T before the search placed it"
    assert found and all(found), "the correction must track the placed T while the detector waits to re-arm"


def test_an_early_hold_pauses_both_arms_after_an_early_placement_without_an_alarm(
    online: tuple[Surrogate, Runtime],
) -> None:
    """`early_hold`: after an early placement the twin arm holds where the real arm was (its targets do not move
    although the policy's do) for that many frames, the detector never fires, and the arm moves on after."""
    _, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    away = home.copy()
    away[0] += 0.15  # the policy's target: a slow turn of the base joint, clear of the T
    default = runtime.supervisor.config
    hold = 20
    try:
        runtime.supervisor.config = replace(default, early_search=0.5, early_hold=hold)
        runtime.reset()
        _settle(runtime, home, 15)
        _teleport(runtime, 0.03, math.radians(60), 1.0)
        before = len(runtime.reacquisitions)
        targets, placed_at = [], None
        for frame in range(FPS):
            report = runtime.frame(home + (away - home) * min(1.0, frame / 30))
            assert not report.desynced, "an early placement with a hold is not an alarm"
            targets.append(runtime.twin.data.ctrl[runtime.twin.layout.actuators].copy())
            if placed_at is None and any(a.placed for a in runtime.reacquisitions[before:]):
                placed_at = frame
    finally:
        runtime.supervisor.config = default
    assert placed_at is not None and placed_at + hold + 10 < FPS, placed_at
    held = np.asarray(targets[placed_at : placed_at + hold])
    assert np.abs(held - held[0]).max() < 1e-9, "the twin arm's targets must hold for `early_hold` frames"
    assert abs(targets[-1][0] - held[0][0]) > 0.01, "after the hold the arm must move on towards the policy's target"


def test_a_t_standing_on_a_side_is_reported_and_the_arm_held_until_it_lies_flat_again(
    online: tuple[Surrogate, Runtime],
) -> None:
    """The real T tipped onto its bar's top face (stem up) in place: the twin's T cannot stand, so nothing is
    placed; the runtime reports the T tipped and holds the arm. Laid flat again, it is found and the loop resumes."""
    world, runtime = online
    home = np.asarray(runtime.scene.robot.home)
    runtime.reset()
    _settle(runtime, home, 10)
    s = runtime.twin.state()
    _, rests = tipped_rests(runtime.twin.model, int(runtime.sighting.object_bodies[0]))
    (rest,) = [r for r in rests if np.allclose(quat_to_mat(r.quat) @ (0.0, 1.0, 0.0), (0.0, 0.0, -1.0))]
    yaw = quat_yaw(s.object_quat[0])
    x, y = s.object_pos[0, :2] + (0.03, -0.02)
    standing = StartState.from_arrays(np.array([[x, y, rest.height]]), np.array([quat_mul(yaw_quat(yaw), rest.quat)]),
                                      home)  # fmt: skip
    world.reset(standing)  # the real T only: the twin's stays where it lay
    reports, q_held = [], None
    for _ in range(FPS):
        reports.append(runtime.frame(home + np.array([0.1, 0.0, 0.0, -0.08, 0.0, 0.08, 0.0])))
        if reports[-1].desynced and q_held is None:
            q_held = world.oracle.read().q.copy()
    assert q_held is not None and reports[-1].desynced and reports[-1].tipped == (0,), [r.tipped for r in reports[-5:]]
    assert 0 in runtime.tipped and runtime.tipped[0].explained > 0.15
    assert not any(a.placed for a in runtime.reacquisitions), "nothing placed for a T the twin cannot stand up"
    assert np.abs(world.oracle.read().q - q_held).max() < 0.01, "the real arm moved while the T stood"

    lying = StartState.from_arrays(np.array([[x, y, s.object_pos[0, 2]]]), np.array([yaw_quat(yaw)]), home)
    world.reset(lying)  # set flat again (by a person, as a real T would be)
    for _ in range(FPS):
        report = runtime.frame(home)
    assert not report.desynced and not report.tipped and not runtime.tipped
    assert any(a.placed for a in runtime.reacquisitions)
    pos, _ = _errors(world, report)
    assert pos < 0.01, pos
