"""Checkpoint selection: evaluate every checkpoint of a training run offline and name the best.

`sweep_offline(run, ...)` evaluates each `run/checkpoints/step_*.pt` on a start set (default
`pusht/select-v1`, disjoint from the test set `pusht/eval-v1`, so the choice does not peek at the test) and writes,
under `out` (default `run/sweep/<start set>`), one `step_<N>/` report per checkpoint (results.json,
episodes.csv: `eval.offline.write_report`), `sweep.json` (a row per checkpoint and the choice) and
`success.png` (success against training step with Wilson intervals). A checkpoint already evaluated with the
same settings is read back, not run again, so an interrupted sweep resumes.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from realissim.envs import EnvConfig
from realissim.eval.offline import evaluate_offline, write_report

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
    """How each checkpoint is evaluated (part of the resume key: a change re-evaluates)."""

    starts: str = "pusht/select-v1"
    limit: int | None = None
    envs: int = 20
    max_seconds: float = 60.0
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
    run: Path, settings: SweepSettings = SweepSettings(), out: Path | None = None, threads: int = 1
) -> tuple[list[SweepRow], SweepRow, Path]:
    """Evaluate every checkpoint of `run` offline (see the module docstring): rows by step, the chosen row, and
    the output folder."""
    from realissim.policy.flow_policy import FlowPolicy
    from realissim.tasks import make, start_set

    checkpoints = run_checkpoints(run)
    starts = start_set(settings.starts)[: settings.limit]
    task = make(settings.starts.partition("/")[0])
    out = Path(out) if out is not None else Path(run) / "sweep" / settings.starts.replace("/", "_")
    key = asdict(settings)
    rows = []
    for i, (step, path) in enumerate(checkpoints):
        folder = out / f"step_{step:07d}"
        done = folder / "results.json"
        summary = json.loads(done.read_text()) if done.exists() else None
        if summary is None or summary.get("sweep") != key:
            log.info("checkpoint %d/%d: step %d", i + 1, len(checkpoints), step)
            policy = FlowPolicy.load(path, steps=settings.steps, seed=settings.seed, threads=threads)
            policy.check_scene(task.scene)
            config = policy.env_config(EnvConfig(replan_every=settings.replan_every))
            report = evaluate_offline(task, policy, starts, settings.envs, settings.max_seconds, config)
            write_report(report, folder, {"checkpoint": str(path), "step": step, "sweep": key})
            summary = json.loads(done.read_text())
        rows.append(
            SweepRow(
                step=step,
                checkpoint=str(path),
                episodes=int(summary["episodes"]),
                successes=int(summary["successes"]),
                success=float(summary["success"]),
                success_ci95=(float(summary["success_ci95"][0]), float(summary["success_ci95"][1])),
                progress_success=float(summary["progress_success"]),
                mean_final_coverage=float(summary["mean_final_coverage"]),
            )
        )
    best = choose(rows)
    table = {"run": str(run), "settings": key, "rows": [asdict(r) for r in rows], "chosen": asdict(best)}
    (out / "sweep.json").write_text(json.dumps(table, indent=2))
    plot_sweep(rows, best, out / "success.png", settings.starts)
    return rows, best, out


def plot_sweep(rows: list[SweepRow], best: SweepRow, path: Path, label: str) -> None:
    """Success (with Wilson 95 % intervals) against training step, the chosen checkpoint marked, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r.step for r in rows]
    rate = [100 * r.success for r in rows]
    err = [[100 * (r.success - r.success_ci95[0]) for r in rows], [100 * (r.success_ci95[1] - r.success) for r in rows]]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.errorbar(steps, rate, yerr=err, marker="o", capsize=3, label=f"offline, {label}")
    ax.plot([best.step], [100 * best.success], "r*", markersize=14, label=f"chosen: step {best.step}")
    ax.set_xlabel("training step")
    ax.set_ylabel("success, % (Wilson 95 %)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
