"""The twin-only demo (`realissim push`): an offline `Env` of the PushT task, the scripted push of the T towards
its goal through `run_episode`, and a report."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from realissim.apps.outputs import RunOutputs
from realissim.assets.mjcf import scene_to_mjcf
from realissim.envs.env import Env, EnvConfig, FrameInfo
from realissim.eval.episode import EpisodeObserver, ProgressBar, run_episode
from realissim.expert.scripted import ScriptedPush, ScriptedPushConfig
from realissim.runtime.config import RuntimeConfig
from realissim.spec.state import StartState
from realissim.tasks import Task
from realissim.twin.physics import PhysicsConfig
from realissim.util.images import grid, to_uint8
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PushDemoConfig:
    """The twin-only push demo."""

    seconds: float = 8.0
    """Simulated duration, s (the push takes about 3 s; the rest holds still)."""
    push: ScriptedPushConfig = field(default_factory=ScriptedPushConfig)
    render_every: int = 4
    """Render the scene's cameras from the twin every this many frames (0: never); views.png shows the
    first and last rendered frames."""


class _PushRecorder(EpisodeObserver):
    """Per frame: the first object's pose and the arm's joints and targets; the physics time; some renders."""

    def __init__(self, views: TwinViews | None, render_every: int) -> None:
        self.views, self.render_every = views, render_every
        self.states: list[np.ndarray] = []
        self.physics_s: list[float] = []
        self.render_s: list[float] = []
        self.frames: list = []

    def on_frame(self, frame: FrameInfo) -> None:
        assert frame.report is not None and isinstance(frame.env, Env)
        s = frame.state
        self.states.append(np.concatenate([s.object_pos[0], s.object_quat[0], s.q, s.q_des]))
        self.physics_s.append(frame.report.timing["physics"])
        if self.views is not None and (frame.frame - 1) % self.render_every == 0:
            t0 = time.perf_counter()
            rgb, _, _ = self.views.render(frame.env.runtime.twin.data)
            self.render_s.append(time.perf_counter() - t0)
            self.frames = [self.frames[0] if self.frames else rgb, rgb]


def run_push_demo(
    task: Task, physics: PhysicsConfig, cfg: PushDemoConfig, out: Path | None, progress: bool = True
) -> dict[str, float | str]:
    """Simulate the scripted push offline; returns the report (and writes scene, model, states, report to `out`)."""
    scene = task.scene
    env = Env(task, EnvConfig(runtime=replace(RuntimeConfig(), physics=physics), sleep=physics.sleep))
    views = TwinViews(scene, env.runtime.twin.model) if cfg.render_every > 0 else None
    recorder = _PushRecorder(views, cfg.render_every)
    bar = ProgressBar(cfg.seconds, "simulating", progress)
    result = run_episode(env, ScriptedPush(scene, cfg.push), StartState.of_scene(scene), cfg.seconds,
                         [recorder, bar], stop_on_success=False)  # fmt: skip
    start, end = result.start, env.runtime.twin.state()
    goal = scene.goals[0].pose
    final = result.final
    report: dict[str, float | str] = {
        "frames": result.frames,
        "substeps": physics.substeps,
        "spheres": len(scene.objects[0].spheres.radii),
        "frame_ms_median": 1e3 * float(np.median(recorder.physics_s)),
        "realtime_factor": result.duration / float(np.sum(recorder.physics_s)),
        "t_moved_m": float(np.linalg.norm(end.object_pos[0, :2] - start.object_pos[0, :2])),
        "t_goal_dist_start_m": float(np.linalg.norm(start.object_pos[0, :2] - np.asarray(goal.pos[:2]))),
        "t_goal_dist_end_m": float(final["pos_err"]),
        "t_goal_yaw_err_deg": math.degrees(float(final["yaw_err"])),
        "t_goal_coverage": float(final["coverage"]),
        "t_height_end_m": float(end.object_pos[0, 2]),
    }
    if views is not None:
        report["render_backend"] = views.backend
        report["render_cameras"] = f"{len(views.cameras)}×{views.width}×{views.height}"
        render_s = recorder.render_s[1:] if len(recorder.render_s) > 1 else recorder.render_s
        report["render_ms_median"] = 1e3 * float(np.median(render_s))
    outputs = RunOutputs(out)
    if outputs.enabled:
        outputs.scene(scene)
        outputs.text("model.xml", scene_to_mjcf(scene, physics.mjcf_options()))
        outputs.npz("states.npz", states=np.asarray(recorder.states), columns="pos3 quat4 q7 q_des7")
        outputs.json("config.json", {"physics": physics, "task": task.name, "demo": cfg})
        outputs.json("report.json", report)
        if recorder.frames:
            outputs.png("views.png", grid([[to_uint8(img) for img in rgb.numpy()] for rgb in recorder.frames]))
        outputs.summary()
    return report
