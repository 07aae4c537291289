"""The experiments' shared pipeline (experiments/pipeline.py): the start-by-start pairing of offline and
online outcomes that the experiment tables report; the camera-calibration experiment's reprojection error."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from camera_calibration import reprojection, table_grid
from pipeline import Row, paired_outcomes, table
from realtime_online import paired_table, successes

from realissim.tasks import make


def write(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_offline_and_online_outcomes_are_paired_start_by_start(tmp_path) -> None:
    offline = write(tmp_path / "off.csv", [{"episode": i, "success": ok} for i, ok in
                                           enumerate([True, True, False, False, True])])  # fmt: skip
    online = write(tmp_path / "on.csv", [
        {"start": 1, "trial": 0, "error": "", "success": False},   # offline only
        {"start": 0, "trial": 0, "error": "", "success": True},    # both
        {"start": 2, "trial": 0, "error": "", "success": True},    # online only
        {"start": 3, "trial": 0, "error": "", "success": False},   # neither
        {"start": 4, "trial": 0, "error": "SurrogateDiedError: gone", "success": ""},  # left out
        {"start": 3, "trial": 1, "error": "", "success": True},    # a second trial: left out
    ])  # fmt: skip
    p = paired_outcomes(offline, online)
    assert (p["both"], p["offline_only"], p["online_only"], p["neither"], p["starts"]) == (1, 1, 1, 1, 4)
    assert p["agree"] == pytest.approx(0.5)
    summary = {"episodes": 4, "successes": 2}
    line = table([Row("arm", 0.7, summary, summary, 3.0, 100, 80, summary, p)])[-1]
    assert "| 1 / 1 / 1 / 1 |" in line and "70.0 %" in line


def test_reprojection_error_is_zero_for_the_true_camera_and_measures_a_shift() -> None:
    """The calibration experiment's metric: 0 for the true camera; a principal point moved by (3, 4) px moves
    every projection by 5 px, which on the table is 5 px × depth / focal length."""
    cam = make("pusht").scene.cameras[0].resized(160, 90)
    K, X = cam.K_array, cam.X_WC_array
    points = table_grid()
    px, mm = reprojection(K, X, K, X, points)
    assert px.max() < 1e-9 and mm.max() < 1e-9
    shifted = K.copy()
    shifted[:2, 2] += (3.0, 4.0)
    px, mm = reprojection(shifted, X, K, X, points)
    assert px == pytest.approx(5.0, abs=1e-9)
    depth = (points - X[:3, 3]) @ X[:3, 2]  # the camera looks along its +z (OpenCV)
    assert mm == pytest.approx(1e3 * 5.0 * depth / K[0, 0], rel=1e-9)


def test_lockstep_and_realtime_outcomes_are_paired_by_start(tmp_path) -> None:
    def folder(name: str, outcomes: list[bool | None]) -> Path:
        (tmp_path / name).mkdir()
        rows = [{"start": k, "trial": 0, "error": "" if ok is not None else "surrogate died",
                 "success": "" if ok is None else str(ok)} for k, ok in enumerate(outcomes)]  # fmt: skip
        write(tmp_path / name / "episodes.csv", rows)
        return tmp_path / name

    lock = successes(folder("lock", [True, True, False, False, True, None]))
    real = successes(folder("real", [True, False, True, False, None]))
    assert lock[5] is False  # an episode that errored counts as failed
    assert paired_table(lock, real) == {"starts": 5, "both": 1, "lockstep_only": 2, "realtime_only": 1, "neither": 1}
