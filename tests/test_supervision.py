"""Supervision on its own (no real world): the detector fed the twin's own renders with its T elsewhere, the holds,
the withheld wrench, re-acquisition and the early search, each as a step of the supervisor's state machine."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from realissim.estimate.correction import CorrectionResult
from realissim.estimate.placement import place_object
from realissim.geometry import quat_yaw
from realissim.runtime import SupervisionConfig
from realissim.runtime.supervision import Supervisor
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.twin.physics import PhysicsConfig, TwinPhysics
from realissim.twin.state import rest_state
from realissim.views.cameras import TwinViews

SIZE = (160, 90)
IN_SYNC = CorrectionResult(wrenches=np.zeros((1, 6)), loss_before=0.01, loss_after=0.01,
                           displacement=np.zeros(1), seconds=0.0)  # fmt: skip
"""A correction whose residual never rises: the evidence comes from the sighting alone."""


class Rig:
    """The twin at the scene's start, its views of the scene's cameras, and images of the twin with its T moved
    `away` m (the "real" frames: where the T really is)."""

    def __init__(self, scene: SceneSpec, away: float) -> None:
        self.twin = TwinPhysics(scene, PhysicsConfig())
        self.twin.reset(rest_state(StartState.of_scene(scene)))
        self.views = TwinViews(scene, self.twin.model, cameras=[c.resized(*SIZE) for c in scene.cameras])
        s = self.twin.state()
        self.q = s.q.copy()
        self.home = (s.object_pos[0].copy(), s.object_quat[0].copy())
        self.real = s.object_pos[0] + away * np.array([math.cos(2.0), math.sin(2.0), 0.0])
        assert place_object(self.twin, 0, self.real, s.object_quat[0]).placed
        rgb, _, _ = self.views.render(self.twin.data)
        self.images = np.clip(rgb.numpy() * 255.0 + 0.5, 0, 255).astype(np.uint8)
        assert place_object(self.twin, 0, *self.home).placed  # the twin's T back where it was: 'lost'

    def supervisor(self, **changes: object) -> Supervisor:
        config = replace(SupervisionConfig(alarm_check=None), **changes)
        return Supervisor(self.views, self.twin, config, correct_every=1)

    def twin_off(self) -> float:
        """The twin's T from the real one, m (planar)."""
        return float(np.linalg.norm(self.twin.state().object_pos[0, :2] - self.real[:2]))


@pytest.fixture(scope="module")
def rig(scene: SceneSpec) -> Rig:
    return Rig(scene, 0.04)


def _update(sup: Supervisor, rig: Rig, frame: int):
    timing: dict[str, float] = {}
    return sup.update(frame, IN_SYNC, rig.q, rig.images, timing), timing


def test_a_loss_holds_the_arms_and_withholds_the_wrench_until_the_twin_is_confirmed(rig: Rig) -> None:
    """Re-acquisition off: the sighting puts the T 4 cm from the twin's, so the detector fires after its
    `sight_frames`; from then on both arms hold and the wrench is withheld, frame after frame, nothing searched."""
    sup = rig.supervisor(reacquire=False)
    frames = sup.detector.counts.sight_frames
    for frame in range(1, frames):
        supervision, timing = _update(sup, rig, frame)
        assert not sup.desynced and not sup.withholding and not sup.hold_this_frame()
        assert supervision.sightings[0].seen and supervision.sightings[0].distance > 0.03
        assert set(timing) == {"sight"}
    for frame in range(frames, frames + 10):
        supervision, timing = _update(sup, rig, frame)
        assert sup.desynced and sup.withholding and sup.hold_this_frame()
        assert supervision.attempts == () and "reacquire" not in timing
    sup.restart()
    assert not sup.desynced and not sup.withholding and not sup.hold_this_frame()


