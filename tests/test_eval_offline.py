"""Offline evaluation and checkpoint sweeps through their public interfaces: scripted policies that always and
never succeed, a progress that lies, and the sweep's choice, resume and outputs."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from helpers import HoldStill, near_goal_starts
from realissim.eval.offline import OfflineReport, evaluate_offline, write_report
from realissim.eval.sweep import SweepRow, choose, compare_sweeps, run_checkpoints
from realissim.expert.pusht import PushTExpert
from realissim.policy.base import PerEnvPolicies
from realissim.tasks import make


@pytest.fixture(scope="module")
def task():
    return make("pusht")


def test_always_and_never_successful_policies_score_100_and_0_and_a_lying_progress_is_caught(task, tmp_path) -> None:
    starts = near_goal_starts(task, [(0.0, 0.04, 0.0), (0.03, -0.02, 0.3)])
    expert = evaluate_offline(task, PerEnvPolicies([PushTExpert(task.scene)]), starts, 1, 20.0, progress=False)
    s = expert.summary()
    assert expert.successes == 2, [r.final for r in expert.results]
    assert s["success"] == 1.0 and s["success_ci95"][0] > 0.15 and s["median_time_to_success_s"] < 20.0
    never = evaluate_offline(task, PerEnvPolicies([HoldStill(), HoldStill()]), starts, 2, 3.0, progress=False)
    s = never.summary()
    assert never.successes == 0 and s["success"] == 0.0 and s["progress_success"] == 0.0
    assert s["mean_final_coverage"] < 0.95
    # The honest expert beside a liar (holds still, claims to be done): the claims say 3/3, the truth 2/3.
    liar = evaluate_offline(task, PerEnvPolicies([HoldStill(1.0)]), starts[:1], 1, 3.0, progress=False)
    mixed = OfflineReport(expert.results + liar.results, expert.wall_s + liar.wall_s, 1)
    s = mixed.summary()
    assert s["successes"] == 2 and s["progress_success"] == 1.0
    assert s["progress_agreement_matrix"] == [[0, 1], [0, 2]] and s["progress_agreement_kappa"] == pytest.approx(0)
    write_report(mixed, tmp_path / "r", {"what": "test"})
    saved = json.loads((tmp_path / "r" / "results.json").read_text())
    assert saved["what"] == "test" and saved["successes"] == 2
    assert len((tmp_path / "r" / "episodes.csv").read_text().splitlines()) == 4


def test_sweep_finds_checkpoints_by_step_and_chooses_the_most_successful(tmp_path) -> None:
    with pytest.raises(ValueError, match="no checkpoints"):
        run_checkpoints(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    for step in (2000, 10000, 400):
        (tmp_path / "checkpoints" / f"step_{step:07d}.pt").write_bytes(b"")
    (tmp_path / "checkpoints" / "notes.txt").write_text("")
    assert [s for s, _ in run_checkpoints(tmp_path)] == [400, 2000, 10000]

    def row(step: int, k: int) -> SweepRow:
        return SweepRow(step, f"step_{step}", 50, k, k / 50, (0.0, 1.0), 0.0, math.nan)

    assert choose([row(400, 10), row(2000, 31), row(10000, 30)]).step == 2000
    assert choose([row(400, 10), row(2000, 31), row(10000, 31)]).step == 10000  # a tie goes to more training
    with pytest.raises(ValueError):
        choose([])


def test_offline_and_online_sweeps_are_compared_checkpoint_by_checkpoint(tmp_path) -> None:
    def row(step: int, k: int, n: int = 50) -> SweepRow:
        return SweepRow(step, f"step_{step}", n, k, k / n, (0.0, 1.0), 0.0, 0.5 + 0.4 * k / n)

    offline = [row(2000, 5), row(4000, 20), row(6000, 30), row(8000, 28)]
    agreeing = [row(2000, 2, 20), row(4000, 8, 20), row(6000, 14, 20), row(8000, 11, 20)]
    both = compare_sweeps(offline, agreeing, tmp_path, ("select", "online"))
    assert both["checkpoints"] == 4 and both["chosen_step"] == 6000 and both["chosen_online"]["successes"] == 14
    assert both["spearman"][0] == pytest.approx(1.0) and both["mmrv"][0] == 0.0
    assert (tmp_path / "sweep_both.json").exists() and (tmp_path / "success_both.png").stat().st_size > 0
    # Online prefers step 8000: offline orders 6000 > 8000 wrongly, by 0.15 online for both → MMRV 2·0.15/4.
    swapped = [row(2000, 2, 20), row(4000, 8, 20), row(6000, 11, 20), row(8000, 14, 20)]
    both = compare_sweeps(offline, swapped, tmp_path, ("select", "online"))
    assert both["mmrv"][0] == pytest.approx(0.075) and both["best_online_step"] == 8000
    assert both["spearman"][0] == pytest.approx(0.8)
    assert both["coverage_spearman"][0] == pytest.approx(0.8)  # the coverages here follow the rates
    # Every checkpoint fails online: success cannot rank them, the final coverage still can.
    floor = [dataclasses.replace(r, successes=0, success=0.0) for r in agreeing]
    both = compare_sweeps(offline, floor, tmp_path, ("select", "online"))
    assert math.isnan(both["spearman"][0]) and both["coverage_spearman"][0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="both offline and online"):
        compare_sweeps(offline, [row(1000, 3, 20)], tmp_path, ("select", "online"))


def test_a_report_folder_becomes_one_self_contained_html_page(task, tmp_path) -> None:
    from realissim.cli import main
    from realissim.eval.report import build_html

    starts = near_goal_starts(task, [(0.0, 0.04, 0.0), (0.03, -0.02, 0.3)])
    report = evaluate_offline(task, PerEnvPolicies([HoldStill(1.0), HoldStill(1.0)]), starts, 2, 1.0, progress=False)
    write_report(report, tmp_path / "r", {"checkpoint": "none"})
    assert (tmp_path / "r" / "curves.png").exists() and (tmp_path / "r" / "agreement.png").exists()
    assert main(["report", str(tmp_path / "r"), "--title", "held still"]) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert "held still" in page and page.count("data:image/png;base64,") == 2 and "Episodes (2)" in page
    assert "<img src='r" not in page  # nothing refers to files beside it
    with pytest.raises(ValueError, match=r"no results\.json"):
        build_html(tmp_path)
