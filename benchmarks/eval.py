"""Evaluation throughput and agreement for trained policies.

Offline: `evaluate_offline` with 20 `BatchEnv`s on `pusht/eval-v1` (its first `--offline` starts), reporting
× real time per environment (simulated seconds / wall seconds / envs) for a state and, if given, a wrist
policy. Online: `evaluate_online` against the surrogate (lock-step, default gap) on `pusht/online-v1` (its first
`--online` starts): the median wall time per episode, success on the oracle. For the state policy, the offline
and online success rates and the agreement (Cohen's κ) of its progress > 0.9 with the ground truth offline, and
the fair comparison for the mission target (online within 5 points of offline): offline on the same online
starts, pooled over `--same-seeds` draws of the policy's noise (an online episode is one draw of everything).

    python benchmarks/eval.py --state runs/state/last.pt [--wrist runs/wrist/last.pt] [--json eval.json]
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import tyro

from realissim.envs import EnvConfig
from realissim.eval.offline import evaluate_offline
from realissim.eval.online import evaluate_online, online_env_config
from realissim.eval.stats import wilson
from realissim.learn.flow_policy import FlowPolicy
from realissim.policy.factory import CheckpointPolicy
from realissim.real.surrogate import SurrogateConfig
from realissim.tasks import make, start_set


@dataclass
class Args:
    """Benchmark options."""

    state: Path
    """A trained state-policy checkpoint."""
    wrist: Path | None = None
    """A trained wrist-policy checkpoint (None: its keys are left out)."""
    offline: int = 100
    """Offline episodes (the first N starts of pusht/eval-v1)."""
    online: int = 5
    """Online episodes (the first N starts of pusht/online-v1); 0 skips the online part."""
    envs: int = 10
    """Offline environments per batch (with the default two `workers`: 20 in flight)."""
    max_seconds: float = 60.0
    correct_every: int = 1
    """Online: correct every n-th frame (`RuntimeConfig.correct_every`)."""
    online_workers: int = 1
    """Online: episodes at once, each in a process with its own surrogate (`online_episode_s` stays the median
    wall time of one episode, which is longer with 2 workers on 2 cores; the throughput is in
    `online_episodes_per_hour`)."""
    threads: int = 1
    """Torch threads of the offline policies (`realissim eval offline --threads`)."""
    steps: int | None = None
    """Euler steps K of the offline policies (None: the checkpoint's; `realissim eval offline --steps`)."""
    sleep: bool = True
    """Offline: resting objects sleep (`EnvConfig.sleep`); --no-sleep for the physics without it."""
    workers: int = 2
    """Offline batches at once (`realissim eval offline --workers`); the envs in flight are envs × workers. The
    default, two batches of 10, is the fastest way found to run 20 environments on 2 cores (one batch's physics
    runs while the other's policy samples): wrist 6.06× against 4.74× as one batch of 20 (stop 49)."""
    same_seeds: int = 3
    """With the online part: offline runs of the state policy on the same online starts, noise seeds 0..N−1
    (`offline_success_same_starts`, `online_minus_offline_points`); 0 skips them."""
    json: Path | None = None
    """Write the results here as JSON."""


def main() -> None:
    args = tyro.cli(Args)

    def save() -> None:  # after each part, so a long online part cut off keeps the offline keys
        if args.json is not None:
            args.json.write_text(json.dumps(out, indent=2, default=float))

    logging.basicConfig(level=logging.WARNING)
    task = make("pusht")
    out: dict[str, object] = {}
    for kind, path in (("state", args.state), ("wrist", args.wrist)):
        if path is None:
            continue
        policy = FlowPolicy.load(path, obs=kind, scene=task.scene, threads=args.threads, steps=args.steps)
        starts = start_set("pusht/eval-v1")[: args.offline]
        config = policy.env_config(EnvConfig(sleep=args.sleep))
        report = evaluate_offline(task, policy, starts, args.envs, args.max_seconds, config, workers=args.workers)
        s = report.summary()
        out[f"offline_x_realtime_per_env_{kind}"] = s["x_realtime_per_env"]
        out[f"offline_envs_in_flight_{kind}"] = report.envs
        out[f"offline_euler_steps_{kind}"] = policy.steps
        out["offline_sleep"] = args.sleep
        out[f"offline_success_{kind}"] = s["success"]
        out[f"offline_success_ci95_{kind}"] = s["success_ci95"]
        if kind == "state":
            out["offline_success"] = s["success"]
            out["progress_agreement_kappa"] = s["progress_agreement_kappa"]
            out["progress_agreement_matrix"] = s["progress_agreement_matrix"]
        save()
    if args.online:
        policy = FlowPolicy.load(args.state, obs="state", scene=task.scene)
        starts = start_set("pusht/online-v1")[: args.online]
        world = SurrogateConfig(camera_size=(160, 90))
        config = policy.env_config(online_env_config(args.correct_every))
        acting = policy if args.online_workers == 1 else CheckpointPolicy(str(args.state))
        report = evaluate_online(task, acting, starts, 1, args.max_seconds, config, world,
                                 workers=args.online_workers)  # fmt: skip
        s = report.summary()
        out["online_episode_s"] = s["median_episode_wall_s"]
        out["online_workers"] = args.online_workers
        out["online_episodes_per_hour"] = 3600.0 * len(report.finished) / report.wall_s
        out["online_correct_every"] = args.correct_every
        out["online_success"] = s["success"]
        out["online_success_ci95"] = s["success_ci95"]
        out["online_errors"] = s["errors"]
        out["online_sync_error_mean_mm"] = s["sync_error_mean_mm"]
        save()
        if args.same_seeds > 0:
            hits = episodes = 0
            for seed in range(args.same_seeds):
                same = FlowPolicy.load(args.state, obs="state", scene=task.scene, threads=args.threads, seed=seed)
                r = evaluate_offline(task, same, starts, args.envs, args.max_seconds,
                                     same.env_config(EnvConfig(sleep=args.sleep))).summary()  # fmt: skip
                hits, episodes = hits + int(r["successes"]), episodes + int(r["episodes"])
            out["offline_success_same_starts"] = hits / episodes
            out["offline_success_same_starts_ci95"] = list(wilson(hits, episodes))
            out["offline_same_starts_seeds"] = args.same_seeds
            out["online_minus_offline_points"] = 100.0 * (s["success"] - hits / episodes)  # errors left out online
    print(f"{'key':<36} value")
    for key, value in out.items():
        print(f"{key:<36} {value:.4g}" if isinstance(value, float) else f"{key:<36} {value}")
    save()


if __name__ == "__main__":
    main()
