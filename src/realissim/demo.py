"""The physics demo: the PushT twin, a scripted push of the T towards its goal, and a report."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from realissim.assets import panda
from realissim.assets.mjcf import scene_to_mjcf
from realissim.assets.pusht import PushTConfig, pusht_scene
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.geometry import quat_to_mat, quat_yaw
from realissim.images import grid, to_uint8, write_png
from realissim.spec.io import save_scene
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK
from realissim.twin.physics import PhysicsConfig, TwinPhysics
from realissim.twin.views import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PushDemoConfig:
    """The scripted push."""

    seconds: float = 8.0
    """Simulated duration, s (the push takes about 3 s; the rest holds still)."""
    speed: float = 0.25
    """Pusher tip speed, m/s."""
    push_height: float = 0.015
    """Tip centre height above the table while pushing, m."""
    approach_gap: float = 0.05
    """Distance kept from the T's edge when the tip comes down behind it, m."""
    render_every: int = 4
    """Render the scene's cameras from the twin every this many frames (0: never); views.png shows the
    first and last rendered frames."""


def push_waypoints(scene: SceneSpec, tip_home: np.ndarray, cfg: PushDemoConfig) -> np.ndarray:
    """Tip waypoints (M, 3): above a point behind the T, down, along the line to the goal, up."""
    obj = scene.objects[0]
    start = np.asarray(obj.pose.pos[:2])
    goal = np.asarray(scene.goals[0].pose.pos[:2]) if scene.goals else start + np.array([0.1, 0.0])
    direction = (goal - start) / max(float(np.linalg.norm(goal - start)), 1e-9)
    # How far the T extends behind its centre, seen along the push direction, at its start yaw.
    centers_W = np.asarray(obj.spheres.centers)[:, :2] @ quat_to_mat(obj.pose.quat)[:2, :2].T
    rod = scene.robot.pusher.radius if scene.robot.pusher else 0.0
    back = float(np.max(centers_W @ -direction + np.asarray(obj.spheres.radii))) + rod
    behind = start - direction * (back + cfg.approach_gap)
    end = goal - direction * back
    hover = 0.08
    return np.array(
        [
            tip_home,
            [*behind, hover],
            [*behind, cfg.push_height],
            [*end, cfg.push_height],
            [*end, hover],
        ]
    )


def run_push_demo(
    physics: PhysicsConfig, pusht: PushTConfig, cfg: PushDemoConfig, out: Path | None, progress: bool = True
) -> dict[str, float | str]:
    """Simulate the scripted push; returns the report (and writes scene, model, states, report to `out`)."""
    scene = pusht_scene(pusht)
    twin = TwinPhysics(scene, physics)
    ik = PusherIK(scene)
    home = np.asarray(scene.robot.home)
    tip_home = ik.tip_position(home)
    tips = sample_path(push_waypoints(scene, tip_home, cfg), cfg.speed, twin.dt, accel=2.0)
    targets = joint_trajectory(ik, tips, home, panda.VELOCITY_LIMIT, twin.dt)
    n_frames = max(1, round(cfg.seconds * physics.fps))
    views = TwinViews(scene, twin.model) if cfg.render_every > 0 else None
    states, frame_s, render_s, frames = [], [], [], []
    start = twin.state()
    for i in tqdm(range(n_frames), desc="simulating", unit="frame", disable=not progress):
        twin.set_joint_targets(targets[min(i, len(targets) - 1)])
        t0 = time.perf_counter()
        twin.step()
        frame_s.append(time.perf_counter() - t0)
        s = twin.state()
        states.append(np.concatenate([s.object_pos[0], s.object_quat[0], s.q, s.q_des]))
        if views is not None and (i % cfg.render_every == 0 or i == n_frames - 1):
            t0 = time.perf_counter()
            rgb, _, _ = views.render(twin.data)
            render_s.append(time.perf_counter() - t0)
            frames = [frames[0] if frames else rgb, rgb]
    end = twin.state()
    goal = scene.goals[0].pose
    yaw_err = float(quat_yaw(end.object_quat[0]) - quat_yaw(np.asarray(goal.quat)))
    report = {
        "frames": n_frames,
        "substeps": physics.substeps,
        "spheres": len(scene.objects[0].spheres.radii),
        "sphere_radius_m": pusht.sphere_radius,
        "frame_ms_median": 1e3 * float(np.median(frame_s)),
        "realtime_factor": (n_frames / physics.fps) / float(np.sum(frame_s)),
        "t_moved_m": float(np.linalg.norm(end.object_pos[0, :2] - start.object_pos[0, :2])),
        "t_goal_dist_start_m": float(np.linalg.norm(start.object_pos[0, :2] - np.asarray(goal.pos[:2]))),
        "t_goal_dist_end_m": float(np.linalg.norm(end.object_pos[0, :2] - np.asarray(goal.pos[:2]))),
        "t_goal_yaw_err_deg": math.degrees(math.atan2(math.sin(yaw_err), math.cos(yaw_err))),
        "t_height_end_m": float(end.object_pos[0, 2]),
    }
    if views is not None:
        report["render_backend"] = views.backend
        report["render_cameras"] = f"{len(views.cameras)}×{views.width}×{views.height}"
        report["render_ms_median"] = 1e3 * float(np.median(render_s[1:] if len(render_s) > 1 else render_s))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        save_scene(scene, out / "scene.json")
        (out / "model.xml").write_text(scene_to_mjcf(scene, physics.mjcf_options()))
        np.savez_compressed(out / "states.npz", states=np.asarray(states), columns="pos3 quat4 q7 q_des7")
        config = {"physics": asdict(physics), "pusht": asdict(pusht), "demo": asdict(cfg)}
        (out / "config.json").write_text(json.dumps(config, indent=2))
        (out / "report.json").write_text(json.dumps(report, indent=2))
        if frames:
            write_png(out / "views.png", grid([[to_uint8(img) for img in rgb.numpy()] for rgb in frames]))
        log.info("wrote scene.json, model.xml, states.npz, config.json, report.json (and views.png) to %s", out)
    return report
