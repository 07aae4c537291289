"""Surrogate real world speed, frame transfer cost, and follower tracking on the surrogate arm.

* Frame time: one lock-step frame through the process boundary (command → step → read the robot and
  all 3 cameras), at 160×90 and 480×270, and the same in-process (`SurrogateWorld`) for comparison.
* Transfer: reading one camera frame out of shared memory, against pickling it through a pipe.
* Reset: `Surrogate.reset(to)` to a random start state (the T moved up to 5 cm and turned, the arm within
  0.2 rad of home) inside the running process, lock-step, 3 cameras at 160×90, one frame stepped between
  resets; the time until the new state and frames are published.
* Follower: the twin's joints follow `realissim.real.follower.standard_trajectory` from the scene's home
  pose (every joint 0.3(1 − cos πt) rad plus a 0.4 rad minimum-jerk step, 6 s, up to 0.94 rad/s); the
  follower streams it to the surrogate arm (default reality gap: 4 ms latency, finite gains, joint
  friction); tracking error |q_real − q_sim| per frame, the real arm read before each command.

Prints a table; `--json FILE` also writes it.

    python benchmarks/surrogate.py [--json out.json] [--frames 120]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from realissim.assets.pusht import pusht_scene
from realissim.geometry import yaw_quat
from realissim.real.follower import Follower, FollowerConfig, standard_trajectory
from realissim.real.surrogate.process import Surrogate, SurrogateConfig
from realissim.real.surrogate.world import SurrogateWorld
from realissim.spec.scene import Pose
from realissim.spec.state import StartState


@dataclass
class Args:
    """Benchmark options."""

    json: Path | None = None
    """Write the results here as JSON."""
    frames: int = 120
    """Frames (and resets) timed per measurement."""
    follow_seconds: float = 6.0
    """Length of the follower's standard trajectory, s."""


def _median_ms(samples: list[float]) -> float:
    return 1e3 * statistics.median(samples)


def process_frame_ms(scene, size: tuple[int, int], frames: int) -> float:
    """Median ms of command + one lock-step frame + reading the robot and every camera, across the boundary."""
    home = np.asarray(scene.robot.home)
    times = []
    with Surrogate(scene, SurrogateConfig(camera_size=size)) as world:
        for k in range(frames + 5):
            start = time.perf_counter()
            world.robot.command(home + 0.05 * np.sin(k / 20))
            world.step()
            world.robot.read()
            for cam in world.cameras:
                cam.read()
            times.append(time.perf_counter() - start)
    return _median_ms(times[5:])


def inprocess_frame_ms(scene, size: tuple[int, int], frames: int) -> float:
    """Median ms of one in-process frame: command, step, render the cameras."""
    home = np.asarray(scene.robot.home)
    times = []
    with SurrogateWorld(scene, camera_size=size) as world:
        for k in range(frames + 5):
            start = time.perf_counter()
            world.command(home + 0.05 * np.sin(k / 20))
            world.step_frame()
            world.render_cameras()
            times.append(time.perf_counter() - start)
    return _median_ms(times[5:])


def transfer_ms(scene, size: tuple[int, int], repeats: int = 200) -> tuple[float, float]:
    """(shared-memory read, pickled pipe round) ms for one camera frame of `size`."""
    with Surrogate(scene, SurrogateConfig(camera_size=size)) as world:
        cam = world.cameras[0]
        shm = []
        for _ in range(repeats):
            start = time.perf_counter()
            frame = cam.read()
            shm.append(time.perf_counter() - start)
    a, b = mp.Pipe()
    received: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [received.put(b.recv()) for _ in range(repeats)], daemon=True)
    reader.start()
    piped = []
    for _ in range(repeats):
        start = time.perf_counter()
        a.send(frame.image)
        received.get()
        piped.append(time.perf_counter() - start)
    reader.join()
    return _median_ms(shm), _median_ms(piped)


def reset_ms(scene, size: tuple[int, int], resets: int) -> float:
    """Median ms of `Surrogate.reset` to a random start state (lock-step, one frame stepped in between)."""
    rng = np.random.default_rng(0)
    home = np.asarray(scene.robot.home)
    times = []
    with Surrogate(scene, SurrogateConfig(camera_size=size)) as world:
        for _ in range(resets + 5):
            poses = tuple(
                Pose(
                    (o.pose.pos[0] + rng.uniform(-0.05, 0.05), o.pose.pos[1], o.pose.pos[2]),
                    yaw_quat(rng.uniform(-3, 3)),
                )
                for o in scene.objects
            )
            to = StartState(poses, tuple(float(v) for v in home + rng.uniform(-0.2, 0.2, home.shape)))
            world.step()
            start = time.perf_counter()
            world.reset(to)
            times.append(time.perf_counter() - start)
    return _median_ms(times[5:])


def follower_error(scene, seconds: float) -> dict[str, float]:
    """Tracking error |q_real − q_sim| of the follower on the surrogate arm (lock-step, cameras off): the twin
    runs `standard_trajectory` from the scene's home pose, one frame per step."""
    with Surrogate(scene, SurrogateConfig(render=False)) as world:
        config = FollowerConfig(dt=1.0 / world.config.fps)
        follower = Follower(world.robot.description, config)
        start = world.robot.read().q
        follower.reset(start)
        for k in range(round(seconds / config.dt) + 1):
            q_sim, qd_sim = standard_trajectory(k * config.dt, start)
            follower.follow(world.robot, q_sim, qd_sim)
            world.step()
    return follower.tracking.summary()


def main(args: Args) -> dict[str, float]:
    scene = pusht_scene()
    results: dict[str, float] = {}
    rows = []
    for w, h in ((160, 90), (480, 270)):
        key = f"{w}x{h}"
        results[f"frame_ms_{key}"] = process_frame_ms(scene, (w, h), args.frames)
        results[f"inprocess_frame_ms_{key}"] = inprocess_frame_ms(scene, (w, h), args.frames)
        shm, piped = transfer_ms(scene, (w, h))
        results[f"transfer_shm_ms_{key}"] = shm
        results[f"transfer_pipe_ms_{key}"] = piped
        rows += [
            (f"frame, 3 cameras {key}, through the process (ms)", results[f"frame_ms_{key}"]),
            (f"frame, 3 cameras {key}, in-process (ms)", results[f"inprocess_frame_ms_{key}"]),
            (f"read one {key} frame from shared memory (ms)", shm),
            (f"send one {key} frame through a pipe, pickled (ms)", piped),
        ]
    results["reset_ms_160x90"] = reset_ms(scene, (160, 90), args.frames)
    rows.append(("reset to a random start state, 3 cameras 160x90 (ms)", results["reset_ms_160x90"]))
    summary = follower_error(scene, args.follow_seconds)
    results["follower_rms_rad"] = summary["rms_rad"]
    results["follower_max_rad"] = summary["max_rad"]
    rows += [
        ("follower tracking RMS, worst joint (rad)", results["follower_rms_rad"]),
        ("follower tracking max, worst joint (rad)", results["follower_max_rad"]),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"| {'metric':<{width}} | {'value':>9} |")
    print(f"|{'-' * (width + 2)}|{'-' * 11}|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value:9.4f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(tyro.cli(Args))
