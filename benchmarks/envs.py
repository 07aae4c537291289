"""Environment speed: surrogate reset, and offline env-frames per second of a 20-twin BatchEnv running the
scripted push through `run_episodes` (chunks of 32 waypoints over 1 s, followed at the frame rate), with state
observations and with the 96 × 96 wrist camera rendered at every policy call; and each env's speed over real
time. The batch's wall time counts everything from the reset to the result: the policies (the scripted
push's IK plan included), the chunks, the physics, the rendering and the judging; the table also gives the
rate without the policy's own time (what another policy would see from the environments).

    python benchmarks/envs.py [--json envs.json] [--seconds 20] [--size 20]
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from realissim.envs import BatchEnv, Env, EnvConfig
from realissim.eval.episode import run_episode, run_episodes
from realissim.expert.scripted import ScriptedPush
from realissim.policy import PerEnvPolicies
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.tasks import make, start_set


@dataclass
class Args:
    """Benchmark options."""

    json: Path | None = None
    """Write the results here as JSON."""
    seconds: float = 20.0
    """Simulated length of each batched episode, s."""
    size: int = 20
    """Twins in the batch."""
    resets: int = 50
    """Surrogate resets to time."""
    camera_size: tuple[int, int] = (160, 90)
    """The surrogate's camera size for the reset timing, px."""


def reset_ms(n: int, camera_size: tuple[int, int]) -> list[float]:
    """Surrogate resets (lock-step, 3 cameras) to the online start set in turn: wall time of each, ms."""
    task = make("pusht")
    starts = start_set("pusht/online-v1")
    times = []
    with Surrogate(task.scene, SurrogateConfig(camera_size=camera_size)) as world:
        for k in range(n):
            world.step()
            t0 = time.perf_counter()
            world.reset(starts[k % len(starts)])
            times.append(1e3 * (time.perf_counter() - t0))
    return times


def batch_fps(size: int, seconds: float, cameras: tuple[str, ...]) -> dict[str, float]:
    """env-frames per second of `size` offline twins over `seconds`, scripted push, given virtual cameras."""
    task = make("pusht")
    starts = list(start_set("pusht/eval-v1")[:size])
    env = BatchEnv(task, size, EnvConfig(cameras=cameras))
    policy = PerEnvPolicies([ScriptedPush(task.scene) for _ in starts])
    results = run_episodes(env, policy, starts, seconds, stop_on_success=False)
    frames, wall, policy = results[0].frames, results[0].wall_s, results[0].policy_s
    return {
        "env_fps": size * frames / wall,
        "x_realtime_per_env": frames * env.dt / wall,
        "env_fps_without_policy": size * frames / (wall - policy),
        "policy_share": policy / wall,
    }


def single_fps(seconds: float) -> dict[str, float]:
    """The same for one offline `Env` (state observations), for comparison."""
    task = make("pusht")
    result = run_episode(Env(task), ScriptedPush(task.scene), start_set("pusht/eval-v1")[0], seconds,
                         stop_on_success=False)  # fmt: skip
    return {"env_fps": result.frames / result.wall_s, "x_realtime_per_env": result.duration / result.wall_s}


def main(args: Args) -> dict:
    logging.basicConfig(level=logging.WARNING)
    resets = reset_ms(args.resets, args.camera_size)
    state = batch_fps(args.size, args.seconds, ())
    wrist = batch_fps(args.size, args.seconds, ("wrist",))
    single = single_fps(args.seconds)
    out = {
        "reset_ms": float(np.median(resets)),
        "reset_ms_p95": float(np.percentile(resets, 95)),
        f"batch{args.size}_env_fps_state": state["env_fps"],
        f"batch{args.size}_env_fps_wrist": wrist["env_fps"],
        "x_realtime_per_env_state": state["x_realtime_per_env"],
        "x_realtime_per_env_wrist": wrist["x_realtime_per_env"],
        f"batch{args.size}_env_fps_state_without_policy": state["env_fps_without_policy"],
        f"batch{args.size}_env_fps_wrist_without_policy": wrist["env_fps_without_policy"],
        "policy_share_state": state["policy_share"],
        "single_env_fps_state": single["env_fps"],
        "x_realtime_single_env_state": single["x_realtime_per_env"],
    }
    rows = [
        ("surrogate reset, median / p95 (ms)", f"{out['reset_ms']:.1f} / {out['reset_ms_p95']:.1f}", "≤ 100"),
        (f"batch of {args.size}, state: env-frames/s", f"{state['env_fps']:.0f}", ""),
        (f"batch of {args.size}, wrist 96×96: env-frames/s", f"{wrist['env_fps']:.0f}", ""),
        ("... of which in the scripted policy (its IK plan)", f"{100 * state['policy_share']:.0f} %", ""),
        (f"batch of {args.size}, state, no policy: env-frames/s", f"{state['env_fps_without_policy']:.0f}", ""),
        (f"batch of {args.size}, wrist, no policy: env-frames/s", f"{wrist['env_fps_without_policy']:.0f}", ""),
        ("× real time per env, state", f"{state['x_realtime_per_env']:.1f}", "≥ 5 (target ≥ 10)"),
        ("× real time per env, wrist", f"{wrist['x_realtime_per_env']:.1f}", "target ≥ 5"),
        ("one Env, state: env-frames/s", f"{single['env_fps']:.0f}", ""),
        ("one Env, state: × real time", f"{single['x_realtime_per_env']:.1f}", ""),
    ]  # fmt: skip
    w, h = args.camera_size
    print(f"PushT, scripted push, {args.seconds:g} s episodes; surrogate reset at {w}×{h}, 3 cameras")
    print("| measure | value | required |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
