"""The stages every policy experiment shares, each resumable (an interrupted experiment is run again with the
same command and continues where it stopped):

1. `ensure_demos`: a dataset with at least N successful expert demonstrations (`realissim collect`, appending;
   online with the real cameras' frames recorded for the `real` representation).
2. `train_arm`: a flow policy trained on the first N of them (continues from its last checkpoint).
3. `choose_checkpoint`: every checkpoint evaluated offline on `pusht/select-v1` (`realissim eval sweep`), the
   most successful chosen — so the test set is not used for the choice.
4. `test_offline` / `test_online`: the chosen checkpoint on `pusht/eval-v1` (BatchEnv, ground truth) and on
   `pusht/online-v1` against the surrogate (oracle); each writes a report folder and is read back if present.
5. `table` and `figure`: success with Wilson 95 % intervals beside the paper's figures.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from realissim.apps.collect import CollectConfig, collect
from realissim.data.reader import Dataset
from realissim.envs import EnvConfig
from realissim.eval.offline import evaluate_offline, write_report
from realissim.eval.online import evaluate_online, write_online_report
from realissim.eval.report import paired_outcomes
from realissim.eval.stats import rate_text
from realissim.eval.sweep import SweepSettings, sweep_offline
from realissim.learn.checkpoint import load_checkpoint
from realissim.learn.config import TrainConfig
from realissim.learn.flow_policy import FlowPolicy
from realissim.learn.train import train
from realissim.policy.factory import CheckpointPolicy
from realissim.real.surrogate import SurrogateConfig
from realissim.tasks import make, start_set

log = logging.getLogger("experiments")


def ensure_demos(
    path: Path,
    wanted: int,
    online: bool = False,
    seed: int = 0,
    disturb_every: float = 3.0,
    randomize: bool = False,
    workers: int = 1,
) -> Dataset:
    """The dataset at `path` with at least `wanted` successful expert episodes, collecting (appending) as
    needed; `online` collects through the surrogate with its cameras' frames recorded. Offline, the T is moved
    every `disturb_every` s on average while the expert works (the README's recipe, `collect --disturb-every 3`:
    55 → 66–68 % on eval-v1, docs/results.md); 0: undisturbed. `randomize`: offline, each episode's object
    dynamics drawn (`collect --randomize`). `workers`: episodes collected at once (`collect --workers`)."""
    for _ in range(10):
        have = len(Dataset(path).episodes) if (path / "zarr.json").exists() else 0
        if have >= wanted:
            return Dataset(path)
        log.info("collecting %d more demonstrations into %s", wanted - have, path)
        collect(CollectConfig(episodes=wanted - have, out=path, seed=seed, online=online, record_images=online,
                              disturb_every=0.0 if online else disturb_every, randomize=randomize,
                              workers=workers))  # fmt: skip
    raise RuntimeError(f"{path}: could not collect {wanted} successful demonstrations")


def train_arm(data: Path, run: Path, config: TrainConfig) -> Path:
    """The run's last checkpoint after `config.steps` steps on `data`, training or resuming as needed."""
    last = run / "last.pt"
    if last.exists():
        if load_checkpoint(last)[0]["step"] >= config.steps:
            return last
        return train(config, data, run, resume=True).checkpoint
    return train(config, data, run).checkpoint


def choose_checkpoint(run: Path, starts: str = "pusht/select-v1", limit: int | None = None) -> tuple[Path, dict]:
    """(chosen checkpoint, its sweep row) of `run` by offline success on `starts` (`eval.sweep`, resumable)."""
    _, best, _ = sweep_offline(run, SweepSettings(starts=starts, limit=limit))
    return Path(best.checkpoint), {"step": best.step, "select_successes": best.successes,
                                   "select_episodes": best.episodes}  # fmt: skip


def test_offline(checkpoint: Path, out: Path, starts: str = "pusht/eval-v1", limit: int | None = None) -> dict:
    """The summary of `checkpoint` evaluated offline on `starts` (written to `out`, read back if there)."""
    done = out / "results.json"
    if not done.exists():
        task = make(starts.partition("/")[0])
        policy = FlowPolicy.load(checkpoint, scene=task.scene)
        report = evaluate_offline(task, policy, start_set(starts)[:limit], 20, 60.0, policy.env_config(EnvConfig()))
        write_report(report, out, {"checkpoint": str(checkpoint), "starts": starts})
    return json.loads(done.read_text())


def test_online(
    checkpoint: Path,
    out: Path,
    starts: str = "pusht/online-v1",
    limit: int | None = None,
    trials: int = 1,
    workers: int = 1,
    gap: Path | None = None,
) -> dict:
    """The summary of `checkpoint` evaluated online (surrogate, `gap`'s profile (None: the default), lock-step)
    on `starts` × `trials` (written to `out`, read back if there; episode by episode from its journal), in
    `workers` processes."""
    done = out / "results.json"
    if not done.exists():
        task = make(starts.partition("/")[0])
        policy = FlowPolicy.load(checkpoint, scene=task.scene)
        world = SurrogateConfig(camera_size=(160, 90), gap=gap)
        about = {"checkpoint": str(checkpoint), "starts": starts, "trials": trials}
        if gap is not None:
            about["gap"] = str(gap)
        acting = policy if workers == 1 else CheckpointPolicy(str(checkpoint))
        report = evaluate_online(task, acting, start_set(starts)[:limit], trials, 60.0,
                                 policy.env_config(EnvConfig()), world, journal=out / "episodes.jsonl",
                                 journal_key=about | {"limit": limit}, workers=workers)  # fmt: skip
        write_online_report(report, out, about)
    return json.loads(done.read_text())


