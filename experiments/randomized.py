"""Demonstrations under randomised dynamics against nominal ones (issue 14's mission target: online success within
5 points of offline).

Online, the policy meets the real T's dynamics (the gap profile's friction, mass, centre of mass and exact shape),
while a policy cloned from nominal demonstrations has seen one T only. This experiment trains the same state
policy on 60 demonstrations collected in the nominal twin and on 60 collected with each episode's friction, mass
and centre of mass drawn (`realissim collect --randomize`; same starts and disturbances, seed 0), and evaluates
each offline (eval-v1, and the online starts) and online (online-v1 under the default gap, and under any further
`--gaps`). Stages resume (`experiments/pipeline.py`); writes OUT/randomized.md, .json and .png.

    python experiments/randomized.py --out runs/randomized [--arms nominal randomized] \\
        [--nominal-data data/pusht60dfar] [--randomized-data data/pusht60dr] [--gaps PATH ...]
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import tyro
from pipeline import (
    Row,
    choose_checkpoint,
    command_line,
    ensure_demos,
    figure,
    table,
    test_offline,
    test_online,
    test_paired,
    train_arm,
    train_minutes,
)

from realissim.eval.stats import rate_text
from realissim.learn.config import ModelConfig, TrainConfig

Arm = Literal["nominal", "randomized"]


@dataclass
class Args:
    """Options."""

    out: Path = Path("runs/randomized")
    """Output folder (one run per arm, the table)."""
    arms: tuple[Arm, ...] = ("nominal", "randomized")
    """Which arms to run (each needs its dataset; collected into OUT/<arm>_demos unless given)."""
    nominal_data: Path | None = None
    """Nominal demonstrations (`collect --disturb-every 3`; None: collect OUT/nominal_demos)."""
    randomized_data: Path | None = None
    """Randomised demonstrations (`collect --disturb-every 3 --randomize`; None: collect OUT/randomized_demos)."""
    demos: int = 60
    """Demonstrations per arm (the first N successful episodes)."""
    steps: int = 12_000
    """Training steps per policy."""
    online_limit: int | None = 20
    """Online evaluation on the first N starts of pusht/online-v1 (None: all 20)."""
    gaps: tuple[Path, ...] = ()
    """Further reality-gap profiles to evaluate each arm online under (the default gap always)."""
    threads: int = 2
    """Torch threads for training."""
    online_workers: int = 2
    """Online episodes at once, each with its own surrogate."""


def main(args: Args) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    rows, extra_cells = [], []
    for arm in args.arms:
        randomize = arm == "randomized"
        data = (args.randomized_data if randomize else args.nominal_data) or args.out / f"{arm}_demos"
        ensure_demos(data, args.demos, randomize=randomize)
        run = args.out / arm
        model = ModelConfig(obs="state")
        train_arm(data, run, TrainConfig(model=model, steps=args.steps, max_episodes=args.demos,
                                         checkpoint_every=max(args.steps // 5, 1), threads=args.threads))  # fmt: skip
        chosen, about = choose_checkpoint(run)
        offline = test_offline(chosen, run / "eval_v1")
        online = test_online(chosen, run / "online_v1", limit=args.online_limit, workers=args.online_workers)
        same, paired = test_paired(chosen, run, online, args.online_limit)
        rows.append(Row(arm, None, offline, online, train_minutes(run), args.steps, about["step"], same, paired))
        cells = []
        for gap in args.gaps:
            s = test_online(chosen, run / f"online_v1_{gap.stem}", limit=args.online_limit,
                            workers=args.online_workers, gap=gap)  # fmt: skip
            cells.append(rate_text(int(s["successes"]), int(s.get("episodes", s.get("finished", 0)))))
        extra_cells.append(cells)
    lines = [
        f"# Nominal against randomised demonstrations ({datetime.now(UTC).date()})",
        "",
        f"State policies, {args.steps} steps on {args.demos} demonstrations each, checkpoint chosen on "
        f"pusht/select-v1; offline on pusht/eval-v1 (ground truth); online on the first {args.online_limit or 20} "
        "starts of pusht/online-v1 (surrogate, default gap, lock-step, oracle).",
        "",
        *table(rows),
    ]
    if args.gaps:
        lines += ["", "Online under further gap profiles (same starts):", "",
                  "| arm | " + " | ".join(g.stem for g in args.gaps) + " |",
                  "|---|" + "---|" * len(args.gaps)]  # fmt: skip
        lines += [f"| {r.label} | " + " | ".join(c) + " |" for r, c in zip(rows, extra_cells)]
    lines += ["", f"Reproduce: `{command_line('randomized.py', args)}`"]
    (args.out / "randomized.md").write_text("\n".join(lines) + "\n")
    (args.out / "randomized.json").write_text(
        json.dumps([dataclasses.asdict(r) for r in rows], indent=2, default=float)
    )
    figure(rows, args.out / "randomized.png", "nominal vs randomised dynamics")
    print("\n".join(lines))


if __name__ == "__main__":
    main(tyro.cli(Args))
