"""Twin physics speed: one PushT twin's frame time and batched env-frames per second.

Measures the real path (`TwinPhysics.step`, `TwinBatch.step`) with the arm moving and the T being pushed,
so contacts are active. Prints a table; `--json FILE` also writes it.

    python benchmarks/physics.py [--json out.json] [--frames 600] [--substeps 4]
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from realissim.assets.pusht import PushTConfig, pusht_scene
from realissim.twin import PhysicsConfig, TwinBatch, TwinPhysics


@dataclass
class Args:
    """Benchmark options."""

    json: Path | None = None
    """Write the results here as JSON."""
    frames: int = 600
    """Frames timed per measurement."""
    substeps: int = 4
    """Physics steps per 60 Hz frame."""
    sphere_radius: float = 0.0175
    """T collision sphere radius, m."""
    threads: int = 0
    """Batch worker threads (0: one per CPU)."""


def _motion(scene, n_frames: int, batch: int) -> np.ndarray:
    """Joint targets (n_frames, batch, 7): a slow sinusoid about home, so the arm always moves."""
    t = np.arange(n_frames)[:, None, None] / 60.0
    phase = np.arange(batch)[None, :, None] * 0.3
    home = np.asarray(scene.robot.home)
    return home + 0.15 * np.sin(2 * np.pi * 0.5 * t + phase) * np.array([1, 0.3, 1, 0.5, 1, 0.5, 1])


def single_frame_ms(scene, cfg: PhysicsConfig, frames: int) -> float:
    twin = TwinPhysics(scene, cfg)
    targets = _motion(scene, frames, 1)[:, 0]
    times = []
    for q in targets:
        twin.set_joint_targets(q)
        twin.apply_wrench(0, [0.5, 0.2, 0.0], [0.0, 0.0, 0.001])
        t0 = time.perf_counter()
        twin.step()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def batch_env_fps(scene, cfg: PhysicsConfig, size: int, frames: int, threads: int) -> float:
    batch = TwinBatch(scene, size, cfg, nthread=threads)
    targets = _motion(scene, frames, size)
    wrench = np.zeros((size, 1, 6))
    wrench[:, 0, :2] = [0.5, 0.2]
    t0 = time.perf_counter()
    for q in targets:
        batch.set_joint_targets(q)
        batch.apply_wrenches(wrench)
        batch.step()
    return size * frames / (time.perf_counter() - t0)


def main(args: Args) -> dict[str, float]:
    scene = pusht_scene(PushTConfig(sphere_radius=args.sphere_radius))
    cfg = PhysicsConfig(substeps=args.substeps)
    results: dict[str, float] = {
        "sphere_radius_m": args.sphere_radius,
        "spheres": len(scene.objects[0].spheres.radii),
        "substeps": args.substeps,
        "timestep_ms": 1e3 * cfg.timestep,
        "cpus": os.cpu_count() or 1,
        "frame_ms": single_frame_ms(scene, cfg, args.frames),
    }
    for n in (1, 8, 20, 64):
        results[f"batch{n}_env_fps"] = batch_env_fps(scene, cfg, n, max(60, args.frames * 8 // n), args.threads)
    width = max(len(k) for k in results)
    print(f"{'metric':<{width}}  value")
    for key, value in results.items():
        print(f"{key:<{width}}  {value:,.4g}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(tyro.cli(Args))
