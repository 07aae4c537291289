"""Experiment (c), the matched comparison of issue 62: does a demonstration aimed at where the policy fails teach more
than a random one, and does the expert relabelling the policy's own states (DAgger) teach more than either?

Arms (state policies, the same training budget — `steps` from scratch — and seed; the paper's arm was 30 + 30
targeted against 30, which confounds the targeting with the count):

- `30`: the first 30 random (disturbed) demonstrations;
- `60`: all 60 random demonstrations;
- `30+30t`: the 30, plus 30 demonstrations from the failure states of the `30` policy (`realissim mine` on
  `mine_count` fresh starts, never the test set; `realissim collect --starts`);
- `30+dagger`: the 30, plus `rounds` of expert relabelling of the `30` policy's rollouts (`realissim dagger`) with as
  many expert-labelled frames in all as the 30 targeted demonstrations hold (`label_budget`), then a policy trained
  from scratch on the aggregate for `steps` (the rounds' own fine-tuned policies drive the rollouts only).

Each arm's last checkpoint is tested offline on `pusht/eval-v1` (100 starts, ground truth) and online on its first
`online` starts (surrogate, default gap, lock-step, oracle), with Wilson 95 % intervals; the arms are compared start
by start offline with McNemar's exact test (the same 100 starts). Every stage resumes (`experiments/pipeline.py`,
the DAgger journal), so a run cut off by a session's end is started again with the same command. Writes
OUT/matched.md (table, command, date), OUT/matched.json and OUT/matched.png (success against expert-labelled frames
and against wall time).

    python experiments/matched.py [--out ~/.cache/realissim/matched] [--data DEMOS60] [--arms 30 60 30+30t 30+dagger]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tyro
from pipeline import command_line, ensure_demos, paired_outcomes, test_offline, test_online, train_arm, train_minutes

from realissim.data.reader import Dataset
from realissim.data.store import DatasetWriter
from realissim.eval.stats import rate_text, wilson
from realissim.learn.config import TrainConfig

log = logging.getLogger("matched")
ARMS = ("30", "60", "30+30t", "30+dagger")


@dataclass
class Args:
    """Options."""

    out: Path = Path.home() / ".cache" / "realissim" / "matched"
    """The experiment's folder (datasets, runs, evaluations, the table)."""
    data: Path | None = None
    """60 random demonstrations already collected (None: collect them into OUT/demos60, the README's recipe)."""
    arms: tuple[str, ...] = ARMS
    """Which arms to run (in this order; `30+30t` and `30+dagger` need `30`)."""
    steps: int = 20_000
    """Training steps of every arm's policy, from scratch."""
    threads: int = 2
    """Torch threads for training."""
    mine_count: int = 100
    """Fresh starts the `30` policy is mined on."""
    targeted: int = 30
    """Targeted demonstrations."""
    rounds: int = 2
    """DAgger rounds."""
    rollouts: int = 40
    """Rollouts per DAgger round at most (a round ends at its share of the label budget)."""
    label_budget: int | None = None
    """Expert-labelled frames of all DAgger rounds (None: the frames of the targeted demonstrations, or of the first
    30 random ones when `30+30t` is not run)."""
    online: int = 30
    """Online episodes per arm: the first N starts of pusht/eval-v1 (0: none)."""
    workers: int = 2
    """Processes for collection, relabelling and online evaluation."""
    seed: int = 0


def first_n(source: Path, dest: Path, n: int) -> Path:
    """A dataset at `dest` holding the first `n` successful episodes of `source` (written through the store's own
    writer, with their infos); kept if already there with `n` episodes."""
    if (dest / "zarr.json").exists() and len(Dataset(dest, include_failed=True).all_episodes) >= n:
        return dest
    src = Dataset(source)
    if len(src.episodes) < n:
        raise ValueError(f"{source}: {len(src.episodes)} successful episodes, {n} wanted")
    tmp = dest.with_name(dest.name + ".writing")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    with DatasetWriter(tmp, src.meta) as writer:
        for info in src.episodes[:n]:
            writer.append(src.episode(info.index), success=info.success, success_time=info.success_time,
                          final_coverage=info.final_coverage, seed=info.seed, start=info.start,
                          desynced_s=info.desynced_s, reacquisitions=info.reacquisitions, extra=info.extra)  # fmt: skip
    tmp.rename(dest)
    return dest


def frames_of(path: Path, first: int = 0) -> int:
    """Frames of the successful episodes of the dataset at `path`, after its first `first`."""
    return sum(e.length for e in Dataset(path).episodes[first:])


def mcnemar(a: list[bool], b: list[bool]) -> dict[str, Any]:
    """McNemar's exact test of two arms' successes on the same starts: discordant counts and the two-sided p."""
    from scipy.stats import binomtest

    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    return {"only_first": only_a, "only_second": only_b, "p": float(p)}


def successes(csv_path: Path) -> list[bool]:
    import csv

    with open(csv_path) as f:
        return [row["success"] == "True" for row in csv.DictReader(f)]


