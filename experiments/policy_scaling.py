"""How state-policy success grows with the number of expert demonstrations (issue 13).

1. Collect expert demonstrations offline into one dataset until it holds max(N) successful episodes
   (`realissim collect`, appending; starts drawn from the task's sampler, seed 0 — never `pusht/eval-v1`).
2. For each N, train a `state` flow policy on the first N successful episodes (`TrainConfig.max_episodes`).
3. Evaluate each on `pusht/eval-v1` through `BatchEnv` (ground truth, Wilson 95 % intervals).
4. Write OUT/scaling.md (the table, the commands, the date) and OUT/scaling.json.

Every stage resumes: the dataset is appended to, a training run continues from its last checkpoint, and an
evaluation whose results.json exists is read back. Cut off, run the same command again.

    python experiments/policy_scaling.py --out runs/scaling [--demos 30 60 120 240] [--steps 10000]
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import tyro

from realissim.collect import CollectConfig, collect
from realissim.data.reader import Dataset
from realissim.envs import EnvConfig
from realissim.eval.offline import evaluate_offline, write_report
from realissim.eval.stats import rate_text
from realissim.policy.checkpoint import load_checkpoint
from realissim.policy.flow_policy import FlowPolicy
from realissim.policy.model import ModelConfig
from realissim.policy.train import TrainConfig, train
from realissim.tasks import make, start_set

log = logging.getLogger("policy_scaling")


@dataclass
class Args:
    """Options."""

    out: Path = Path("runs/scaling")
    """Output folder (the dataset, one run per N, the table)."""
    demos: tuple[int, ...] = (30, 60, 120, 240)
    """Numbers of demonstrations to train on."""
    steps: int = 10_000
    """Training steps per policy."""
    starts: str = "pusht/eval-v1"
    """Evaluation start set."""
    limit: int | None = None
    """Evaluate on its first N starts only (None: all)."""
    replan_every: float | None = 0.5
    """Re-plan period of the evaluation, s (None: the whole 1 s chunk, as the paper)."""
    max_seconds: float = 60.0
    """Time limit per evaluation episode, s."""


def ensure_demos(path: Path, wanted: int) -> Dataset:
    """The dataset at `path` with at least `wanted` successful episodes, collecting (appending) as needed."""
    for _ in range(10):
        have = len(Dataset(path).episodes) if (path / "zarr.json").exists() else 0
        if have >= wanted:
            return Dataset(path)
        log.info("collecting %d more demonstrations into %s", wanted - have, path)
        collect(CollectConfig(episodes=wanted - have, out=path, seed=0))
    raise RuntimeError(f"{path}: could not collect {wanted} successful demonstrations")


def trained(data: Path, run: Path, n: int, steps: int) -> Path:
    """The last checkpoint of the state policy on the first `n` demonstrations, training or resuming it."""
    config = TrainConfig(model=ModelConfig(obs="state"), steps=steps, max_episodes=n, checkpoint_every=1000)
    last = run / "last.pt"
    if last.exists():
        if load_checkpoint(last)[0]["step"] >= steps:
            return last
        return train(config, data, run, resume=True).checkpoint
    return train(config, data, run).checkpoint


def main(args: Args) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "demos"
    ensure_demos(data, max(args.demos))
    task, starts = make("pusht"), start_set(args.starts)[: args.limit]
    rows = []
    for n in sorted(args.demos):
        run = args.out / f"state_{n}"
        checkpoint = trained(data, run, n, args.steps)
        results = run / "eval" / "results.json"
        if not results.exists():
            policy = FlowPolicy.load(checkpoint, obs="state", scene=task.scene)
            config = policy.env_config(EnvConfig(replan_every=args.replan_every))
            report = evaluate_offline(task, policy, starts, 20, args.max_seconds, config)
            write_report(report, run / "eval", {"checkpoint": str(checkpoint), "demos": n, "starts": args.starts})
        summary = json.loads(results.read_text())
        meta = load_checkpoint(checkpoint)[0]
        rows.append({"demos": n, "train_episodes": len(meta["dataset"]["train_episodes"]), **summary})
    lines = [
        f"# State policy: success against the number of demonstrations ({datetime.now(UTC).date()})",
        "",
        f"{args.steps} training steps each; offline on `{args.starts}` (BatchEnv, ground truth, "
        f"replan every {args.replan_every} s, {args.max_seconds:g} s per episode).",
        "",
        "| demonstrations | success (95 % Wilson) | self-reported (progress > 0.9) | median time to success |",
        "|---|---|---|---|",
    ]
    for r in rows:
        k, n = r["successes"], r["episodes"]
        lines.append(f"| {r['demos']} | {rate_text(k, n)} | {100 * r['progress_success']:.0f} % | "
                     f"{r['median_time_to_success_s']:.1f} s |")  # fmt: skip
    options = " ".join(
        f"--{f.name.replace('_', '-')} " + (" ".join(map(str, value)) if isinstance(value, tuple) else str(value))
        for f in dataclasses.fields(args)
        if (value := getattr(args, f.name)) is not None
    )
    lines += ["", f"Reproduce: `python experiments/policy_scaling.py {options}`"]
    (args.out / "scaling.md").write_text("\n".join(lines) + "\n")
    (args.out / "scaling.json").write_text(json.dumps(rows, indent=2, default=float))
    print("\n".join(lines))


if __name__ == "__main__":
    main(tyro.cli(Args))
