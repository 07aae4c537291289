"""The `realissim` command: help text, scene export/check, the twin-only push and the closed-loop demo end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tyro

from realissim.cli import main
from realissim.cli.main import VERBS
from realissim.cli.train import Train
from realissim.learn.config import TrainConfig


def test_help_lists_every_subcommand() -> None:
    out = subprocess.run([sys.executable, "-m", "realissim.cli", "--help"], capture_output=True, text=True, check=True)
    for name in VERBS:
        assert name in out.stdout


def _flags(*verb: str) -> set[str]:
    """The long flags `realissim VERB --help` lists."""
    out = subprocess.run([sys.executable, "-m", "realissim.cli", *verb, "--help"], capture_output=True, text=True,
                         check=True, env={**os.environ, "COLUMNS": "200"}).stdout  # fmt: skip
    return set(re.findall(r"(--[a-z][a-z0-9-.]*)", out))


def test_each_eval_subcommand_takes_only_its_own_flags() -> None:
    offline, online, sweep = _flags("eval", "offline"), _flags("eval", "online"), _flags("eval", "sweep")
    shared = {"--starts", "--limit", "--steps", "--seed", "--threads", "--max-seconds", "--replan-every", "--kind"}
    assert shared <= offline & online & sweep
    assert {"--envs", "--ray", "--sleep", "--workers"} <= offline
    assert not {"--gap", "--realtime", "--trials", "--correct-every", "--max-held-s", "--online-workers"} & offline
    assert {"--gap", "--realtime", "--trials", "--correct-every", "--calibrate-at", "--max-held-s"} <= online
    assert not {"--envs", "--ray", "--sleep", "--online", "--online-starts"} & online
    assert {"--online", "--online-starts", "--online-limit", "--online-workers", "--ray", "--envs"} <= sweep


def test_train_flags_are_the_train_config_embedded() -> None:
    train = tyro.cli(Train, args=["--obs", "wrist", "--wrist-lift", "--steps", "300", "--flow-steps", "4",
                                  "--channels", "16", "32", "--out", "runs/x"])  # fmt: skip
    config = train.config
    assert (config.steps, config.model.obs, config.model.wrist_lift) == (300, "wrist", True)
    assert (config.model.flow.steps, config.model.network.channels, train.out) == (4, (16, 32), Path("runs/x"))
    assert tyro.cli(Train, args=[]).config == TrainConfig()


def test_a_verb_starts_without_importing_the_others() -> None:
    code = (
        "import sys\n"
        "from realissim.cli import main\n"
        "try:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'mujoco', 'realissim.envs', 'realissim.cli.demo') if m in sys.modules]\n"
        "print('heavy:', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "heavy: []" in out


def test_scene_write_then_check(tmp_path, capsys) -> None:
    path, mjcf = tmp_path / "pusht.json", tmp_path / "pusht.xml"
    assert main(["scene", "--out", str(path), "--mjcf", str(mjcf)]) == 0
    assert main(["scene", "--check", str(path)]) == 0
    assert "valid scene 'pusht'" in capsys.readouterr().out
    assert mjcf.read_text().startswith("<mujoco")
    doc = json.loads(path.read_text())
    doc["objects"][0]["mass"] = -1
    path.write_text(json.dumps(doc))
    assert main(["scene", "--check", str(path)]) == 2
    assert "objects[0].mass" in capsys.readouterr().err


def test_scene_takes_the_task_and_its_options_and_names_bad_ones(tmp_path, capsys) -> None:
    path = tmp_path / "scene.json"
    args = ["scene", "--out", str(path), "--task", "pusht"]
    assert main([*args, "--task-option", "scene.camera_width=320", "scene.t_mass=0.3"]) == 0
    doc = json.loads(path.read_text())
    assert {c["width"] for c in doc["cameras"]} == {320} and doc["objects"][0]["mass"] == 0.3
    path.unlink()
    for options, named in ((["--task", "nope"], "unknown task 'nope'"),
                           (["--task-option", "scene.bogus=1"], "'bogus' for PushTTaskConfig.scene"),
                           (["--task-option", "success_threshold"], "expected KEY=VALUE"),
                           (["--task-option", "success_threshold.x=1"], "success_threshold is not a config"),
                           (["--task-option", "success_threshold=2"], "success_threshold")):  # fmt: skip
        assert main([*args, *options]) == 2
        assert named in capsys.readouterr().err
    assert not path.exists()


@pytest.mark.slow
def test_push_runs_and_pushes_the_t_to_its_goal(tmp_path, capsys) -> None:
    assert main(["push", "--seconds", "4", "--out", str(tmp_path), "--no-progress"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["frames"] == 240
    assert report["t_goal_dist_end_m"] < 0.02 < report["t_goal_dist_start_m"]
    for name in ("scene.json", "model.xml", "states.npz", "config.json"):
        assert (tmp_path / name).exists()
    assert (tmp_path / "views.png").read_bytes().startswith(b"\x89PNG")
    assert report["render_backend"] == "cpu" and report["render_ms_median"] > 0
    assert "pusht twin physics demo" in capsys.readouterr().out


def test_surrogate_runs_and_bad_gap_is_named(tmp_path, capsys) -> None:
    gap = tmp_path / "gap.json"
    assert main(["surrogate", "--write-gap", str(gap)]) == 0
    doc = json.loads(gap.read_text())
    out = tmp_path / "run"
    args = ["surrogate", "--gap", str(gap), "--seconds", "0.5", "--camera-size", "160", "90"]
    assert main([*args, "--out", str(out), "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] == 30 and report["cameras"] == 3
    assert (out / "views.png").read_bytes().startswith(b"\x89PNG")
    doc["arm"]["latency"] = -1.0
    gap.write_text(json.dumps(doc))
    assert main([*args, "--out", str(out), "--no-progress"]) == 2
    assert "arm.latency" in capsys.readouterr().err


@pytest.mark.slow
def test_closed_loop_demo_writes_its_report_recording_and_plots(tmp_path, capsys) -> None:
    assert main(["demo", "--seconds", "2", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "| position error, median (mm)" in out and "correction on" in out
    report = json.loads((tmp_path / "report.json").read_text())
    for run in ("on", "off"):
        assert report[run]["pos_err_median_mm"] >= 0 and report[run]["loop_hz"] > 0
    assert "correct" in report["on"]["timing_ms"] and "correct" not in report["off"]["timing_ms"]
    for name in ("errors.png", "views.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
    series = np.load(tmp_path / "series.npz")
    assert len(series["on_time"]) == len(series["off_pos_err"]) == 120
    rrd = tmp_path / "demo.rrd"
    rerun = Path(sys.executable).with_name("rerun")
    verify = subprocess.run([str(rerun), "rrd", "verify", str(rrd)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    printed = subprocess.run([str(rerun), "rrd", "print", str(rrd)], capture_output=True, text=True, check=True).stdout
    for entity in ("on/cameras/front/real", "off/world/twin/arm", "on/correction/force_N", "off/error/position_mm"):
        assert f"correction_{entity}" in printed


def test_closed_loop_demo_names_bad_options(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:  # tyro rejects the value the config refuses, with status 2
        main(["demo", "--seconds", "-1", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "seconds" in capsys.readouterr().err
    gap = tmp_path / "gap.json"
    gap.write_text('{"arm": {"latency": "soon"}}')
    assert main(["demo", "--gap", str(gap), "--out", str(tmp_path)]) == 2
    assert "arm.latency" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()
