"""`realissim surrogate`: the surrogate real world with the follower and no visual correction — the scripted
push runs on the twin through `run_episode`, the real arm follows it — to exercise the whole real side
(process, shared memory, cameras, reality gap, follower) and report what the real arm and cameras did."""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from realissim.apps.outputs import RunOutputs
from realissim.envs.env import Env, EnvConfig, FrameInfo
from realissim.eval.episode import EpisodeObserver, ProgressBar, run_episode
from realissim.expert.scripted import ScriptedPush
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.runtime.config import RuntimeConfig
from realissim.spec.state import StartState
from realissim.tasks import Task
from realissim.util.images import grid

log = logging.getLogger(__name__)


class _TruthRecorder(EpisodeObserver):
    """Per frame (evaluation only): the oracle's time, object poses and joints; the world's step time."""

    def __init__(self) -> None:
        self.truth: list[np.ndarray] = []
        self.step_s: list[float] = []

    def on_frame(self, frame: FrameInfo) -> None:
        assert isinstance(frame.env, Env) and frame.env.world is not None and frame.env.world.oracle is not None
        o = frame.env.world.oracle.read()
        self.truth.append(np.concatenate([[o.time], o.object_pos.ravel(), o.object_quat.ravel(), o.q, o.qd]))
        if frame.report is not None and "world" in frame.report.timing:
            self.step_s.append(frame.report.timing["world"])


def drive_surrogate(
    task: Task, config: SurrogateConfig, seconds: float, out: Path | None, progress: bool = True
) -> dict[str, float]:
    """Run the surrogate lock-step for `seconds` with the follower on and the correction off; returns a report
    and (if `out`) writes views.png (first and last frames of every camera), truth.npz (oracle time, object
    poses, joints per frame), scene.json, config.json and report.json."""
    if config.mode != "lockstep":
        raise ValueError("drive_surrogate runs lock-step; real-time mode has no frame-exact report")
    scene = task.scene
    runtime = RuntimeConfig(follow=True, correct=False)
    config = replace(config, fps=runtime.physics.fps)
    recorder = _TruthRecorder()
    with Surrogate(scene, config) as world:
        env = Env(task, EnvConfig(runtime=runtime), world)
        first = [cam.read().image for cam in world.cameras]
        observers = [recorder, ProgressBar(seconds, "surrogate", progress)]
        result = run_episode(env, ScriptedPush(scene), StartState.of_scene(scene), seconds, observers, False)
        last = [cam.read().image for cam in world.cameras]
        assert env.runtime.follower is not None
        stats = env.runtime.follower.tracking.summary()
    truth = np.asarray(recorder.truth)
    report = {
        "frames": result.frames,
        "cameras": len(first),
        "step_ms_median": 1e3 * float(np.median(recorder.step_s)),
        "realtime_factor": result.duration / float(np.sum(recorder.step_s)),
        "follower_rms_rad": stats["rms_rad"],
        "follower_max_rad": stats["max_rad"],
        "object_moved_m": float(np.linalg.norm(truth[-1, 1:3] - truth[0, 1:3])) if scene.objects else 0.0,
    }
    outputs = RunOutputs(out)
    if outputs.enabled:
        outputs.scene(scene)
        if first:
            outputs.png("views.png", grid([first, last]))
        columns = "time, object pos (K×3), object quat (K×4), q (7), qd (7)"
        outputs.npz("truth.npz", truth=truth, columns=columns)
        outputs.json("config.json", asdict(config) | {"seconds": seconds, "task": task.name})
        outputs.json("report.json", report)
        outputs.summary()
    return report
