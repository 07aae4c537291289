"""The desync detector fires on a sustained residual rise and re-arms when it recovers."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from realissim.runtime.desync import DesyncConfig, DesyncCounts, DesyncDetector

FPS = 60.0


def _config(
    warmup: int = 60,
    frames: int = 20,
    sight_frames: int = 6,
    overlap_frames: int = 6,
    baseline_window: int = 300,
    **rest: float,
) -> DesyncConfig:
    """A config whose times are these counts of 60 Hz frames (the detector's default feed)."""
    return DesyncConfig(warmup_s=warmup / FPS, fire_s=frames / FPS, sight_s=sight_frames / FPS,
                        overlap_s=overlap_frames / FPS, baseline_s=baseline_window / FPS, **rest)  # fmt: skip


def test_times_are_counted_in_the_frames_the_detector_is_fed() -> None:
    """One frame in two at 60 Hz: the same seconds in half the frames (rounded up); at 60 Hz every default is a
    whole number of frames."""
    assert DesyncConfig().counts(1 / FPS) == DesyncCounts(60, 20, 300, 6, 6)
    halved = DesyncConfig().counts(2 / FPS)
    assert (halved.warmup, halved.frames, halved.baseline_window, halved.sight_frames) == (30, 10, 150, 3)
    assert DesyncConfig().counts(3 / FPS).frames == 7  # 6⅔ frames: rounded up
    assert DesyncDetector(DesyncConfig(), frame_dt=2 / FPS).counts == halved
    with pytest.raises(ValueError, match="sight_s"):
        DesyncConfig(sight_s=0.0)


def test_fires_on_a_sustained_rise_and_rearms() -> None:
    rng = np.random.default_rng(0)
    det = DesyncDetector(_config(warmup=30, frames=10, rise=1.6, recover=1.2))
    residual = 1e-3 * (1 + 0.1 * rng.standard_normal(300))
    residual[100:103] *= 3  # a short spike: no alarm
    residual[150:200] *= 3  # a sustained rise: alarm, then recovery
    states = [det.update(float(r)) for r in residual]
    assert not any(states[:150])
    assert all(states[165:200])
    assert not states[-1]
    assert [kind for _, kind in det.events] == ["fired", "re-armed"]
    assert 159 <= det.events[0][0] <= 160 and 209 <= det.events[1][0] <= 210


def test_a_saturated_force_fires_only_where_the_sighting_disagrees_and_warmup_never_does() -> None:
    """Under sustained contact the pull sits at its cap while the twin is millimetres from the real object (sweep
    profile 02: 165 saturated frames 2–5 mm off, which used to raise 220 false alarms a minute); a capped pull
    counts only while the cameras see the object away from the twin's (here 15 mm: not agreeing, not yet away)."""
    det = DesyncDetector(_config(warmup=5, frames=3))
    assert not any(det.update(1.0, force_saturated=False, distance=0.002) for _ in range(5))
    assert not any(det.update(1.0, force_saturated=True, distance=0.004) for _ in range(100))  # in sync
    assert not any(det.update(1.0, force_saturated=True) for _ in range(100))  # not seen: no evidence
    assert [det.update(1.0, force_saturated=True, distance=0.015) for _ in range(3)] == [False, False, True]
    assert all(det.update(1.0, force_saturated=False, distance=0.012) for _ in range(3))  # not agreeing: held
    assert det.desynced and [kind for _, kind in det.events] == ["fired"]
    fresh = DesyncDetector(_config(warmup=50, frames=3))
    assert not any(fresh.update(100.0) for _ in range(20))  # no baseline yet


def test_a_fire_and_a_rearm_each_start_the_counts_afresh() -> None:
    """Firing again after a re-arm needs `frames` fresh frames of evidence, even where the evidence never let
    up (a residual still high when the search confirmed the twin and the detector re-armed on the sighting)."""
    det = DesyncDetector(_config(warmup=5, frames=4))
    for _ in range(5):
        det.update(1.0, distance=0.002)
    assert [det.update(10.0, distance=0.002) for _ in range(4)] == [False, False, False, True]
    det.confirm()  # the search found the object where the twin has it; the residual stays high
    assert [det.update(10.0, distance=0.002) for _ in range(4)] == [True, True, True, False]
    assert det.floor == 10.0
    assert [det.update(40.0, distance=0.002) for _ in range(4)] == [False, False, False, True]
    assert [f for f, _ in det.events] == [8, 12, 16]


def test_a_shape_overlap_below_its_own_in_sync_level_fires() -> None:
    """A fast turn about the object's middle leaves the sighting's centroids together (contact seed 0: 15 mm off,
    seen 2 mm) while the shapes' overlap falls (0.82 → 0.50). The threshold is relative to the overlap learnt in
    sync, which shadows lower (0.66 instead of 0.82); a re-arm on the search's confirmation accepts the overlap
    it finds as in sync, so an arm hiding part of the object cannot keep the detector firing."""
    cfg = _config(warmup=10, frames=5, overlap_frames=4)
    det = DesyncDetector(cfg)
    for _ in range(20):
        det.update(1.0, distance=0.003, overlap=0.8)
    assert det.overlap_baseline == pytest.approx(0.8)
    assert not any(det.update(1.0, distance=0.003, overlap=0.55) for _ in range(3))
    assert not det.update(1.0, distance=0.003, overlap=0.8)
    assert [det.update(1.0, distance=0.003, overlap=0.55) for _ in range(4)] == [False, False, False, True]
    det.confirm()
    # The re-arming frame's own overlap is not measured: the floor is judged on the last frames, not that one.
    states = [det.update(1.0, distance=0.003, overlap=o) for o in (0.55, 0.55, 0.55, 0.55, float("nan"))]
    assert states == [True] * 4 + [False]
    unseen = ([0.55] * 5 + [float("nan")]) * 8  # a frame without an overlap does not clear the floor
    assert not any(det.update(1.0, distance=0.003, overlap=o) for o in unseen)
    assert [det.update(1.0, distance=0.003, overlap=0.3) for _ in range(4)] == [False, False, False, True]
    shaded = DesyncDetector(cfg)
    for _ in range(20):
        shaded.update(1.0, distance=0.003, overlap=0.66)
    assert not any(shaded.update(1.0, distance=0.003, overlap=0.55) for _ in range(50))
    assert any(shaded.update(1.0, distance=0.003, overlap=0.45) for _ in range(4))
    off = DesyncDetector(_config(warmup=10, overlap_frames=4, overlap_drop=0.0))
    for _ in range(20):
        off.update(1.0, distance=0.003, overlap=0.8)
    assert not any(off.update(1.0, distance=0.003, overlap=0.3) for _ in range(50))


def test_suspicion_measures_the_evidence_towards_firing_and_clear_starts_it_afresh() -> None:
    """`suspicion`: the largest of the ways' counts over the count that fires it (what `early_search` acts
    on); `clear` (the twin's object just put where the images show it) restarts the counts, not the baselines."""
    cfg = _config(warmup=10, frames=8, overlap_frames=4, sight_frames=6)
    det = DesyncDetector(cfg)
    for _ in range(20):
        det.update(1.0, distance=0.003, overlap=0.8)
    assert det.suspicion == 0.0
    for _ in range(3):
        det.update(1.0, distance=0.03, overlap=0.8)  # the sighting sees the object elsewhere
    assert det.suspicion == pytest.approx(3 / 6)
    det.update(4.0, distance=0.03, overlap=0.8)  # and the residual rises: the largest fraction counts
    assert det.suspicion == pytest.approx(4 / 6)
    det.update(1.0, distance=0.003, overlap=0.5)
    det.update(1.0, distance=0.003, overlap=0.5)
    assert det.suspicion == pytest.approx(2 / 4)  # the others ended with their evidence
    baseline = det.baseline
    det.clear()
    assert det.suspicion == 0.0 and det.baseline == baseline and not det.desynced
    # Evidence after the clear counts from zero: 4 more low-overlap frames to fire, not the 2 left before.
    assert [det.update(1.0, distance=0.003, overlap=0.5) for _ in range(4)] == [False, False, False, True]
    assert det.suspicion == 0.0  # out of sync: nothing to suspect
    det.clear()  # a no-op while out of sync
    assert det.desynced


def test_detector_score_counts_hits_misses_and_false_alarms_against_the_oracle() -> None:
    from realissim.eval.sync.metrics import detector_score, fault_outcome

    t = np.arange(100) / 60
    err = np.full(100, 0.001)
    err[10:20] = 0.05  # an episode the detector catches
    err[40:43] = 0.03  # a short one it misses
    flags = np.zeros(100, dtype=bool)
    flags[15:25] = True  # fires late in the first episode, re-arms after it
    flags[70:75] = True  # fires while the twin is in sync: a false alarm
    score = detector_score(t, err, flags)
    assert (score["oracle_episodes"], score["hits"], score["misses"], score["false_alarms"]) == (2, 1, 1, 1)
    assert score["frames_out_of_sync"] == 13 and score["frames_flagged"] == 15
    assert score["frames_flagged_in_sync"] == 10
    assert score["missed_episode_s"] == [pytest.approx(3 / 60, abs=1e-3)]
    assert fault_outcome(t, err, flags, 0.1, 0.3)["verdict"] == "held"
    lost = fault_outcome(t, err, np.zeros(100, bool), 0.1, 0.3)
    assert lost["verdict"] == "recovered" and lost["back_in_sync_s"] == pytest.approx(20 / 60 - 0.3)
    stuck = err.copy()
    stuck[10:] = 0.05
    assert fault_outcome(t, stuck, np.zeros(100, bool), 0.1, 0.3)["verdict"] == "diverged"
    assert fault_outcome(t, np.full(100, 0.004), flags, 0.1, 0.3) == {
        "max_err_mm": pytest.approx(4.0),
        "held_frames": 15,
        "back_in_sync_s": 0.0,
        "verdict": "tracked",
    }


def test_a_slow_drift_does_not_become_the_baseline() -> None:
    """A twin drifting away raises the residual slowly; the baseline must not follow it up."""
    det = DesyncDetector(_config(warmup=30, frames=10))
    residual = np.concatenate([np.full(100, 1e-3), 1e-3 * 1.01 ** np.arange(1, 301)])  # ×20 over 5 s
    states = [det.update(float(r)) for r in residual]
    assert not any(states[:100]) and states[-1]
    fired = det.events[0][0]
    assert 100 + np.log(3) / np.log(1.01) < fired < 100 + np.log(3) / np.log(1.01) + 12  # at 3× the in-sync level


def test_fires_when_the_cameras_see_the_object_elsewhere_and_rearms_when_they_agree() -> None:
    cfg = _config(warmup=10, frames=10, sight_frames=6, sight_distance=0.02)
    det = DesyncDetector(cfg)
    for _ in range(20):
        assert not det.update(1e-3, distance=0.001)
    for _ in range(4):
        assert not det.update(1e-3, distance=float("nan"))  # not seen: no evidence either way
    away = [det.update(1e-3, distance=0.05) for _ in range(6)]
    assert away == [False] * 5 + [True]  # 0.1 s of the object seen 5 cm away
    for _ in range(9):
        assert det.update(1e-3, distance=0.001)  # agreeing again, but re-arming takes `frames`
    assert not det.update(1e-3, distance=0.001)
    assert [kind for _, kind in det.events] == ["fired", "re-armed"]


def test_a_check_that_finds_the_twin_right_vetoes_the_alarm_and_the_evidence_must_build_again() -> None:
    """The check is asked only on the frame the evidence fires; False keeps the detector in sync (a veto, with the
    counts restarted, so the next check waits for fresh evidence); True fires as without a check."""
    det = DesyncDetector(_config(warmup=10, frames=10, sight_frames=6, sight_distance=0.02))
    asked: list[bool] = []

    def check(verdict: bool) -> Callable[[], bool]:
        def ask() -> bool:
            asked.append(verdict)
            return verdict

        return ask

    for _ in range(20):
        assert not det.update(1e-3, distance=0.001, check=check(True))
    assert not asked, "no evidence, no check"
    states = [det.update(1e-3, distance=0.05, check=check(False)) for _ in range(12)]
    assert not any(states) and asked == [False, False] and det.vetoes == [25, 31]  # frames 26 and 32
    assert not det.events
    assert [det.update(1e-3, distance=0.05, check=check(True)) for _ in range(6)] == [False] * 5 + [True]
    assert asked == [False, False, True] and [kind for _, kind in det.events] == ["fired"]
    det.restart()
    assert det.vetoes == []


def test_the_sightings_own_error_widens_its_thresholds_and_a_confirmation_rearms_on_agreement() -> None:
    """With a 15 mm sighting error measured at calibration, 25 mm is no alarm (it would be without), 45 mm is;
    after a re-acquisition's confirmation it re-arms on agreement although the residual stays high."""
    cfg = _config(warmup=10, frames=10, sight_frames=6, sight_distance=0.02)
    plain, slack = DesyncDetector(cfg), DesyncDetector(cfg)
    slack.sight_slack = 0.015
    for _ in range(20):
        plain.update(1e-3, distance=0.015)
        slack.update(1e-3, distance=0.015)
    assert not any(slack.update(1e-3, distance=0.025) for _ in range(10))
    assert any(plain.update(1e-3, distance=0.025) for _ in range(10))
    assert any(slack.update(1e-3, distance=0.045) for _ in range(10))
    for _ in range(30):  # agreeing, but the residual stays 2× its baseline: no re-arm ...
        assert slack.update(2e-3, distance=0.01)
    slack.confirm()  # ... until a re-acquisition confirms the twin
    assert [slack.update(2e-3, distance=0.01) for _ in range(10)] == [True] * 9 + [False]


def test_a_residual_confirmed_high_at_re_arming_is_the_new_floor_until_it_comes_down() -> None:
    """Re-armed on a re-acquisition's confirmation with the residual still 3.5× its baseline (shadows the twin
    does not render): it does not fire again at once; a further 3× rise still fires; back at the baseline the
    floor is gone and 3.5× fires again."""
    cfg = _config(warmup=10, frames=10, sight_frames=6, sight_distance=0.02)
    det = DesyncDetector(cfg)
    for _ in range(20):
        det.update(1e-3, distance=0.005)
    assert any(det.update(3.5e-3, distance=0.005) for _ in range(10))
    det.confirm()
    assert [det.update(3.5e-3, distance=0.005) for _ in range(10)] == [True] * 9 + [False]
    assert det.floor == pytest.approx(3.5e-3)
    assert not any(det.update(3.5e-3, distance=0.005) for _ in range(100))  # before: fired again every 11 frames
    assert any(det.update(12e-3, distance=0.005) for _ in range(10))  # 3.4× the floor: a loss all the same
    det.confirm()
    for _ in range(10):
        det.update(12e-3, distance=0.005)
    assert not det.desynced
    for _ in range(5):
        det.update(1e-3, distance=0.005)
    assert det.floor == 0.0
    assert any(det.update(3.5e-3, distance=0.005) for _ in range(10))
    assert [kind for _, kind in det.events] == ["fired", "re-armed"] * 2 + ["fired"]


def test_an_alarm_that_ends_a_loss_at_once_is_not_a_false_alarm() -> None:
    """A loss of 0.1 s that the alarm's re-acquisition ends in the alarm's first frame: the error is gone
    during the alarm, but it followed a real loss within `within`, so it is not false; one 1 s later is."""
    from realissim.eval.sync.metrics import detector_score

    t = np.arange(600) / 60
    err = np.full(600, 0.002)
    err[100:106] = 0.04  # the loss, shorter than an oracle episode's 0.25 s
    flags = np.zeros(600, dtype=bool)
    flags[106:130] = True  # fired after 6 frames; the twin was put right in that frame
    flags[300:320] = True  # an alarm with no loss anywhere near it
    score = detector_score(t, err, flags, min_duration=0.25, within=0.25)
    assert score["false_alarms"] == 1 and score["alarms"] == 2
    assert detector_score(t, err, flags)["false_alarms"] == 2  # without `within`: judged on the alarm alone
    yaw = np.zeros(600)
    yaw[290:310] = np.radians(30.0)  # the second alarm's T turned 30° about its centre: a loss of its pose
    posed = detector_score(t, err, flags, min_duration=0.25, within=0.25, yaw_err=yaw)
    assert posed["false_alarms"] == 1 and posed["false_alarms_pose"] == 0
    yaw[290:310] = np.radians(8.0)  # under the 10° that counts as lost: still false
    assert detector_score(t, err, flags, min_duration=0.25, within=0.25, yaw_err=yaw)["false_alarms_pose"] == 1


def test_yaw_error_of_a_t_flipped_over_compares_footprints() -> None:
    """A T turned upside down about its stem axis (body y) has an upright twin's footprint at the same yaw;
    the yaw error must be ~0 there, and still the turn between two upright bodies."""
    from realissim.eval.sync.metrics import pose_errors
    from realissim.geometry import axis_angle_quat, quat_mul, yaw_quat

    yaw = 0.7
    upright = yaw_quat(yaw)
    flipped = quat_mul(upright, axis_angle_quat(np.array([0.0, 1.0, 0.0]), np.pi))
    _, err = pose_errors(np.zeros(3), upright, np.zeros(3), flipped)
    assert err == pytest.approx(0.0, abs=1e-9)
    _, err = pose_errors(np.zeros(3), yaw_quat(yaw + 0.3), np.zeros(3), upright)
    assert err == pytest.approx(0.3, abs=1e-9)
    _, err = pose_errors(np.zeros(3), yaw_quat(yaw + np.pi), np.zeros(3), upright)  # turned, not flipped
    assert err == pytest.approx(np.pi, abs=1e-9)


def test_the_online_report_scores_the_detector_from_each_episodes_sync_errors_and_events() -> None:
    """Three online episodes of 10 s at 10 Hz: an alarm with the twin 5 mm off (false), a 1 s loss flagged 0.1 s
    in (a hit), a 1 s loss never flagged (a miss and a silent loss); an episode that failed is skipped."""
    from realissim.eval.episode import EpisodeResult
    from realissim.eval.online import OnlineEpisode, detector_summary
    from realissim.spec.state import StartState

    start = StartState(objects=(), q=(0.0,) * 7)
    times = [round(0.1 * k, 1) for k in range(100)]

    def episode(errors: np.ndarray, events: list[tuple[float, str]]) -> OnlineEpisode:
        result = EpisodeResult(start=start, times=list(times), desync_events=events)
        return OnlineEpisode(0, 0, result, None, [float(e) for e in errors])

    calm = np.full(100, 0.005)
    lost = calm.copy()
    lost[50:60] = 0.03
    missed = calm.copy()
    missed[20:30] = 0.03
    episodes = [
        episode(calm, [(3.0, "fired"), (3.35, "re-armed")]),
        episode(lost, [(5.1, "fired"), (6.2, "re-armed")]),
        episode(missed, []),
        OnlineEpisode(1, 0, None, "surrogate died"),
    ]
    s = detector_summary(episodes)
    assert (s["oracle_loss_episodes"], s["detector_hits"], s["false_alarms"]) == (2, 1, 1)
    assert s["detector_recall"] == pytest.approx(0.5)
    assert s["false_alarms_per_min"] == pytest.approx(1 / (28 / 60))  # 10 + 9 + 9 s in sync
    assert s["longest_silent_loss_s"] == pytest.approx(1.0, abs=0.11)
    late = [episode(lost, [(5.4, "fired"), (6.2, "re-armed")])]  # flagged 0.4 s in: a miss
    assert detector_summary(late)["detector_recall"] == 0.0
