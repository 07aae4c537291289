"""System identification (issue 63): the twin-parameter file, the object fit on replayed windows (a world with known
dynamics: the fit must find them, and must not move when the data shows nothing), and the clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from realissim.twin.identified import IdentifiedDynamics, IdentifiedObject


def test_a_twin_parameter_file_round_trips_and_names_what_is_wrong(tmp_path: Path) -> None:
    dyn = IdentifiedDynamics(
        (IdentifiedObject("tblock", 0.86, 0.03, 1.0, None, (0.004, -0.003, 0.0), (0.001, 0.0015)),),
        {"dataset": "x", "rms_after_sigma": 0.7},
    )
    path = tmp_path / "sysid.json"
    dyn.save(path)
    assert IdentifiedDynamics.load(path) == dyn
    (draw,) = dyn.draws()
    assert (draw.name, draw.friction_scale, draw.mass_scale, draw.com_offset) == (
        "tblock",
        0.86,
        1.0,
        (0.004, -0.003, 0.0),
    )
    ranges = dyn.randomization(widen=2.0)
    assert ranges.friction == pytest.approx((0.80, 0.92)) and ranges.mass == (1.0, 1.0)  # mass: not identified, kept
    assert ranges.com_offset == pytest.approx(0.005 + 0.003) and ranges.objects == ("tblock",)
    data = json.loads(path.read_text())
    for mutate, match in [
        (lambda d: d.update(format="x"), "not a twin-parameter file"),
        (lambda d: d.update(version=7), "version 7"),
        (lambda d: d["objects"]["tblock"].update(friction_scale=-1), r"tblock\.friction_scale: must be a finite"),
        (lambda d: d["objects"]["tblock"].update(com_offset=[0, 0]), r"objects\.tblock"),
        (lambda d: d["objects"]["tblock"].update(frction=1), "unknown field 'frction'"),
    ]:
        bad = json.loads(json.dumps(data))
        mutate(bad)
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            IdentifiedDynamics.load(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        IdentifiedDynamics.load(path)
    assert np.isfinite(dyn.randomization().friction).all()


def _launches(truth: tuple, velocities: list[tuple[float, float, float]], seconds: float = 0.6) -> tuple:
    """A world with `truth` dynamics (the twin's model, so no other gap): the arm held at home, the T launched with
    each planar velocity (vx, vy m/s, ωz rad/s) and left to slide to rest — one recording each, as identification
    reads it (the arm's readings, the object's poses and velocities), and the scene."""
    from dataclasses import replace

    from realissim.spec.state import StartState
    from realissim.sysid.records import Recording
    from realissim.tasks import make
    from realissim.twin import TwinPhysics
    from realissim.twin.randomize import ObjectDynamics
    from realissim.twin.state import rest_state

    scene = make("pusht").scene
    twin = TwinPhysics(scene)
    ObjectDynamics(twin.model, [o.name for o in scene.objects]).apply(truth)
    recordings = []
    for i, (vx, vy, wz) in enumerate(velocities):
        start = rest_state(StartState.of_scene(scene))
        twin.reset(replace(start, object_linvel=np.array([[vx, vy, 0.0]]), object_angvel=np.array([[0.0, 0.0, wz]])))
        states = []
        for _ in range(round(seconds * 60)):
            twin.set_joint_targets(scene.robot.home, np.zeros(7))
            twin.step()
            states.append(twin.state())
        n = len(states)
        stack = {name: np.stack([getattr(s, name) for s in states]) for name in ("time", "q", "object_pos",
                 "object_quat", "object_linvel", "object_angvel")}  # fmt: skip
        recordings.append(Recording(i, stack["time"], stack["q"], stack["q"], stack["object_pos"], stack["object_quat"],
                                    stack["object_linvel"], stack["object_angvel"], np.zeros(n, bool),
                                    np.zeros((n, 1, 3))))  # fmt: skip
    return scene, recordings


def test_the_object_fit_finds_the_friction_of_a_sliding_object_and_leaves_the_mass_alone() -> None:
    from realissim.sysid.objects import ObjectFitConfig, find_windows, fit_objects
    from realissim.twin.randomize import ObjectDraw

    truth = (ObjectDraw("tblock", 1.5, 1.0, (0.0, 0.0, 0.0)),)
    scene, recordings = _launches(truth, [(0.5, 0.0, 0.0), (0.0, -0.45, 0.0), (-0.35, 0.3, 0.0)])
    config = ObjectFitConfig()
    slides = find_windows(recordings, config, scene)
    assert [(w.recording, w.slide) for w in slides] == [(0, True), (1, True), (2, True)]  # one per launch
    fit = fit_objects(scene, recordings, config)
    (est,) = fit.objects
    assert est.friction_scale == pytest.approx(1.5, rel=0.05)
    assert 0 < est.friction_ci < 0.15
    assert np.isnan(est.mass_ci) and est.mass_scale == 1.0  # not fitted unless asked
    assert est.com_offset == (0.0, 0.0, 0.0) and np.isnan(est.com_ci).all()
    assert fit.rms_after < 0.2 * fit.rms_before


def test_identification_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    from realissim.cli import main
    from realissim.sysid.objects import fit_objects
    from realissim.sysid.records import SysidError, load_recordings
    from realissim.twin.randomize import ObjectDraw

    scene, still = _launches((ObjectDraw("tblock"),), [(0.0, 0.0, 0.0)])
    with pytest.raises(SysidError, match="too still"):
        fit_objects(scene, still)
    offline = tmp_path / "offline"
    assert main(["collect", "--episodes", "1", "--max-seconds", "0.5", "--out", str(offline), "--no-progress"]) == 0
    with pytest.raises(SysidError, match="offline dataset"):
        load_recordings(offline)
    assert main(["sysid", str(offline), "--out", str(tmp_path / "sid")]) != 0
    assert not (tmp_path / "sid").exists()


def test_probing_strokes_leave_the_object_sliding_free_of_the_pusher() -> None:
    from realissim.envs.env import Env, EnvConfig
    from realissim.eval.episode import EpisodeObserver, run_episode
    from realissim.expert.probe import ProbePushes
    from realissim.sysid.objects import ObjectFitConfig, find_windows
    from realissim.sysid.records import Recording
    from realissim.tasks import make

    task = make("pusht")
    env = Env(task, EnvConfig())
    states = []

    class Keep(EpisodeObserver):
        def on_reset(self, env, observation) -> None:  # type: ignore[no-untyped-def]
            states.append(env.runtime.twin.state())

        def on_frame(self, frame) -> None:  # type: ignore[no-untyped-def]
            states.append(frame.state)

    run_episode(env, ProbePushes(task.scene), None, 6.0, [Keep()], stop_on_success=False, seed=3)
    frames = states[1:]
    names = ("time", "object_pos", "object_quat", "object_linvel", "object_angvel")
    stack = {n: np.stack([getattr(s, n) for s in frames]) for n in names}
    q_before = np.stack([s.q for s in states[:-1]])  # (the reading at a frame's start)
    n = len(frames)
    rec = Recording(0, stack["time"], q_before, q_before, stack["object_pos"], stack["object_quat"],
                    stack["object_linvel"], stack["object_angvel"], np.zeros(n, bool), np.zeros((n, 1, 3)))  # fmt: skip
    assert np.linalg.norm(rec.object_pos[-1, 0, :2] - rec.object_pos[0, 0, :2]) > 0.02
    slides = find_windows([rec], ObjectFitConfig(), task.scene)
    assert len(slides) >= 1 and all(w.slide for w in slides)
    top = np.linalg.norm(np.diff(rec.object_pos[:, 0, :2], axis=0), axis=1).max() * 60
    assert top > 0.25  # a stroke throws the T at well over the expert's 0.2 m/s


def test_collection_draws_dynamics_from_an_identification(tmp_path: Path) -> None:
    from realissim.cli import main
    from realissim.data.schema import DYNAMICS_KEY
    from realissim.data.store import Dataset

    params = tmp_path / "sysid.json"
    IdentifiedDynamics((IdentifiedObject("tblock", 0.8, 0.02),)).save(params)
    out = tmp_path / "demos"
    args = ["collect", "--episodes", "3", "--max-seconds", "0.3", "--randomize-from", str(params), "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(args) == 0
    data = Dataset(out, include_failed=True)
    draws = [e.extra[DYNAMICS_KEY]["tblock"] for e in data.all_episodes]
    frictions = [d["friction_scale"] for d in draws]
    assert all(0.76 - 1e-9 <= f <= 0.84 + 1e-9 for f in frictions) and len(set(frictions)) == 3  # 0.8 ± 2 × 0.02
    assert all(d["mass_scale"] == 1.0 and d["com_offset"] == [0.0, 0.0, 0.0] for d in draws)  # not identified: kept
    with pytest.raises(SystemExit) as refused:  # (tyro names the option, status 2)
        main(["collect", "--online", "--randomize-from", str(params), "--out", str(tmp_path / "x")])
    assert refused.value.code == 2