def test_a_fired_detector_searches_and_places_the_twin_object_where_the_images_show_it(scene: SceneSpec) -> None:
    rig = Rig(scene, 0.04)
    sup = rig.supervisor()
    fired = None
    for frame in range(1, 30):
        supervision, timing = _update(sup, rig, frame)
        if supervision.attempts:
            fired = frame
            break
    assert fired == sup.detector.counts.sight_frames, "searched on the frame the detector fires"
    assert "reacquire" in timing
    (attempt,) = supervision.attempts
    assert attempt.placed and not attempt.early and supervision.placed
    assert supervision.arm_at is not None and np.allclose(supervision.arm_at, rig.q)
    assert rig.twin_off() < 0.01, "the twin's T put where the images show it"
    assert sup.desynced and not sup.withholding, "placed: the correction tracks again while the detector waits"
    for frame in range(fired + 1, fired + 1 + sup.detector.counts.frames):
        supervision, _ = _update(sup, rig, frame)
        assert supervision.attempts == (), "settled: not searched again before `recheck_frames`"
    assert not sup.desynced, "re-armed once the images agree with the twin for `frames` frames"
    assert sup.reacquisitions == [attempt]


def test_an_early_search_places_in_sync_and_holds_the_arms_for_early_hold_frames(scene: SceneSpec) -> None:
    rig = Rig(scene, 0.04)
    sup = rig.supervisor(early_search=0.5, early_hold=3)
    placed_at = None
    for frame in range(1, 10):
        supervision, _ = _update(sup, rig, frame)
        assert not sup.desynced
        if supervision.placed:
            placed_at = frame
            break
        assert not sup.hold_this_frame()
    assert placed_at == math.ceil(0.5 * sup.detector.counts.sight_frames), "on half the evidence"
    assert supervision.attempts[0].early and supervision.restart_lead
    assert rig.twin_off() < 0.01
    assert [sup.hold_this_frame() for _ in range(5)] == [True, True, True, False, False]


def test_the_twin_in_sync_is_confirmed_not_moved(scene: SceneSpec) -> None:
    """Images of the twin as it is: no evidence, nothing searched, nothing held, however long."""
    rig = Rig(scene, 0.0)
    sup = rig.supervisor(early_search=0.3)
    pos, yaw = rig.twin.state().object_pos[0].copy(), quat_yaw(rig.twin.state().object_quat[0])
    for frame in range(1, 40):
        supervision, _ = _update(sup, rig, frame)
        assert supervision.attempts == () and not sup.hold_this_frame() and not sup.desynced
    s = rig.twin.state()
    assert np.array_equal(s.object_pos[0], pos) and quat_yaw(s.object_quat[0]) == pytest.approx(yaw)


def test_the_alarm_check_looks_near_the_twin_first(scene: SceneSpec) -> None:
    """The sighting puts the T 4 cm from the twin's and the evidence fires. Checked within 5 cm, the near search
    finds it and vetoes the alarm with fewer renders than the global search's veto; checked within 2 cm, the near
    search's pose is too far to veto, the global search confirms the loss and the T is re-acquired from it."""
    rig = Rig(scene, 0.04)
    frames = rig.supervisor().detector.counts.sight_frames
    renders = {}
    for near in (0.2, None):
        sup = rig.supervisor(alarm_check=0.05, alarm_check_near=near)
        for frame in range(1, frames + 1):
            _update(sup, rig, frame)
        assert not sup.desynced and sup.detector.vetoes, "the T is within the check's 5 cm: no alarm"
        (check,) = [a for a in sup.reacquisitions if a.check]
        assert check.search.found and abs(np.linalg.norm(check.search.pos[:2] - rig.real[:2])) < 0.01
        renders[near] = check.search.renders
    assert renders[0.2] < renders[None], renders
    sup = rig.supervisor(alarm_check=0.02)
    for frame in range(1, frames + 1):
        _, timing = _update(sup, rig, frame)
    assert not sup.detector.vetoes and "check" in timing
    (placed,) = [a for a in sup.reacquisitions if a.placed]
    assert placed.search.renders > renders[0.2] and rig.twin_off() < 0.01