def main(args: Args) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("realissim.expert.pusht").setLevel(logging.WARNING)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    wall_path = out / "walls.json"
    walls: dict[str, float] = json.loads(wall_path.read_text()) if wall_path.exists() else {}

    def timed(name: str, body: Any) -> Any:
        t0 = time.perf_counter()
        value = body()
        if name not in walls:
            walls[name] = time.perf_counter() - t0
            wall_path.write_text(json.dumps(walls, indent=2))
        return value

    d60 = args.data or out / "demos60"
    if args.data is None:
        timed("collect_60", lambda: ensure_demos(d60, 60, seed=args.seed, workers=args.workers))
    d30 = first_n(d60, out / "demos30", 30)
    config = TrainConfig(steps=args.steps, threads=args.threads, seed=args.seed, progress=False)
    runs: dict[str, Path] = {}
    labelled: dict[str, int] = {"30": frames_of(d30), "60": frames_of(d60)}
    demos: dict[str, tuple[int, int]] = {"30": (30, 0), "60": (60, 0)}
    for arm in args.arms:
        if arm not in ARMS:
            raise ValueError(f"arms: unknown arm {arm!r} (one of {', '.join(ARMS)})")
        if arm in ("30", "60"):
            data = d30 if arm == "30" else d60
            runs[arm] = timed(f"train_{arm}", lambda data=data, arm=arm: train_arm(data, out / f"arm_{arm}", config))
        elif arm == "30+30t":
            runs[arm] = targeted_arm(args, out, d30, runs.get("30") or out / "arm_30" / "last.pt", config, timed)
            labelled[arm] = frames_of(out / "demos30t")
            demos[arm] = (30, len(Dataset(out / "demos30t").episodes) - 30)
        else:
            budget = args.label_budget or (frames_of(out / "demos30t", 30) if (out / "demos30t").exists()
                                           else frames_of(d30))  # fmt: skip
            runs[arm], extra = dagger_arm(args, out, d30, out / "arm_30" / "last.pt", config, budget, timed)
            labelled[arm] = frames_of(d30) + extra
            demos[arm] = (30, 0)
    rows, first_offline = [], None
    results: dict[str, Any] = {}
    for arm, last in runs.items():
        run = out / f"arm_{arm}"  # (train_arm returns the newest step's file; the run acts with its last.pt)
        checkpoint = run / "last.pt" if (run / "last.pt").exists() else last
        offline = timed(f"offline_{arm}", lambda c=checkpoint, r=run: test_offline(c, r / "eval_v1"))
        online = None
        if args.online > 0:
            online = timed(f"online_{arm}", lambda c=checkpoint, r=run: test_online(
                c, r / "online_eval_v1", starts="pusht/eval-v1", limit=args.online, workers=args.workers))  # fmt: skip
        paired = paired_outcomes(run / "eval_v1" / "episodes.csv", run / "online_eval_v1" / "episodes.csv") if online \
            else None  # fmt: skip
        offline_ok = successes(run / "eval_v1" / "episodes.csv")
        first_offline = first_offline or (arm, offline_ok)
        results[arm] = {
            "checkpoint": str(checkpoint),
            "demos_random": demos[arm][0],
            "demos_targeted": demos[arm][1],
            "expert_labelled_frames": labelled[arm],
            "train_minutes": train_minutes(run),
            "offline": {k: offline[k] for k in ("successes", "episodes", "success", "success_ci95")},
            "online": None
            if online is None
            else {k: online.get(k) for k in ("successes", "finished", "success", "success_ci95")},
            "paired": paired,
            "offline_successes": offline_ok,
        }
        rows.append(arm)
    comparisons = {}
    for a, b in (("30+30t", "60"), ("30+30t", "30"), ("30+dagger", "60"), ("30+dagger", "30+30t"), ("60", "30")):
        if a in results and b in results:
            comparisons[f"{a} vs {b}"] = mcnemar(results[a]["offline_successes"], results[b]["offline_successes"])
    date = datetime.now(UTC).isoformat(timespec="minutes")
    summary = {"arms": results, "offline_mcnemar": comparisons, "walls_s": walls,
               "command": command_line("matched.py", args), "date": date}  # fmt: skip
    (out / "matched.json").write_text(json.dumps(summary, indent=2, default=float))
    lines = _table(results, comparisons)
    (out / "matched.md").write_text("\n".join([*lines, "", f"`{summary['command']}` ({summary['date']})", ""]))
    print("\n".join(lines))
    _figure(results, walls, out / "matched.png")
    return summary


