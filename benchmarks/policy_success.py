"""A state policy's success from an empty data folder, end to end (issue 62's headline row): collect random
demonstrations, train, relabel with the expert through the twin (DAgger), choose the checkpoint on `pusht/select-v1`,
then test it offline on a start set (default `pusht/eval-v1`, 100 starts) and online on the first `--online` of the
same starts (surrogate real world, default gap unless `--gap`, lock-step; success on the oracle), with the same starts
run offline beside them (a paired 2 × 2 table).

Every stage runs the `realissim` command a user would (`collect`, `train`, `dagger`, `eval offline`, `eval online`)
in a work folder, and each stage resumes: a run cut off (a session's end) is started again with the same command and
goes on where it stopped. `stages.json` in the work folder keeps each stage's wall time; the pipeline's wall time is
collection + training + relabelling + choosing (the tests after it are not part of it).

    python benchmarks/policy_success.py --json policy_success.json [--work DIR] [--demos 60] [--rounds 2]
        [--starts FILE] [--gap FILE] [--online 30] [--data EXISTING_DEMOS]

With `--data` the demonstrations are not collected (their collection time is then unknown and reported as such).
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tyro

from realissim.eval.report import paired_outcomes
from realissim.eval.stats import wilson

log = logging.getLogger("policy_success")


@dataclass
class Args:
    """Benchmark options."""

    json: Path | None = None
    """Write the results here as JSON."""
    work: Path = Path.home() / ".cache" / "realissim" / "policy_success"
    """The work folder (datasets, runs, evaluations, stages.json); kept between runs so a cut-off run resumes."""
    data: Path | None = None
    """Demonstrations already collected (an episode store) instead of collecting `demos` of them."""
    demos: int = 60
    """Random demonstrations to collect (disturbed, the README's recipe: `--disturb-every 3`)."""
    train_steps: int = 20_000
    """Training steps of the first policy."""
    rounds: int = 2
    """DAgger rounds (0: none)."""
    rollouts: int = 20
    """Policy rollouts per DAgger round."""
    dagger_steps: int = 6000
    """Fine-tuning steps per DAgger round."""
    dagger_lr: float = 3e-4
    """Learning rate of the fine-tuning."""
    label_budget: int | None = None
    """Expert-labelled frames per round at most (None: all of the round's rollouts)."""
    starts: str = "pusht/eval-v1"
    """The test set (a shipped set or a start-set file in the shipped format)."""
    select: str = "pusht/select-v1"
    """The set the checkpoint is chosen on (never the test set)."""
    online: int = 30
    """Online episodes: the test set's first N starts (0: none)."""
    gap: Path | None = None
    """Reality-gap profile of the online world (None: the default)."""
    workers: int = 2
    """Processes for collection, relabelling and online evaluation."""
    threads: int = 2
    """Torch threads for training."""
    seed: int = 0


def _realissim(*args: str) -> None:
    """Run `realissim ARGS` (the installed command's module, this interpreter); RuntimeError naming it on failure."""
    command = [sys.executable, "-m", "realissim.cli", *args]
    log.info("$ realissim %s", " ".join(args))
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"realissim {' '.join(args)}: exit code {done.returncode}")


class Stages:
    """Each stage's wall time and whether it finished, kept in `work`/stages.json as they change."""

    def __init__(self, work: Path) -> None:
        self.path = work / "stages.json"
        self.data: dict[str, dict[str, Any]] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def done(self, name: str) -> bool:
        return bool(self.data.get(name, {}).get("done"))

    def run(self, name: str, body: Any) -> Any:
        """Run `body()` unless stage `name` finished; its wall time adds to the stage's (a resumed stage's parts)."""
        if self.done(name):
            return self.data[name].get("value")
        t0 = time.perf_counter()
        entry = self.data.setdefault(name, {"wall_s": 0.0, "done": False})
        try:
            value = body()
        finally:
            entry["wall_s"] += time.perf_counter() - t0
            self._save()
        entry["done"], entry["value"] = True, value
        self._save()
        return value

    def wall(self, name: str) -> float | None:
        entry = self.data.get(name)
        return None if entry is None else float(entry["wall_s"])

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        tmp.replace(self.path)


def _episodes(path: Path) -> int:
    from realissim.data.reader import Dataset, probe

    return len(Dataset(path, include_failed=True).all_episodes) if probe(path) else 0


