"""`realissim collect` and `realissim data info` through the command line: datasets of the expert's episodes,
failed ones kept and marked, re-runs appending with new starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from realissim.apps.collect import CollectConfig
from realissim.cli import main
from realissim.data.store import Dataset


@pytest.mark.slow
def test_collect_appends_on_every_run_and_keeps_failures_marked(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demos"
    # 2.5 s is too short for most starts: failures are expected and must be kept, marked failed.
    args = ["collect", "--episodes", "2", "--out", str(out), "--max-seconds", "2.5", "--seed", "7", "--no-progress"]
    assert main(args) == 0
    first = Dataset(out, include_failed=True)
    assert [e.index for e in first.all_episodes] == [0, 1]
    assert main(args) == 0  # again: appends
    every = Dataset(out, include_failed=True).all_episodes
    assert [e.index for e in every] == [0, 1, 2, 3]
    assert len({e.seed for e in every}) == 4  # a new start for every episode
    starts = {tuple(np.round(e.start.object_pos[0], 6)) for e in every}
    assert len(starts) == 4
    for e in every:
        assert e.failed == (not e.success)
        assert e.duration <= 2.5 + 1.0 / 60 + 1e-9
    kept = Dataset(out)  # failed episodes excluded by default
    assert all(e.success for e in kept.episodes)
    assert main(["data", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "expert, offline" in text and "4 total" in text


def test_collect_refuses_a_gap_offline_and_a_bad_dataset(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="online"):
        CollectConfig(gap=tmp_path / "gap.json")
    with pytest.raises(ValueError, match=r"realtime.*--online"):
        CollectConfig(realtime=True)
    with pytest.raises(SystemExit) as exit_info:  # tyro rejects the option, naming it, with status 2
        main(["collect", "--episodes", "1", "--out", str(tmp_path / "x"), "--gap", "nope.json"])
    assert exit_info.value.code == 2
    assert "reality-gap profile" in capsys.readouterr().err
    not_a_dataset = tmp_path / "file"
    not_a_dataset.write_text("hello")
    assert main(["data", "info", str(not_a_dataset)]) == 3
    assert "dataset error" in capsys.readouterr().err


def test_collect_passes_its_expert_settings_to_the_expert() -> None:
    from realissim.apps.collect import make_expert
    from realissim.expert.pusht import PushTExpertConfig
    from realissim.tasks import make

    task = make("pusht")
    default = make_expert(task, CollectConfig())
    assert default.config == PushTExpertConfig()  # type: ignore[attr-defined]
    recipe = make_expert(task, CollectConfig(expert_travel_cost=0.06, expert_reseed=True))  # not the defaults
    assert recipe.config.travel_cost == 0.06 and recipe.config.reseed is True  # type: ignore[attr-defined]


@pytest.mark.slow
def test_parallel_collection_stores_what_one_process_collects_in_index_order(tmp_path: Path) -> None:
    from realissim.apps.collect import collect

    settings = dict(episodes=3, max_seconds=1.5, seed=3, progress=False)
    collect(CollectConfig(out=tmp_path / "one", **settings))  # type: ignore[arg-type]
    report = collect(CollectConfig(out=tmp_path / "two", workers=2, **settings))  # type: ignore[arg-type]
    assert report.added == 3 and report.total_episodes == 3
    one, two = Dataset(tmp_path / "one", include_failed=True), Dataset(tmp_path / "two", include_failed=True)
    assert [e.index for e in two.all_episodes] == [0, 1, 2]
    assert [e.seed for e in two.all_episodes] == [e.seed for e in one.all_episodes]
    for a, b in zip(one.all_episodes, two.all_episodes, strict=True):
        assert (a.length, a.success, a.final_coverage) == (b.length, b.success, b.final_coverage)
        for name in ("q", "object_pos", "q_des"):
            np.testing.assert_array_equal(one.arrays(a.index)[name][:], two.arrays(b.index)[name][:], err_msg=name)
    assert not list(tmp_path.glob(".two.part-*"))  # the workers' part datasets are gone
    collect(CollectConfig(out=tmp_path / "two", workers=2, **settings | {"episodes": 2}))  # type: ignore[arg-type]
    again = Dataset(tmp_path / "two", include_failed=True).all_episodes
    assert [e.index for e in again] == [0, 1, 2, 3, 4] and len({e.seed for e in again}) == 5  # appends, new starts


@pytest.mark.slow
def test_a_parallel_collection_whose_worker_dies_keeps_the_finished_episodes(tmp_path: Path) -> None:
    import multiprocessing
    import os
    import signal
    import threading
    import time

    from realissim.apps.collect import CollectError, collect

    out, outcome = tmp_path / "demos", {}

    def run() -> None:
        try:
            collect(CollectConfig(out=out, episodes=8, workers=2, max_seconds=60.0, seed=11, progress=False))
        except CollectError as err:
            outcome["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and thread.is_alive():
        if (out / "episodes" / "000000").exists():  # the first episode is in: kill a worker mid-collection
            os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert "exit code -9" in str(outcome.get("error"))
    kept = Dataset(out, include_failed=True).all_episodes
    assert 1 <= len(kept) < 8 and [e.index for e in kept] == list(range(len(kept)))
    assert not list(tmp_path.glob(".demos.part-*"))  # the workers' part datasets are gone


@pytest.mark.slow
def test_a_terminated_parallel_collection_keeps_its_finished_episodes_and_ends_its_workers(tmp_path: Path) -> None:
    """SIGTERM to `realissim collect --workers 2`: the process exits with 143, its workers end with it, and the
    episodes finished before are in the dataset, in order (before, the workers ran on and nothing was moved in)."""
    import subprocess
    import sys
    import time

    from helpers import cmdline, descendants, terminate_and_check

    out = tmp_path / "demos"
    command = [sys.executable, "-m", "realissim.cli", "collect", "--out", str(out), "--episodes", "8", "--workers", "2",
               "--max-seconds", "4", "--seed", "11", "--no-progress"]  # fmt: skip
    child = subprocess.Popen(command, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not (out / "episodes" / "000000").exists() and time.monotonic() < deadline:
            assert child.poll() is None, "the collection ended before its first episode was in"
            time.sleep(0.2)
        below = descendants(child.pid)
        workers = [p for p in below if b"spawn_main" in cmdline(p)]
        assert len(workers) == 2, below  # both workers up (beside the spawn's resource tracker)
        terminate_and_check(child, below)
    finally:
        if child.poll() is None:
            child.kill()
    kept = Dataset(out, include_failed=True).all_episodes
    assert 1 <= len(kept) < 8 and [e.index for e in kept] == list(range(len(kept)))
    assert not list(tmp_path.glob(".demos.part-*"))  # the workers' part datasets are gone


@pytest.mark.wall_clock
def test_an_online_collection_runs_on_the_wall_clock(tmp_path: Path, capsys) -> None:
    out = tmp_path / "rt"
    args = ["collect", "--episodes", "1", "--online", "--realtime", "--max-seconds", "2", "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(args) == 0
    assert "online, real time" in capsys.readouterr().out
    (episode,) = Dataset(out, include_failed=True).all_episodes
    assert 2.0 - 1e-9 <= episode.duration <= 2.0 + 1.0 / 60 + 1e-9  # every frame stepped, none skipped


@pytest.mark.slow
def test_collect_from_a_start_set_file_records_where_each_episode_started(tmp_path: Path, capsys) -> None:
    """`collect --starts FILE` (targeted collection): one episode per start of the file, in order, each starting
    there and naming the file and its place in it; in two workers alike; asking for more episodes than it holds,
    or a file of another task, is refused with the reason."""
    from realissim.apps.collect import collect
    from realissim.data.schema import START_SET_KEY
    from realissim.tasks import make, write_start_file

    task = make("pusht")
    chosen = task.start_set("select-v1")[5:8]
    starts = write_start_file(tmp_path / "mined.json", task, "mine-7", chosen)
    out = tmp_path / "targeted"
    args = ["collect", "--starts", str(starts), "--out", str(out), "--max-seconds", "0.5", "--no-progress"]
    assert main(args) == 0
    every = Dataset(out, include_failed=True).all_episodes
    assert [e.start for e in every] == list(chosen)
    assert [e.extra[START_SET_KEY] for e in every] == [
        {"file": str(starts), "version": "mine-7", "seed": 0, "index": i} for i in range(3)
    ]
    two = collect(CollectConfig(starts=starts, out=tmp_path / "two", workers=2, max_seconds=0.5, progress=False))
    assert two.added == 3
    stored = Dataset(tmp_path / "two", include_failed=True).all_episodes
    assert [e.start for e in stored] == list(chosen) and [e.extra[START_SET_KEY]["index"] for e in stored] == [0, 1, 2]
    capsys.readouterr()
    assert main([*args, "--episodes", "4"]) != 0
    assert "4 asked, but the start set" in capsys.readouterr().err
    assert len(Dataset(out, include_failed=True).all_episodes) == 3  # nothing recorded by the refused run
