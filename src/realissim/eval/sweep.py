"""Checkpoint selection: evaluate every checkpoint of a training run offline and name the best.

`sweep_offline(run, ...)` evaluates each `run/checkpoints/step_*.pt` on a start set (default
`pusht/select-v1`, disjoint from the test set `pusht/eval-v1`, so the choice does not peek at the test) and writes,
under `out` (default `run/sweep/<start set>`), one `step_<N>/` report per checkpoint (results.json,
episodes.csv: `eval.offline.write_report`), `sweep.json` (a row per checkpoint and the choice) and
`success.png` (success against training step with Wilson intervals). A checkpoint already evaluated with the
same settings is read back, not run again, so an interrupted sweep resumes.

`sweep_online(run, ...)` does the same against the surrogate real world (default `pusht/online-v1`, success on
its oracle) into `run/sweep/online_<start set>`, and `compare_sweeps` puts the two side by side: Pearson and
Spearman correlation and MMRV of offline against online success over the checkpoints (bootstrap intervals),
the checkpoint offline evaluation chose and what it scores online (`sweep_both.json`, `success_both.png`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

from realissim.envs import EnvConfig
from realissim.eval.offline import OfflineReport, batches, evaluate_offline, write_report
from realissim.eval.stats import compare_rankings
from realissim.policy.factory import CheckpointPolicy, load_policy
from realissim.real.surrogate.process import CAMERA_SIZE

log = logging.getLogger(__name__)

_STEP = re.compile(r"step_(\d+)\.pt$")


def run_checkpoints(run: Path) -> list[tuple[int, Path]]:
    """(step, path) of every `run/checkpoints/step_*.pt`, by step; ValueError naming the run when there is none."""
    found = sorted(
        (int(m.group(1)), p) for p in (Path(run) / "checkpoints").glob("step_*.pt") if (m := _STEP.search(p.name))
    )
    if not found:
        raise ValueError(f"{run}: no checkpoints (expected {Path(run) / 'checkpoints' / 'step_*.pt'})")
    return found


@dataclass(frozen=True)
class SweepSettings:
    """How each checkpoint is evaluated (part of the resume key: a change re-evaluates). `starts`: a start set
    ("<task>/<version>"; the task's "select" role, `Task.start_set_name`, keeps its test set clean);
    `max_seconds` None: the task's time limit."""

    starts: str
    limit: int | None = None
    envs: int = 20
    max_seconds: float | None = None
    replan_every: float | None = None
    steps: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class SweepRow:
    """One checkpoint's offline result."""

    step: int
    checkpoint: str
    episodes: int
    successes: int
    success: float
    success_ci95: tuple[float, float]
    progress_success: float
    mean_final_coverage: float


def choose(rows: list[SweepRow]) -> SweepRow:
    """The checkpoint offline evaluation picks: the most successes; on a tie, the later step (more training,
    and the EMA weights have settled)."""
    if not rows:
        raise ValueError("choose: no checkpoints evaluated")
    return max(rows, key=lambda r: (r.successes, r.step))


def sweep_offline(
    run: Path,
    settings: SweepSettings,
    out: Path | None = None,
    threads: int = 1,
    ray_address: str | None = None,
    workers: int = 1,
    kind: str = "flow",
) -> tuple[list[SweepRow], SweepRow, Path]:
    """Evaluate every checkpoint of `run` offline (see the module docstring): rows by step, the chosen row, and
    the output folder; `workers` batches at once locally (`evaluate_offline`; the results do not depend on
    it). With `ray_address` ("local", "auto", "ray://host:port"), every (checkpoint, batch) pair not yet
    evaluated runs as one Ray task (`eval.distributed`), with the same per-episode results as locally. The
    checkpoints are read by the policy loader of `kind` (`policy.factory`)."""
    from realissim.tasks import make, start_set, start_set_label, start_set_task

    checkpoints = run_checkpoints(run)
    starts = start_set(settings.starts)[: settings.limit]
    task_name = start_set_task(settings.starts)
    task = make(task_name)
    if settings.max_seconds is None:  # (resolved before it keys the results: as written before it could be None)
        settings = replace(settings, max_seconds=task.max_seconds)
    out = Path(out) if out is not None else Path(run) / "sweep" / start_set_label(settings.starts)
    key = asdict(settings)

    def done(step: int) -> dict | None:
        path = out / f"step_{step:07d}" / "results.json"
        summary = json.loads(path.read_text()) if path.exists() else None
        return summary if summary is not None and summary.get("sweep") == key else None

    todo = [(step, path) for step, path in checkpoints if done(step) is None]
    if ray_address is not None and todo:
        _sweep_on_ray(todo, task_name, starts, settings, out, threads, ray_address, kind)
    for i, (step, path) in enumerate(todo if ray_address is None else []):
        log.info("checkpoint %d/%d: step %d", i + 1, len(todo), step)
        policy = load_policy(str(path), kind, steps=settings.steps, seed=settings.seed, threads=threads)
        policy.check_scene(task.scene)
        config = EnvConfig(replan_every=settings.replan_every).observing(policy.needs)
        report = evaluate_offline(task, policy, starts, settings.envs, settings.max_seconds, config, workers=workers)
        write_report(report, out / f"step_{step:07d}", {"checkpoint": str(path), "step": step, "sweep": key})
    rows = []
    for step, path in checkpoints:
        summary = done(step)
        if summary is None:
            raise RuntimeError(f"{out}: checkpoint step {step} was evaluated but its results.json is missing")
        rows.append(_row(step, path, summary))
    best = choose(rows)
    table = {"run": str(run), "settings": key, "rows": [asdict(r) for r in rows], "chosen": asdict(best)}
    (out / "sweep.json").write_text(json.dumps(table, indent=2))
    plot_sweep(rows, best, out / "success.png", settings.starts)
    return rows, best, out


def _sweep_on_ray(
    todo: list[tuple[int, Path]],
    task_name: str,
    starts: list,
    settings: SweepSettings,
    out: Path,
    threads: int,
    address: str,
    kind: str,
) -> None:
    """Evaluate the checkpoints `todo` with every (checkpoint, batch) pair a Ray task; each checkpoint's report
    is written as soon as all of its batches are in (so an interrupted sweep keeps them)."""
    import time

    from realissim.eval.distributed import connect, map_batches

    connect(address)
    split = batches(starts, settings.envs)
    jobs, owner = [], []
    for step, path in todo:
        factory = CheckpointPolicy(str(path), settings.steps, settings.seed, threads, kind)
        config = EnvConfig(replan_every=settings.replan_every).observing(factory.load().needs)
        for b in split:
            jobs.append((task_name, factory, b, settings.max_seconds, config))
            owner.append(step)
    parts: dict[int, dict[int, list]] = {step: {} for step, _ in todo}
    paths = dict(todo)
    wall0 = time.perf_counter()

    def on_done(i: int, results: list) -> None:
        step = owner[i]
        parts[step][i] = results
        if len(parts[step]) == len(split):
            ordered = [r for j in sorted(parts[step]) for r in parts[step][j]]
            report = OfflineReport(ordered, time.perf_counter() - wall0, min(settings.envs, len(starts)),
                                   extra={"ray": True})  # fmt: skip
            about = {"checkpoint": str(paths[step]), "step": step, "sweep": asdict(settings)}
            write_report(report, out / f"step_{step:07d}", about)

    map_batches(jobs, label="sweep (ray)", on_done=on_done)


def plot_sweep(
    rows: list[SweepRow], best: SweepRow, path: Path, label: str, online: tuple[list[SweepRow], str] | None = None
) -> None:
    """Success (with Wilson 95 % intervals) against training step, the chosen checkpoint marked, as a PNG; with
    `online` (rows, start-set label), the online success of the same checkpoints on the same axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=120)
    series = [(rows, f"offline, {label}", "o")] + ([(online[0], f"online, {online[1]}", "s")] if online else [])
    for part, name, marker in series:
        steps = [r.step for r in part]
        rate = [100 * r.success for r in part]
        err = [[100 * (r.success - r.success_ci95[0]) for r in part],
               [100 * (r.success_ci95[1] - r.success) for r in part]]  # fmt: skip
        ax.errorbar(steps, rate, yerr=err, marker=marker, capsize=3, label=name)
    ax.plot([best.step], [100 * best.success], "r*", markersize=14, label=f"chosen offline: step {best.step}")
    ax.set_xlabel("training step")
    ax.set_ylabel("success, % (Wilson 95 %)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@dataclass(frozen=True)
class OnlineSweepSettings:
    """How each checkpoint is evaluated online (part of the resume key); as `SweepSettings` (the task's "online"
    start set)."""

    starts: str
    limit: int | None = None
    trials: int = 1
    max_seconds: float | None = None
    gap: str | None = None
    realtime: bool = False
    steps: int | None = None
    seed: int = 0
    correct_every: int = 1
    calibrate_at: Literal["goal", "start"] = "goal"


def _row(step: int, path: Path, summary: dict) -> SweepRow:
    return SweepRow(
        step=step,
        checkpoint=str(path),
        episodes=int(summary["episodes"]),
        successes=int(summary["successes"]),
        success=float(summary["success"]),
        success_ci95=(float(summary["success_ci95"][0]), float(summary["success_ci95"][1])),
        progress_success=float(summary["progress_success"]),
        mean_final_coverage=float(summary["mean_final_coverage"]),
    )


def sweep_online(
    run: Path,
    settings: OnlineSweepSettings,
    out: Path | None = None,
    threads: int = 1,
    workers: int = 1,
    kind: str = "flow",
) -> tuple[list[SweepRow], Path]:
    """Evaluate every checkpoint of `run` online (`eval.online.evaluate_online`: the surrogate, correction and
    follower on, success on its oracle), one report folder per checkpoint under `out` (default
    `run/sweep/online_<start set>`), resumable like `sweep_offline` and, within a checkpoint, episode by
    episode (its journal); rows by step and the folder. `workers` > 1: that many processes per checkpoint,
    each with its own surrogate; checkpoints read by the loader of `kind`."""
    from realissim.eval.online import evaluate_online, online_env_config, write_online_report
    from realissim.real.surrogate import SurrogateConfig
    from realissim.tasks import make, start_set, start_set_label, start_set_task

    checkpoints = run_checkpoints(run)
    starts = start_set(settings.starts)[: settings.limit]
    task = make(start_set_task(settings.starts))
    if settings.max_seconds is None:  # (resolved before it keys the results)
        settings = replace(settings, max_seconds=task.max_seconds)
    out = Path(out) if out is not None else Path(run) / "sweep" / ("online_" + start_set_label(settings.starts))
    key = asdict(settings)
    world = SurrogateConfig(gap=Path(settings.gap) if settings.gap else None, seed=settings.seed,
                            camera_size=CAMERA_SIZE, mode="realtime" if settings.realtime else "lockstep")  # fmt: skip
    rows = []
    for i, (step, path) in enumerate(checkpoints):
        folder = out / f"step_{step:07d}"
        done = folder / "results.json"
        summary = json.loads(done.read_text()) if done.exists() else None
        if summary is None or summary.get("sweep") != key:
            log.info("online: checkpoint %d/%d: step %d", i + 1, len(checkpoints), step)
            policy = load_policy(str(path), kind, steps=settings.steps, seed=settings.seed, threads=threads)
            policy.check_scene(task.scene)
            about = {"checkpoint": str(path), "step": step, "sweep": key}
            acting = policy if workers == 1 else CheckpointPolicy(str(path), settings.steps, settings.seed, kind=kind)
            config = online_env_config(settings.correct_every, calibrate_at=settings.calibrate_at).observing(
                policy.needs
            )
            # The journal's key leaves the limit out: a larger one extends the episodes already run.
            journal_key = about | {"sweep": {k: v for k, v in key.items() if k != "limit"}}
            report = evaluate_online(task, acting, starts, settings.trials, settings.max_seconds, config, world,
                                     journal=folder / "episodes.jsonl", journal_key=journal_key,
                                     workers=workers)  # fmt: skip
            write_online_report(report, folder, about)
            summary = json.loads(done.read_text())
        rows.append(_row(step, path, summary))
    return rows, out


def compare_sweeps(
    offline: list[SweepRow], online: list[SweepRow], out: Path, labels: tuple[str, str]
) -> dict[str, object]:
    """Offline against online over the checkpoints both evaluated: Pearson, Spearman and MMRV (value and
    bootstrap 95 % interval) of the success rates (`pearson`, ...) and of the mean final coverages
    (`coverage_pearson`, ...), the checkpoint offline evaluation chose and its online result; written to
    `out`/sweep_both.json with the figure `out`/success_both.png."""
    by_step = {r.step: r for r in online}
    pairs = [(r, by_step[r.step]) for r in offline if r.step in by_step]
    if not pairs:
        raise ValueError("compare_sweeps: no checkpoint was evaluated both offline and online")
    best = choose([a for a, _ in pairs])
    result: dict[str, object] = {
        "checkpoints": len(pairs),
        "offline_starts": labels[0],
        "online_starts": labels[1],
        "chosen_step": best.step,
        "chosen_offline": asdict(best),
        "chosen_online": asdict(by_step[best.step]),
        "best_online_step": max(online, key=lambda r: (r.successes, r.step)).step,
    }
    if len(pairs) >= 2:
        stats = compare_rankings([a.success for a, _ in pairs], [b.success for _, b in pairs])
        result |= {name: est.as_list() for name, est in stats.items()}
        # The same on the mean final coverage: a continuous score, so checkpoints that all fail (or all succeed) on
        # a few online starts are still ranked by how far they got.
        stats = compare_rankings([a.mean_final_coverage for a, _ in pairs], [b.mean_final_coverage for _, b in pairs])
        result |= {f"coverage_{name}": est.as_list() for name, est in stats.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep_both.json").write_text(json.dumps(result, indent=2, default=float))
    plot_sweep([a for a, _ in pairs], best, out / "success_both.png", labels[0], ([b for _, b in pairs], labels[1]))
    return result
