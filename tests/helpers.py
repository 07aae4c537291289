"""Helpers shared by tests (imported as `helpers`: pytest puts this folder on the path)."""

from __future__ import annotations

import math

import numpy as np

from realissim.expert.scripted import ScriptedPush
from realissim.geometry import yaw_quat
from realissim.policy import ActionChunk, Observation
from realissim.spec.scene import Pose, SceneSpec
from realissim.spec.state import StartState


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
