"""How state-policy success grows with the number of expert demonstrations (issue 13).

1. Collect expert demonstrations offline into one dataset until it holds max(N) successful episodes
   (`realissim collect`, appending; starts drawn from the task's sampler, seed 0 — never `pusht/eval-v1`).
2. For each N, train a `state` flow policy on the first N successful episodes (`TrainConfig.max_episodes`).
3. Choose each run's checkpoint on `pusht/select-v1`, then evaluate it on `pusht/eval-v1` through `BatchEnv`
   (ground truth, Wilson 95 % intervals). The stages are `experiments/pipeline.py`'s.
4. Write OUT/scaling.md (the table, the commands, the date) and OUT/scaling.json.

Every stage resumes: the dataset is appended to, a training run continues from its last checkpoint, and an
evaluation whose results.json exists is read back. Cut off, run the same command again.

    python experiments/policy_scaling.py --out runs/scaling [--demos 30 60 120 240] [--steps 20000]

The defaults are the README's recipe: demonstrations with the T moved every ~3 s (`collect --disturb-every 3`)
and the default training (20k steps, 1 thread: ~29 min per policy alone).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import tyro
from pipeline import choose_checkpoint, command_line, ensure_demos, test_offline, train_arm

from realissim.eval.stats import rate_text
from realissim.learn.checkpoint import load_checkpoint
from realissim.learn.config import ModelConfig, TrainConfig

log = logging.getLogger("policy_scaling")


@dataclass
class Args:
    """Options."""

    out: Path = Path("runs/scaling")
    """Output folder (the dataset, one run per N, the table)."""
    demos: tuple[int, ...] = (30, 60, 120, 240)
    """Numbers of demonstrations to train on."""
    steps: int = 20_000
    """Training steps per policy."""
    disturb_every: float = 3.0
    """Mean time between moves of the T while the expert demonstrates, s (0: undisturbed demonstrations)."""
    starts: str = "pusht/eval-v1"
    """Evaluation start set."""
    limit: int | None = None
    """Evaluate on its first N starts only (None: all)."""
    state_hidden: tuple[int, ...] = (256, 256)
    """The state encoder's MLP widths (ModelConfig.state_hidden)."""
    select_limit: int | None = None
    """Choose each run's checkpoint on the first N starts of pusht/select-v1 (None: all 50)."""


def main(args: Args) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "demos"
    ensure_demos(data, max(args.demos), disturb_every=args.disturb_every)
    rows = []
    for n in sorted(args.demos):
        run = args.out / f"state_{n}"
        model = ModelConfig(obs="state", state_hidden=args.state_hidden)
        train_arm(data, run, TrainConfig(model=model, steps=args.steps, max_episodes=n, checkpoint_every=2000))
        checkpoint, about = choose_checkpoint(run, limit=args.select_limit)
        summary = test_offline(checkpoint, run / "eval", args.starts, args.limit)
        meta = load_checkpoint(checkpoint)[0]
        rows.append({"demos": n, "train_episodes": len(meta["dataset"]["train_episodes"]), **about, **summary})
    lines = [
        f"# State policy: success against the number of demonstrations ({datetime.now(UTC).date()})",
        "",
        f"{args.steps} training steps each, the checkpoint chosen on pusht/select-v1; offline on `{args.starts}` "
        "(BatchEnv, ground truth, whole chunks, 60 s per episode).",
        "",
        "| demonstrations | success (95 % Wilson) | self-reported (progress > 0.9) | median time to success |",
        "|---|---|---|---|",
    ]
    for r in rows:
        k, n = r["successes"], r["episodes"]
        lines.append(f"| {r['demos']} | {rate_text(k, n)} | {100 * r['progress_success']:.0f} % | "
                     f"{r['median_time_to_success_s']:.1f} s |")  # fmt: skip
    options = command_line("policy_scaling.py", args)
    lines += ["", f"Reproduce: `{options}`"]
    (args.out / "scaling.md").write_text("\n".join(lines) + "\n")
    (args.out / "scaling.json").write_text(json.dumps(rows, indent=2, default=float))
    print("\n".join(lines))


if __name__ == "__main__":
    main(tyro.cli(Args))
