"""Helpers shared by tests (imported as `helpers`: pytest puts this folder on the path)."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from realissim.expert.scripted import ScriptedPush
from realissim.geometry import quat_yaw, yaw_quat
from realissim.policy import ActionChunk, Observation
from realissim.spec.scene import Pose, SceneSpec
from realissim.spec.state import StartState
from realissim.tasks import Task


def random_start(scene: SceneSpec, rng: np.random.Generator, spread: float | None = None) -> StartState:
    """Objects moved up to 5 cm on the table and turned to any yaw; joints uniform within their limits, or
    within `spread` rad of home (a pose the arm holds without touching the table)."""
    poses = tuple(
        Pose(
            (o.pose.pos[0] + rng.uniform(-0.05, 0.05), o.pose.pos[1] + rng.uniform(-0.05, 0.05), o.pose.pos[2]),
            yaw_quat(rng.uniform(-math.pi, math.pi)),
        )
        for o in scene.objects
    )
    lower, upper = (np.array([getattr(j, side) for j in scene.robot.joints]) for side in ("lower", "upper"))
    if spread is not None:
        home = np.asarray(scene.robot.home)
        lower, upper = np.maximum(lower, home - spread), np.minimum(upper, home + spread)
    return StartState(poses, tuple(float(v) for v in rng.uniform(lower, upper)))


BAD_STARTS = [
    ({"q": (0.0,) * 6}, "q"),
    ({"q": (0.0, 0.0, 0.0, 0.5, 0.0, 1.0, 0.0)}, "q[3]"),
    ({"objects": ()}, "objects"),
    ({"objects": (Pose((math.nan, 0.0, 0.02)),)}, "objects[0].pos"),
]
"""(changes to a scene's start state that make it unfit, the field the error must name)."""


def scripted_targets(scene: SceneSpec, dt: float, n: int) -> np.ndarray:
    """(n, J) per-frame joint targets of the scripted push from the scene's start (then holding)."""
    start = StartState.of_scene(scene)
    q = start.q_array
    observation = Observation(np.float64(0.0), q, np.zeros_like(q), q, start.object_pos, start.object_quat)
    policy = ScriptedPush(scene)
    plan = policy.plan(observation)
    step = policy.config.horizon / policy.config.waypoints
    chunk = ActionChunk(plan[1:], np.zeros(len(plan) - 1), horizon=step * (len(plan) - 1))
    return chunk.targets(plan[0], dt, n)[0]


class HoldStill:
    """Holds the arm where it is; reports `claim` as its progress (an honest 0, or a lie)."""

    def __init__(self, claim: float = 0.0) -> None:
        self.claim = claim

    def reset(self) -> None:
        pass

    def act(self, observation: Observation) -> ActionChunk:
        q = np.asarray(observation.q, dtype=np.float64)
        return ActionChunk(np.repeat(q[None], 32, axis=0), np.full(32, self.claim), 1.0)


def near_goal_starts(task: Task, offsets: list[tuple[float, float, float]]) -> list[StartState]:
    """The T at its goal moved by (dx, dy, dyaw) (m, m, rad): unsolved, but one or two pushes away."""
    goal = next(g.pose for g in task.scene.goals)
    out = []
    for dx, dy, dyaw in offsets:
        pos = np.asarray(goal.pos) + np.array([dx, dy, 0.0])
        quat = yaw_quat(float(quat_yaw(np.asarray(goal.quat))) + dyaw)
        start = StartState.from_arrays(pos[None], np.asarray(quat)[None], np.asarray(task.scene.robot.home))
        assert task.reject_reason(start) is None
        out.append(start)
    return out


class HoldStillFactory:
    """A picklable `PolicyFactory` of `HoldStill` (for evaluations that build their policy in worker processes)."""

    def __init__(self, claim: float = 0.0) -> None:
        self.claim = claim

    def __call__(self, task: Task, envs: int) -> HoldStill:
        return HoldStill(self.claim)


def proc_stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid (from /proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def cmdline(pid: int) -> bytes:
    """A process's command line (its arguments joined by NUL bytes), b"" if it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """Whether the process `pid` runs (exists and is not a zombie)."""
    return (stat := proc_stat(pid)) is not None and stat[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Live processes below `pid` (zombies left out), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        if (stat := proc_stat(int(entry))) is not None and stat[0] != "Z":
            parents.setdefault(stat[1], []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def terminate_and_check(child: Any, below: set[int]) -> None:
    """SIGTERM to the `subprocess.Popen` `child`; asserts that it exits with 143 and that the processes `below` it
    (pids) are gone within 30 s."""
    import signal
    import time

    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 143
    deadline = time.monotonic() + 30
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(alive(p) for p in below), "worker processes outlived their terminated parent"
