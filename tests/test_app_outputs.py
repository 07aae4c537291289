"""`apps.outputs.RunOutputs`: the report every application writes, whole, listing what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from realissim.apps.outputs import RunOutputs
from realissim.spec.io import load_scene
from realissim.tasks import make


def test_outputs_are_written_whole_and_listed_in_order(tmp_path: Path) -> None:
    out = RunOutputs(tmp_path / "run")
    scene = make("pusht").scene
    out.scene(scene)
    out.json("report.json", {"x": np.float32(1.5), "bad": float("nan"), "path": Path("a/b")})
    out.npz("series.npz", t=np.arange(3))
    out.png("views.png", np.zeros((4, 5, 3), np.uint8))
    out.add("demo.rrd")
    assert out.written == ["scene.json", "report.json", "series.npz", "views.png", "demo.rrd"]
    assert load_scene(tmp_path / "run" / "scene.json") == scene
    assert json.loads((tmp_path / "run" / "report.json").read_text()) == {"x": 1.5, "bad": "nan", "path": "a/b"}
    assert np.load(tmp_path / "run" / "series.npz")["t"].tolist() == [0, 1, 2]
    assert (tmp_path / "run" / "views.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "report.json",
        "scene.json",
        "series.npz",
        "views.png",
    ]


def test_nowhere_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = RunOutputs(None)
    assert not out.enabled and out.path("x") is None
    assert out.json("report.json", {"a": 1}) is None and out.npz("a.npz", a=np.zeros(2)) is None
    out.add("demo.rrd")
    assert out.written == [] and list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path: Path) -> None:
    out = RunOutputs(tmp_path)
    out.json("report.json", {"a": 1})
    with pytest.raises(TypeError):
        out.json("report.json", {"a": object()})
    assert json.loads((tmp_path / "report.json").read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"] and out.written == ["report.json"]
