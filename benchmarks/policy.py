"""Flow-policy speed: training steps per second (batch 64) and the time to sample one chunk (K = 10 Euler
steps) for one environment and for a batch of 20, per observation representation; and how sampling time
grows with K.

Training runs `train` on a small dataset (one expert demonstration from a start near the goal, recorded
here, or `--data`); steps/s is taken between two run lengths, so data loading, checkpoints and the loss
plot do not count. Inference runs `FlowPolicy.act` on real observations of offline twins.

Representations not built yet (`wrist`: virtual wrist-camera images) are reported as null with a note.

    python benchmarks/policy.py [--json policy.json] [--data DATASET] [--threads 1]
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import tyro

from realissim.data.recorder import EpisodeRecorder, meta_for_env
from realissim.data.store import DatasetWriter
from realissim.envs import BatchEnv, Env
from realissim.eval.episode import run_episode
from realissim.expert.pusht import PushTExpert
from realissim.geometry import quat_yaw, yaw_quat
from realissim.policy.flow_policy import FlowPolicy
from realissim.policy.model import ModelConfig
from realissim.policy.train import TrainConfig, train
from realissim.spec.scene import Pose
from realissim.spec.state import StartState
from realissim.tasks import Task, make


@dataclass
class Args:
    """Benchmark options."""

    json: Path | None = None
    """Write the results here as JSON."""
    data: Path | None = None
    """Train on this dataset (None: record one expert demonstration into a temporary one)."""
    threads: int = 1
    """Torch threads for training and inference."""
    steps: int = 100
    """Training steps timed (beyond a warm-up run of 20)."""
    calls: int = 30
    """Chunks sampled per inference timing (after 3 warm-up calls)."""


def record_demo(task: Task, path: Path) -> Path:
    """One expert episode from the T 4 cm and 0.1 rad from its goal into a new dataset at `path`."""
    scene, goal = task.scene, task.scene.goals[0].pose
    yaw = float(quat_yaw(np.asarray(goal.quat))) + 0.1
    pose = Pose((goal.pos[0] - 0.04, goal.pos[1], scene.objects[0].pose.pos[2]), yaw_quat(yaw))
    env = Env(task)
    with DatasetWriter(path, meta_for_env(env, "expert")) as writer:
        run_episode(
            env, PushTExpert(scene), StartState((pose,), tuple(scene.robot.home)), 15.0, [EpisodeRecorder(writer)]
        )
    return path


def train_steps_per_s(config: TrainConfig, data: Path, out: Path, steps: int) -> tuple[float, Path]:
    """Steps/s of `config` on `data`: the difference of a 20-step and a (20 + steps)-step run; and the longer
    run's checkpoint."""
    short = train(replace(config, steps=20), data, out / "short")
    long = train(replace(config, steps=20 + steps), data, out / "long")
    return steps / (long.wall_s - short.wall_s), long.checkpoint


def infer_ms(policy: FlowPolicy, task: Task, batch: int | None, calls: int) -> float:
    """Median wall time of one `act` (one chunk) on an offline observation, single or batched, ms."""
    observation = Env(task).reset(seed=0) if batch is None else BatchEnv(task, batch).reset(seed=0)
    for _ in range(3):
        policy.act(observation)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        policy.act(observation)
        times.append(1e3 * (time.perf_counter() - t0))
    return float(np.median(times))


def main(args: Args) -> dict:
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    task = make("pusht")
    config = TrainConfig(
        model=ModelConfig(obs="state"),
        batch_size=64,
        threads=args.threads,
        val_fraction=0.0,
        checkpoint_every=10_000,
        progress=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data if args.data is not None else record_demo(task, Path(tmp) / "demo")
        steps_per_s, checkpoint = train_steps_per_s(config, data, Path(tmp), args.steps)
        by_k = {
            k: infer_ms(FlowPolicy.load(checkpoint, steps=k, threads=args.threads), task, None, args.calls)
            for k in (1, 5, 10, 20)
        }
        policy = FlowPolicy.load(checkpoint, threads=args.threads)
        b20 = infer_ms(policy, task, 20, args.calls)
    out = {
        "train_steps_per_s_state": steps_per_s,
        "infer_ms_state_b1": by_k[10],
        "infer_ms_state_b20": b20,
        "infer_ms_state_b1_by_k": by_k,
        "train_steps_per_s_wrist": None,
        "infer_ms_wrist_b1": None,
        "infer_ms_wrist_b20": None,
        "threads": args.threads,
        "load_average_1min": os.getloadavg()[0],
    }
    rows = [
        ("state: training steps/s (batch 64)", f"{steps_per_s:.1f}", ""),
        ("state: one chunk, batch 1, K = 10 (ms)", f"{by_k[10]:.1f}", "≤ 20"),
        ("state: one chunk each, batch 20, K = 10 (ms)", f"{b20:.1f}", ""),
        *((f"state: one chunk, batch 1, K = {k} (ms)", f"{ms:.1f}", "") for k, ms in by_k.items() if k != 10),
        ("wrist: all measures", "not built yet (null)", "≤ 60 ms at batch 1"),
    ]
    print(
        f"flow policy, U-Net {config.model.network.channels}, {args.threads} torch thread(s), "
        f"load average {out['load_average_1min']:.1f}"
    )
    print("| measure | value | required |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("note: the wrist keys are null until the image representations (static, wrist, real) are built")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