def test_paired(checkpoint: Path, run: Path, online: dict | None, limit: int | None) -> tuple[dict | None, dict | None]:
    """(offline summary on the online starts, start-by-start pairing with the online episodes) of `checkpoint`,
    written to `run`/offline_online_v1; (None, None) when there was no online evaluation."""
    if online is None:
        return None, None
    same = test_offline(checkpoint, run / "offline_online_v1", starts="pusht/online-v1", limit=limit)
    return same, paired_outcomes(run / "offline_online_v1" / "episodes.csv", run / "online_v1" / "episodes.csv")


@dataclass(frozen=True)
class Row:
    """One arm of an experiment: its label, the paper's success (None: not reported) and our results."""

    label: str
    paper: float | None
    offline: dict | None
    online: dict | None
    train_minutes: float
    steps: int
    chosen_step: int
    offline_same: dict | None = None
    """Offline on the online starts (the same starts and policy seed as `online`): the fair comparison."""
    paired: dict | None = None
    """Start by start, offline (`offline_same`) against online: `paired_outcomes`."""


def _cell(summary: dict | None, key: str = "successes") -> str:
    if summary is None:
        return "–"
    n = int(summary.get("episodes", summary.get("finished", 0)))
    return rate_text(int(summary[key]), n)


def table(rows: list[Row]) -> list[str]:
    """Markdown lines: each arm's offline and online success (Wilson 95 %), the paper's figure, training."""
    lines = [
        "| arm | offline, eval-v1 | online, online-v1 | offline, the same online starts | start by start: "
        "both / offline only / online only / neither | paper | steps (chosen) | training |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        paper = f"{100 * r.paper:.1f} %" if r.paper is not None else "–"
        p = r.paired
        pairs = f"{p['both']} / {p['offline_only']} / {p['online_only']} / {p['neither']}" if p else "–"
        lines.append(f"| {r.label} | {_cell(r.offline)} | {_cell(r.online)} | {_cell(r.offline_same)} | {pairs} "
                     f"| {paper} | {r.steps} ({r.chosen_step}) | {r.train_minutes:.0f} min |")  # fmt: skip
    return lines


def figure(rows: list[Row], path: Path, title: str) -> None:
    """Bars of offline and online success with Wilson 95 % intervals per arm, the paper's figure as a marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from realissim.eval.stats import wilson

    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 2.5, 3.8), dpi=120)
    for offset, key, color in ((-0.18, "offline", "tab:blue"), (0.18, "online", "tab:orange")):
        for i, r in enumerate(rows):
            s = getattr(r, key)
            if s is None:
                continue
            n = int(s.get("episodes", s.get("finished", 0)))
            k = int(s["successes"])
            low, high = wilson(k, n)
            rate = 100 * k / n if n else 0.0
            ax.bar(x[i] + offset, rate, 0.34, color=color, label=key if i == 0 or key not in
                   ax.get_legend_handles_labels()[1] else None)  # fmt: skip
            ax.errorbar(x[i] + offset, rate, yerr=[[rate - 100 * low], [100 * high - rate]], color="k", capsize=3)
    for i, r in enumerate(rows):
        if r.paper is not None:
            ax.plot(x[i], 100 * r.paper, "r*", markersize=12, label="paper" if i == 0 else None)
    ax.set_xticks(x, [r.label for r in rows])
    ax.set_ylabel("success, % (Wilson 95 %)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def command_line(script: str, args: object) -> str:
    """`python experiments/<script> --option value ...` reproducing a dataclass of options `args` (None and empty
    tuples left out, booleans as --flag / --no-flag)."""
    import dataclasses

    parts = []
    for f in dataclasses.fields(args):  # type: ignore[arg-type]
        value = getattr(args, f.name)
        name = f.name.replace("_", "-")
        if isinstance(value, bool):
            parts.append(f"--{name}" if value else f"--no-{name}")
        elif isinstance(value, tuple) and value:
            parts.append(f"--{name} " + " ".join(map(str, value)))
        elif value is not None and not isinstance(value, tuple):
            parts.append(f"--{name} {value}")
    return f"python experiments/{script} " + " ".join(parts)


def train_minutes(run: Path) -> float:
    """Training wall minutes of `run` (the sum over its sessions, from the checkpoint's meta)."""
    meta = load_checkpoint(run / "last.pt")[0]
    return float(meta.get("train_wall_s", meta.get("wall_s", 0.0))) / 60.0
