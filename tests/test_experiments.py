"""The experiments' shared pipeline (experiments/pipeline.py): the start-by-start pairing of offline and
online outcomes that the experiment tables report."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from pipeline import Row, paired_outcomes, table


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