def targeted_arm(args: Args, out: Path, d30: Path, policy: Path, config: TrainConfig, timed: Any) -> Path:
    """Mine the `30` policy, collect the targeted demonstrations onto a copy of the 30, train."""
    from realissim.apps.collect import CollectConfig, collect
    from realissim.apps.mine import MineConfig, mine, write_mined
    from realissim.policy.factory import load_policy
    from realissim.tasks import make
    from realissim.tasks.base import generate_start_set

    mined = out / "mine_30" / "mined.json"
    if not mined.exists():
        task = make("pusht")

        def run_mine() -> None:
            starts = generate_start_set(task, args.mine_count, 7_000_000 + args.seed)
            report = mine(task, load_policy(str(policy), seed=args.seed), starts,
                          MineConfig(keep=args.targeted, seed=args.seed), data=d30)  # fmt: skip
            write_mined(report, task, mined.parent, {"checkpoint": str(policy), "label": "arm30"},
                        MineConfig(keep=args.targeted, seed=args.seed))  # fmt: skip

        timed("mine_30", run_mine)
    data = out / "demos30t"
    if not data.exists():
        first_n(d30, data, 30)
    have = len(Dataset(data, include_failed=True).all_episodes) - 30
    count = len(json.loads(mined.read_text())["starts"])
    if have < count:  # (resumed: the rest of the mined starts, in order)
        timed("collect_targeted", lambda: collect(CollectConfig(
            episodes=count - have, starts=_rest(mined, have, out), out=data, disturb_every=3.0, seed=args.seed + 1,
            workers=args.workers, progress=False)))  # fmt: skip
    return timed("train_30+30t", lambda: train_arm(data, out / "arm_30+30t", config))


def _rest(mined: Path, done: int, out: Path) -> Path:
    """The mined start set less its first `done` starts (a resumed collection), as a start-set file."""
    if done == 0:
        return mined
    from realissim.tasks import make, read_start_file, write_start_file

    task = make("pusht")
    header = read_start_file(mined, task)
    return write_start_file(out / "mine_30" / f"rest_{done}.json", task, header.version, header.starts[done:],
                            header.seed)  # fmt: skip


def dagger_arm(
    args: Args, out: Path, d30: Path, policy: Path, config: TrainConfig, budget: int, timed: Any
) -> tuple[Path, int]:
    """Relabel the `30` policy's rollouts for `budget` labelled frames over the rounds, then train from scratch on
    the aggregate; (its last checkpoint, the labelled frames)."""
    from realissim.learn.dagger import DaggerConfig, labelled_frames_of, run_dagger

    dagger = DaggerConfig(rounds=args.rounds, rollouts=args.rollouts, label_budget=max(1, budget // args.rounds),
                          train_steps=6000, lr=3e-4, seed=args.seed, threads=args.threads, workers=args.workers,
                          progress=False)  # fmt: skip
    report = timed("dagger_30", lambda: run_dagger(dagger, policy, d30, out / "dagger_30"))
    data = out / "dagger_30" / "data"
    scratch = dataclasses.replace(config)
    checkpoint = timed("train_30+dagger", lambda: train_arm(data, out / "arm_30+dagger", scratch))
    del report
    return checkpoint, labelled_frames_of(data)


def _table(results: dict[str, Any], comparisons: dict[str, Any]) -> list[str]:
    lines = ["| arm | demos (random + targeted) | expert-labelled frames | offline, eval-v1 | online | offline on the "
             "online starts | train min |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm, r in results.items():
        off, on = r["offline"], r["online"]
        online = "—" if on is None else rate_text(int(on["successes"]), int(on["finished"]))
        same = "—"
        if r["paired"]:
            p = r["paired"]
            same = rate_text(p["both"] + p["offline_only"], p["starts"])
        lines.append(f"| {arm} | {r['demos_random']} + {r['demos_targeted']} | {r['expert_labelled_frames']} | "
                     f"{rate_text(int(off['successes']), int(off['episodes']))} | {online} | {same} | "
                     f"{r['train_minutes']:.0f} |")  # fmt: skip
    lines += ["", "Offline, start by start (McNemar's exact test on the same 100 starts):", ""]
    for name, c in comparisons.items():
        lines.append(f"- {name}: solved by the first only {c['only_first']}, by the second only {c['only_second']}, "
                     f"p = {c['p']:.3f}")  # fmt: skip
    return lines


def _figure(results: dict[str, Any], walls: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for arm, r in results.items():
        k, n = int(r["offline"]["successes"]), int(r["offline"]["episodes"])
        low, high = wilson(k, n)
        rate = 100 * k / n
        cost = sum(v for name, v in walls.items() if name.endswith(arm) or (arm in ("30+30t", "30+dagger")
                                                                             and name.endswith("_30")))  # fmt: skip
        for ax, x in ((axes[0], r["expert_labelled_frames"] / 1000), (axes[1], cost / 60)):
            ax.errorbar([x], [rate], yerr=[[rate - 100 * low], [100 * high - rate]], fmt="o", capsize=3)
            ax.annotate(arm, (x, rate), textcoords="offset points", xytext=(5, 5), fontsize=8)
    axes[0].set(xlabel="expert-labelled frames (thousands)", ylabel="offline success on eval-v1, % (Wilson 95 %)")
    axes[1].set(xlabel="wall time of the arm's own stages, min (this machine)", ylabel="offline success, %")
    for ax in axes:
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main(tyro.cli(Args))
