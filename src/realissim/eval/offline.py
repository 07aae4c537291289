"""Offline evaluation of a policy: a start set run in parallel virtual twins (`BatchEnv`), success judged
on the task's ground truth (the twin is the world offline), with a Wilson 95 % interval.

The starts are run in batches of `envs` environments; every episode of a batch ends when all of the batch
have succeeded or at `max_seconds` (an early success keeps its time and is not undone by what follows).
The policy is reset once per batch, so a seeded policy gives the same results for the same batches.

With `workers` > 1, that many batches run at once, each in a thread with its own copy of the policy
(`copy.deepcopy`) and its own single-threaded `BatchEnv`: MuJoCo's step and torch's operators release the GIL,
so one batch's physics runs while another's policy samples — in one batch the two alternate and one core
waits while the policy thinks. The batches are cut as with one worker and each resets its policy copy, so
the results are the same, episode by episode, at any worker count (tested).
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from realissim.envs import BatchEnv, EnvConfig
from realissim.eval.episode import EpisodeResult, run_episodes
from realissim.eval.stats import agreement, wilson
from realissim.geometry import quat_yaw
from realissim.policy.base import Policy
from realissim.spec.state import StartState
from realissim.tasks import Task

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OfflineReport:
    """Per-episode results in start order, and the wall time of the whole evaluation."""

    results: list[EpisodeResult]
    wall_s: float
    envs: int
    progress_threshold: float = 0.9
    """Self-reported success: the policy's progress above this at some frame (the paper's criterion)."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def successes(self) -> int:
        """Episodes the task's ground truth judged successful."""
        return sum(r.success for r in self.results)

    def summary(self) -> dict[str, object]:
        """Rates with intervals, the policy's own success claims (progress > threshold) and their agreement with the
        ground truth (Cohen's κ; matrix[truth][claim], 0 failure, 1 success), median time to success, final
        coverage, throughput (× real time per env)."""
        n, k = len(self.results), self.successes
        low, high = wilson(k, n)
        times = [r.success_time for r in self.results if r.success]
        simulated = sum(r.duration for r in self.results)
        claimed = [bool(r.progress) and max(r.progress) > self.progress_threshold for r in self.results]
        self_k = sum(claimed)
        agree = agreement([r.success for r in self.results], claimed)
        return {
            "episodes": n,
            "success": k / n if n else float("nan"),
            "success_ci95": [low, high],
            "successes": k,
            "progress_success": self_k / n if n else float("nan"),
            "progress_agreement_kappa": agree.kappa,
            "progress_agreement_matrix": [list(row) for row in agree.matrix],
            "median_time_to_success_s": float(np.median(times)) if times else float("nan"),
            "mean_final_coverage": float(np.mean([r.final.get("coverage", np.nan) for r in self.results])),
            "x_realtime_per_env": simulated / self.wall_s / self.envs if self.wall_s > 0 else float("nan"),
            "wall_s": self.wall_s,
            **self.extra,
        }


def batches(starts: Sequence[StartState], envs: int) -> list[list[StartState]]:
    """The batches an evaluation runs: consecutive runs of `envs` starts (the last may be shorter). A batch shares
    the policy's noise stream, so local and distributed runs (`eval.distributed`) must cut the same way."""
    if envs < 1:
        raise ValueError(f"envs: must be ≥ 1, got {envs}")
    return [list(starts[i : i + envs]) for i in range(0, len(starts), envs)]


def evaluate_offline(
    task: Task,
    policy: Policy,
    starts: Sequence[StartState],
    envs: int = 20,
    max_seconds: float | None = None,
    config: EnvConfig = EnvConfig(),
    progress: bool = True,
    workers: int = 1,
) -> OfflineReport:
    """Run `policy` (a batched policy: it takes (B, ...) observations) from every start in batches of `envs`
    `BatchEnv`s with `config` (its cameras if the policy needs images); results in start order. `workers` > 1
    runs that many batches at once (see the module's docstring; the policy must survive `copy.deepcopy`, and
    torch runs one thread per worker); the report's `envs` is then the twins in flight, envs × workers."""
    if not starts:
        raise ValueError("starts: need at least one start")
    if workers < 1:
        raise ValueError(f"workers: must be ≥ 1, got {workers}")
    split = batches(starts, envs)
    wall0 = time.perf_counter()
    bar = tqdm(total=len(starts), desc="offline eval", unit="episode", disable=not progress)
    done: dict[int, list[EpisodeResult]] = {}
    with bar:
        if workers == 1:
            env: BatchEnv | None = None
            for i, batch in enumerate(split):
                if env is None or env.size != len(batch):
                    env = BatchEnv(task, len(batch), config)
                done[i] = run_episodes(env, policy, batch, max_seconds)
                _advance(bar, done)
        else:
            from realissim.util.torch_threads import torch_settings  # (torch only where a worker pool runs)

            local = threading.local()

            def run(batch: list[StartState]) -> list[EpisodeResult]:
                if getattr(local, "policy", None) is None:
                    local.policy = copy.deepcopy(policy)
                    if hasattr(local.policy, "threads"):
                        local.policy.threads = 1  # (torch's thread count is per process: one for all workers)
                if getattr(local, "env", None) is None or local.env.size != len(batch):
                    local.env = BatchEnv(task, len(batch), config, nthread=1)
                return run_episodes(local.env, local.policy, batch, max_seconds)

            with torch_settings(1), ThreadPoolExecutor(workers, thread_name_prefix="offline-eval") as pool:
                futures = {pool.submit(run, batch): i for i, batch in enumerate(split)}
                for future in as_completed(futures):
                    done[futures[future]] = future.result()
                    _advance(bar, done)
    results = [r for i in range(len(split)) for r in done[i]]
    in_flight = min(envs * workers, len(starts))
    report = OfflineReport(results, time.perf_counter() - wall0, in_flight)
    log.info("offline evaluation: %d/%d successes", report.successes, len(results))
    return report


def _advance(bar: tqdm, done: dict[int, list[EpisodeResult]]) -> None:
    """Move the progress bar to the finished episodes and show their running success count."""
    finished = [r for rs in done.values() for r in rs]
    bar.update(len(finished) - bar.n)
    bar.set_postfix(success=f"{sum(r.success for r in finished)}/{len(finished)}")


def write_report(report: OfflineReport, out: Path, about: dict[str, object]) -> None:
    """`out`/results.json (the summary and `about`), `out`/episodes.csv (one row per episode: start,
    success, time to success, final metrics, final progress, policy calls) and the figures of
    `eval.report.plot_episodes` (solved share and coverage over time, progress agreement)."""
    from realissim.eval.report import plot_episodes

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(about | report.summary(), indent=2, default=float))
    rows = []
    for i, r in enumerate(report.results):
        pos, yaw = r.start.object_pos[0], float(quat_yaw(r.start.object_quat[0]))
        rows.append({"episode": i, "start_x": pos[0], "start_y": pos[1], "start_yaw": yaw} | r.summary())
    with open(out / "episodes.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot_episodes(report.results, out, report.progress_threshold)
