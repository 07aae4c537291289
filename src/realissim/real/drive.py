"""Drive the surrogate real world on its own: the follower moves its arm along the standard trajectory.

Used by `realissim surrogate`: it exercises the whole real side (process, shared memory, cameras,
reality gap, follower) without the twin, and reports what the real arm and cameras did.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from realissim.images import grid, write_png
from realissim.real.follower import Follower, standard_trajectory
from realissim.real.surrogate.process import Surrogate, SurrogateConfig
from realissim.spec.io import save_scene
from realissim.spec.scene import SceneSpec

log = logging.getLogger(__name__)


def drive_surrogate(
    scene: SceneSpec, config: SurrogateConfig, seconds: float, out: Path | None, progress: bool = True
) -> dict[str, float]:
    """Run the surrogate lock-step for `seconds`, the follower tracking `standard_trajectory` from the arm's
    start; returns a report and (if `out`) writes views.png (first and last frames of every camera),
    truth.npz (oracle time, object poses, joints per frame), scene.json, config.json and report.json."""
    if config.mode != "lockstep":
        raise ValueError("drive_surrogate runs lock-step; real-time mode has no frame-exact report")
    n_frames = max(1, round(seconds * 60))
    step_s: list[float] = []
    truth: list[np.ndarray] = []
    with Surrogate(scene, config) as world:
        follower = Follower(world.robot.description)
        start = world.robot.read().q
        follower.reset(start)
        first = [cam.read().image for cam in world.cameras]
        for k in tqdm(range(n_frames), desc="surrogate", unit="frame", disable=not progress):
            q_sim, qd_sim = standard_trajectory(k / 60, start)
            follower.follow(world.robot, q_sim, qd_sim)
            t0 = time.perf_counter()
            world.step()
            step_s.append(time.perf_counter() - t0)
            o = world.oracle.read()
            truth.append(np.concatenate([[o.time], o.object_pos.ravel(), o.object_quat.ravel(), o.q, o.qd]))
        last = [cam.read().image for cam in world.cameras]
        stats = follower.tracking.summary()
    truth_arr = np.asarray(truth)
    report = {
        "frames": n_frames,
        "cameras": len(first),
        "step_ms_median": 1e3 * float(np.median(step_s)),
        "realtime_factor": (n_frames / 60) / float(np.sum(step_s)),
        "follower_rms_rad": stats["rms_rad"],
        "follower_max_rad": stats["max_rad"],
        "object_moved_m": float(np.linalg.norm(truth_arr[-1, 1:3] - truth_arr[0, 1:3])) if scene.objects else 0.0,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        save_scene(scene, out / "scene.json")
        if first:
            write_png(out / "views.png", grid([first, last]))
        columns = "time, object pos (K×3), object quat (K×4), q (7), qd (7)"
        np.savez_compressed(out / "truth.npz", truth=truth_arr, columns=columns)
        cfg = asdict(config) | {"gap": str(config.gap) if config.gap else None, "seconds": seconds}
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
        (out / "report.json").write_text(json.dumps(report, indent=2))
        log.info("wrote scene.json, views.png, truth.npz, config.json and report.json to %s", out)
    return report