def main(args: Args) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    stages = Stages(work)
    demos = args.data or work / "demos"

    def collect() -> int:
        have = _episodes(demos)
        if have < args.demos:
            _realissim("collect", "--episodes", str(args.demos - have), "--disturb-every", "3", "--out", str(demos),
                       "--workers", str(args.workers), "--seed", str(args.seed), "--no-progress")  # fmt: skip
        return _episodes(demos)

    collected = stages.run("collect", collect) if args.data is None else _episodes(demos)
    policy_dir = work / "policy"

    def train() -> str:
        resume = ["--resume"] if (policy_dir / "last.pt").exists() else []
        _realissim("train", "--data", str(demos), "--out", str(policy_dir), "--steps", str(args.train_steps),
                   "--threads", str(args.threads), "--seed", str(args.seed), "--no-progress", *resume)  # fmt: skip
        return str(policy_dir / "last.pt")

    first = stages.run("train", train)
    dagger_dir = work / "dagger"
    candidates = [first]
    labelled = 0
    if args.rounds > 0:

        def dagger() -> list[str]:
            budget = [] if args.label_budget is None else ["--label-budget", str(args.label_budget)]
            _realissim("dagger", first, "--data", str(demos), "--out", str(dagger_dir), "--rounds", str(args.rounds),
                       "--rollouts", str(args.rollouts), "--train-steps", str(args.dagger_steps), "--lr",
                       str(args.dagger_lr), "--workers", str(args.workers), "--threads", str(args.threads),
                       "--seed", str(args.seed), "--no-progress", *budget)  # fmt: skip
            journal = json.loads((dagger_dir / "dagger.json").read_text())
            return [r["checkpoint"] for r in journal["rounds"]]

        candidates += stages.run("dagger", dagger)
        labelled = json.loads((dagger_dir / "dagger.json").read_text())["labelled_frames"]

    def choose() -> dict[str, Any]:
        scores = []
        for i, checkpoint in enumerate(candidates):
            out = work / "choose" / f"candidate_{i}"
            if not (out / "results.json").exists():
                _realissim("eval", "offline", checkpoint, "--starts", args.select, "--out", str(out))
            scores.append(json.loads((out / "results.json").read_text())["successes"])
        best = max(range(len(candidates)), key=lambda i: (scores[i], i))  # (ties: the later, more trained one)
        return {"checkpoint": candidates[best], "select_successes": scores}

    chosen = stages.run("choose", choose)
    checkpoint = chosen["checkpoint"]
    offline_dir = work / "offline"
    if not (offline_dir / "results.json").exists():
        _realissim("eval", "offline", checkpoint, "--starts", args.starts, "--out", str(offline_dir))
    offline = json.loads((offline_dir / "results.json").read_text())
    result: dict[str, Any] = {
        "offline_success": offline["success"],
        "offline_success_ci95": offline["success_ci95"],
        "offline_episodes": offline["episodes"],
        "demos_random": collected,
        "demos_targeted": 0,
        "dagger_labelled_frames": labelled,
        "checkpoint": checkpoint,
        "select_successes": chosen["select_successes"],
        "test_starts": args.starts,
    }
    if args.online > 0:
        online_dir = work / "online"
        gap = ["--gap", str(args.gap)] if args.gap is not None else []
        _realissim("eval", "online", checkpoint, "--starts", args.starts, "--limit", str(args.online), "--workers",
                   str(args.workers), "--out", str(online_dir), *gap)  # fmt: skip
        online = json.loads((online_dir / "results.json").read_text())
        paired = paired_outcomes(offline_dir / "episodes.csv", online_dir / "episodes.csv")
        same = int(paired["both"] + paired["offline_only"])
        starts = int(paired["starts"])
        result |= {
            "online_success": online["success"],
            "online_success_ci95": online.get("success_ci95"),
            "online_episodes": starts,
            "offline_same_starts_success": same / starts if starts else math.nan,
            "offline_same_starts_ci95": list(wilson(same, starts)) if starts else None,
            "paired": paired,
            "gap": str(args.gap) if args.gap else "default",
        }
    else:
        result |= {"online_success": None, "online_episodes": 0, "offline_same_starts_success": None}
    split = {name: stages.wall(name) for name in ("collect", "train", "dagger", "choose")}
    known = [v for k, v in split.items() if v is not None and (k != "collect" or args.data is None)]
    result["pipeline_wall_min"] = sum(known) / 60.0
    result["pipeline_split_min"] = {k: None if v is None else v / 60.0 for k, v in split.items()}
    if args.data is not None:
        result["pipeline_note"] = f"demonstrations taken from {args.data}: their collection time is not included"
    _print(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, default=float))
    return result


def _print(result: dict[str, Any]) -> None:
    def pct(x: Any) -> str:
        return "—" if x is None else f"{100 * x:.1f} %"

    ci = result.get("offline_success_ci95")
    rows = [
        ("offline success (test set)", f"{pct(result['offline_success'])}  [{pct(ci[0])}, {pct(ci[1])}]"),
        ("online success", f"{pct(result['online_success'])}  ({result['online_episodes']} episodes)"),
        ("offline on the same starts", pct(result["offline_same_starts_success"])),
        ("pipeline wall", f"{result['pipeline_wall_min']:.1f} min  {result['pipeline_split_min']}"),
        ("demonstrations", f"{result['demos_random']} random, {result['demos_targeted']} targeted"),
        ("DAgger labelled frames", str(result["dagger_labelled_frames"])),
        ("chosen checkpoint", f"{result['checkpoint']} (select successes {result['select_successes']})"),
    ]
    if "paired" in result:
        rows.append(("paired offline × online", str(result["paired"])))
    width = max(len(k) for k, _ in rows)
    print("policy success (state policy, PushT)")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


if __name__ == "__main__":
    main(tyro.cli(Args))
