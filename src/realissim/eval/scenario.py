"""The standard sync scenario: a scripted push of the T, then an unseen hand moves it, online lock-step.

The twin's arm follows a scripted pushing motion (the demo's push, then it holds); at `push_time` an
unseen hand moves the real T by `hand_push` (a `move_object` disturbance the twin is not told about).
The sync recorder compares the twin's T with the oracle every frame.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from realissim.assets import panda
from realissim.demo import PushDemoConfig, push_waypoints
from realissim.eval.sync import SyncRecorder, detector_score, fault_outcome
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.real.interfaces import OracleState
from realissim.real.surrogate.gap import Disturbance
from realissim.real.surrogate.process import Surrogate, SurrogateConfig
from realissim.runtime.loop import FrameReport, Runtime, RuntimeConfig
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScenarioConfig:
    """The standard sync scenario."""

    seconds: float = 20.0
    """Episode length, s."""
    push_time: float = 10.0
    """When the unseen hand moves the T, s."""
    hand_push: tuple[float, float, float] = (0.0, 0.05, 0.0)
    """How far the hand moves the T, world frame, m."""
    camera_size: tuple[int, int] = (160, 90)
    """Real camera image size, px."""
    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    seed: int = 0
    faults: tuple[Disturbance, ...] = ()
    """Faults to inject (each at its own `at`, s): dropped or frozen frames, an occluding hand, lighting. The
    result says for each whether the twin kept tracking, or the detector fired and the follower held."""
    threads: int | None = None
    """Compute threads of the twin (PyTorch and the CPU rasteriser). None: torch's default in lock-step (the
    world and the twin take turns); in real time all cores but one, which the world's process needs (on 2
    cores, 2 threads under contention gave 26 Hz and 1 thread 41 Hz)."""
    realtime: bool = False
    """Run on the wall clock: the surrogate paces itself; the twin takes as many 1/60 s frames per loop
    as the wall clock demands (correcting on the first), so it stays aligned with reality in time."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)


@dataclass(frozen=True)
class ScenarioFrame:
    """What an observer of `run_scenario` sees after each loop iteration (evaluation only: it holds the
    oracle's truth). `frame` is the index of the last 1/60 s frame run; `pos_err` m and `yaw_err` rad are the
    twin-vs-truth errors of the first object."""

    frame: int
    time: float
    report: FrameReport
    truth: OracleState
    pos_err: float
    yaw_err: float
    runtime: Runtime
    world: Surrogate


Observer = Callable[[ScenarioFrame], None]


def scripted_targets(scene: SceneSpec, dt: float, n_frames: int) -> np.ndarray:
    """Joint targets (n_frames, 7): the demo's push of the T towards its goal, then holding still."""
    ik = PusherIK(scene)
    home = np.asarray(scene.robot.home)
    tips = sample_path(push_waypoints(scene, ik.tip_position(home), PushDemoConfig()), 0.25, dt, accel=2.0)
    targets = joint_trajectory(ik, tips, home, panda.VELOCITY_LIMIT, dt)
    idx = np.minimum(np.arange(n_frames), len(targets) - 1)
    return targets[idx]


def run_scenario(
    scene: SceneSpec,
    config: ScenarioConfig,
    progress: bool = True,
    observer: Observer | None = None,
    label: str = "scenario",
) -> dict:
    """Run the scenario online (lock-step, or real time); returns sync metrics, follower tracking, timing
    (median ms per stage) and the per-frame error series. `observer` is called after every loop iteration;
    `label` names the progress bar."""
    n = round(config.seconds * 60)
    targets = scripted_targets(scene, 1 / 60, n)
    recorder = SyncRecorder()
    mode = "realtime" if config.realtime else "lockstep"
    surrogate = SurrogateConfig(gap=config.gap, seed=config.seed, camera_size=config.camera_size, mode=mode)
    timings: dict[str, list[float]] = {}
    frame_s = []
    obj = scene.objects[0].name
    threads = config.threads or (max(1, (os.cpu_count() or 2) - 1) if config.realtime else None)
    with _torch_threads(threads), Surrogate(scene, surrogate) as world:
        runtime = Runtime(scene, config.runtime, world)
        for fault in config.faults:
            world.disturb(fault)
        desynced: list[bool] = []
        pushed = False
        wall0, k = time.monotonic(), 0
        bar = tqdm(total=n, desc=label, unit="frame", disable=not progress)
        while k < n:
            if not pushed and k / 60 >= config.push_time:
                world.disturb(Disturbance(kind="move_object", object=obj, displacement=config.hand_push))
                pushed = True
            start = time.perf_counter()
            if config.realtime:
                ahead = k / 60 - (time.monotonic() - wall0)
                if ahead > 0:  # faster than reality: wait for the frame's time (as a camera-paced loop would)
                    time.sleep(ahead)
                    start = time.perf_counter()
            due = max(1, min(n - k, int((time.monotonic() - wall0) * 60) + 1 - k)) if config.realtime else 1
            for j in range(due):
                report = runtime.frame(targets[k + j], correct=j == 0)
            k += due
            bar.update(due)
            frame_s.append(time.perf_counter() - start)
            for key, value in report.timing.items():
                timings.setdefault(key, []).append(value)
            truth = world.oracle.read()
            desynced.append(report.desynced)
            recorder.add(
                float(report.state.time),  # the twin's clock: in real time the world's started earlier
                report.state.object_pos[0],
                report.state.object_quat[0],
                truth.object_pos[0],
                truth.object_quat[0],
            )
            if observer is not None:
                observer(
                    ScenarioFrame(
                        k - 1,
                        recorder.times[-1],
                        report,
                        truth,
                        recorder.pos_err[-1],
                        recorder.yaw_err[-1],
                        runtime,
                        world,
                    )
                )
        wall = time.monotonic() - wall0
        bar.close()
        follower = runtime.follower.tracking.summary() if runtime.follower else {"rms_rad": float("nan")}
        events = list(runtime.detector.events) if runtime.detector else []
    out = recorder.summary(events=(config.push_time,))
    out["follower_rms_rad"] = follower["rms_rad"]
    # Lock-step: the rate the loop could run at (1 / median iteration time). Real time: the achieved rate of
    # loop iterations (each correcting once) over the wall clock.
    out["loop_hz"] = len(frame_s) / wall if config.realtime else 1.0 / float(np.median(frame_s))
    out["frames_per_iteration"] = n / len(frame_s)
    out["desync_events"] = [(frame / 60, kind) for frame, kind in events]
    out["timing_ms"] = {key: 1e3 * float(np.median(v)) for key, v in timings.items()}
    times, errors = np.asarray(recorder.times), np.asarray(recorder.pos_err)
    if runtime.detector is not None:
        out["detector"] = detector_score(times, errors, np.asarray(desynced))
    out["faults"] = [
        {"kind": f.kind, "camera": f.camera, "at": f.at, "duration": f.duration}
        | fault_outcome(times, errors, np.asarray(desynced), f.at, f.at + f.duration)
        for f in config.faults
    ]
    out["series"] = {
        "time": recorder.times,
        "pos_err": recorder.pos_err,
        "yaw_err": recorder.yaw_err,
        "desynced": desynced,
    }
    return out


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run with `n` torch intra-op threads (the CPU rasteriser follows them); None leaves them as they are."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
