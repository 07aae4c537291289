"""Flow-policy speed: training steps per second (batch 64) and the time to sample one chunk (K = 10 Euler
steps) for one environment and for a batch of 20, per observation representation; and how sampling time
grows with K.

Training runs `train` on a small dataset (one expert demonstration from a start near the goal, recorded
here, or `--data`); steps/s is taken between two run lengths, so data loading, checkpoints and the loss
plot do not count. Inference runs `FlowPolicy.act` on real observations of offline twins.

The wrist representation renders its images once into the dataset's render cache (not timed: it is paid
once per dataset) and observes through a `BatchEnv` with the wrist camera, whose rendering is the
environment's cost, not the policy's (reported apart as `render_ms_wrist_b1`).

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
from realissim.envs import BatchEnv, Env, EnvConfig
from realissim.eval.episode import run_episode
from realissim.expert.pusht import PushTExpert
from realissim.geometry import quat_yaw, yaw_quat
from realissim.learn.config import ModelConfig, TrainConfig
from realissim.learn.flow_policy import FlowPolicy
from realissim.learn.train import train
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
    config = policy.env_config()
    observation = Env(task, config).reset(seed=0) if batch is None else BatchEnv(task, batch, config).reset(seed=0)
    for _ in range(3):
        policy.act(observation)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        policy.act(observation)
        times.append(1e3 * (time.perf_counter() - t0))
    return float(np.median(times))


MODELS: dict[str, ModelConfig] = {
    "state": ModelConfig(obs="state"),
    "wrist": ModelConfig(obs="wrist"),
    "wrist_pose": ModelConfig(obs="wrist", wrist_lift=True, image_hidden=(256, 256), aux_object=1.0, via_pose=True),
}
"""The measured models: the two representations' defaults, and the wrist policy that acts through the pose it
reads (the 69 % recipe's model, docs/results.md; its adopted-state-policy training is the state row plus the
pose loss alone, which costs less than its full step timed here)."""


def measure(obs: str, task: Task, data: Path, tmp: Path, args: Args) -> dict[str, object]:
    """Training steps/s (batch 64) and chunk times for the model `MODELS[obs]`."""
    config = TrainConfig(
        model=MODELS[obs],
        batch_size=64,
        threads=args.threads,
        val_fraction=0.0,
        checkpoint_every=10_000,
        progress=False,
    )
    steps = args.steps if obs == "state" else max(10, args.steps // 10)
    train(replace(config, steps=1), data, tmp / f"{obs}-cache")  # builds the render cache (untimed)
    steps_per_s, checkpoint = train_steps_per_s(replace(config, steps=steps), data, tmp / obs, steps)
    by_k = {
        k: infer_ms(FlowPolicy.load(checkpoint, steps=k, threads=args.threads), task, None, args.calls)
        for k in (1, 5, 10, 20)
    }
    policy = FlowPolicy.load(checkpoint, threads=args.threads)
    return {"train": steps_per_s, "b1": by_k[10], "b20": infer_ms(policy, task, 20, args.calls), "by_k": by_k}


def render_ms(task: Task, calls: int) -> float:
    """Median wall time of one observation of a single env with the 96×96 wrist camera, minus without it, ms."""
    times = {}
    for cams in ((), ("wrist",)):
        env = Env(task, EnvConfig(cameras=cams))
        env.reset(seed=0)
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            env.observe()
            samples.append(1e3 * (time.perf_counter() - t0))
        times[cams] = float(np.median(samples))
    return times[("wrist",)] - times[()]


def main(args: Args) -> dict:
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    task = make("pusht")
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data if args.data is not None else record_demo(task, Path(tmp) / "demo")
        results = {obs: measure(obs, task, data, Path(tmp), args) for obs in MODELS}
    out: dict[str, object] = {}
    for obs, r in results.items():
        out |= {
            f"train_steps_per_s_{obs}": r["train"],
            f"infer_ms_{obs}_b1": r["b1"],
            f"infer_ms_{obs}_b20": r["b20"],
            f"infer_ms_{obs}_b1_by_k": r["by_k"],
        }
    out |= {
        "render_ms_wrist_b1": render_ms(task, args.calls),
        "threads": args.threads,
        "load_average_1min": os.getloadavg()[0],
    }
    rows = []
    for obs, limit in (("state", "≤ 20"), ("wrist", "≤ 60"), ("wrist_pose", "≤ 60")):
        r = results[obs]
        rows += [
            (f"{obs}: training steps/s (batch 64)", f"{r['train']:.2f}", ""),
            (f"{obs}: one chunk, batch 1, K = 10 (ms)", f"{r['b1']:.1f}", limit),
            (f"{obs}: one chunk each, batch 20, K = 10 (ms)", f"{r['b20']:.1f}", ""),
            *((f"{obs}: one chunk, batch 1, K = {k} (ms)", f"{ms:.1f}", "") for k, ms in r["by_k"].items() if k != 10),
        ]
    rows.append(
        ("wrist camera: rendering one 96×96 observation (ms, the env's cost)", f"{out['render_ms_wrist_b1']:.1f}", "")
    )
    print(f"flow policy, {args.threads} torch thread(s), load average {out['load_average_1min']:.1f}")
    print("| measure | value | required |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
