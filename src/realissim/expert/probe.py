"""Probing pushes for system identification (`realissim collect --online --policy probe`): short, fast strokes that
end abruptly, so the object slides free afterwards.

An expert's pushes are slow and quasi-static: the pusher carries the object, which stops when the pusher stops, so
the object's motion barely depends on its friction with the table (a position-controlled pusher prescribes it).
A stroke at `speed` that stops at `accel` — harder than friction can brake the object (μ g ≈ 4 m/s² for the T) —
leaves the object sliding on by v²/2μg (3 cm at 0.5 m/s), which measures the friction; strokes off the object's
centre (`offsets`) turn it, which shows where its centre of mass is. Measured in a world whose only gap was the
T's dynamics (docs/decisions.md, "System identification"): friction 0.845 for a true 0.85 from three 10 s episodes
of these strokes, against 0.546 for a true 0.7 from five episodes of the slow scripted push.

Each stroke is planned from what the policy observes when the previous one has ended: lift, travel above the
object to a point behind it on the line towards the workspace centre (the goal; jittered by stroke so the
directions vary), descend, stroke through `stroke` m past first contact, stop, lift.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from realissim.assets import panda
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.geometry import quat_to_mat
from realissim.policy.base import ActionChunk, Observation
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK


@dataclass(frozen=True)
class ProbeConfig:
    """The probing strokes."""

    speed: float = 0.5
    """Tip speed of a stroke, m/s."""
    accel: float = 12.0
    """Tip acceleration at a stroke's start and end, m/s² (above μ g: the object slides on when the tip stops)."""
    stroke: float = 0.04
    """How far the tip travels past first contact, m."""
    offsets: tuple[float, ...] = (0.0, 0.025, -0.025)
    """Lateral offsets of the strokes' lines from the object's centre, m, used in turn (off-centre strokes turn it)."""
    jitter: float = 0.6
    """Largest deviation of a stroke's direction from the line to the workspace centre, rad (varied stroke by
    stroke, so the pushes come from several sides)."""
    travel_speed: float = 0.25
    """Tip speed between strokes, m/s."""
    travel_accel: float = 2.0
    push_height: float = 0.015
    """Tip centre height while stroking, m."""
    hover: float = 0.08
    """Tip height while travelling, m."""
    approach_gap: float = 0.03
    """Distance from the object's edge where the tip comes down, m."""
    waypoints: int = 32
    horizon: float = 1.0

    def __post_init__(self) -> None:
        if not (self.speed > 0 and self.accel > 0 and self.stroke > 0 and self.travel_speed > 0):
            raise ValueError("speed, accel, stroke and travel_speed must be > 0")
        if not self.offsets:
            raise ValueError("offsets: need at least one")


class ProbePushes:
    """A `Policy` making probing strokes on the scene's first object, one after another, until the episode ends."""

    def __init__(self, scene: SceneSpec, config: ProbeConfig = ProbeConfig()) -> None:
        self.scene, self.config = scene, config
        self.ik = PusherIK(scene)
        self._plan: np.ndarray | None = None
        self._t0 = 0.0
        self._count = 0

    def reset(self) -> None:
        self._plan, self._count = None, 0

    def stroke_points(self, observation: Observation, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Tip waypoints (m, world frame) of stroke `index` from the observed state: the travel (lift, above the
        approach point, down) and the stroke (through the object, then up)."""
        cfg, obj = self.config, self.scene.objects[0]
        pos = np.asarray(observation.object_pos[0], dtype=np.float64)[:2]
        centre = np.asarray(self.scene.goals[0].pose.pos[:2]) if self.scene.goals else np.zeros(2)
        to_centre = centre - pos
        base = float(np.arctan2(to_centre[1], to_centre[0])) if np.linalg.norm(to_centre) > 0.03 else 0.0
        angle = base + cfg.jitter * np.sin(2.4 * index)  # (a deterministic spread of directions)
        direction = np.array([np.cos(angle), np.sin(angle)])
        side = np.array([-direction[1], direction[0]])
        offset = cfg.offsets[index % len(cfg.offsets)]
        centers = np.asarray(obj.spheres.centers)[:, :2] @ quat_to_mat(np.asarray(observation.object_quat[0]))[:2, :2].T
        rod = self.scene.robot.pusher.radius if self.scene.robot.pusher else 0.0
        radii = np.asarray(obj.spheres.radii) + rod
        along, across = (centers + pos) @ direction, (centers + pos) @ side
        line = pos + side * offset
        hit = np.abs(across - line @ side) < radii  # spheres the tip meets on this line
        if not hit.any():  # (the line misses the object: stroke through its centre instead)
            line, hit = pos, np.abs(across - pos @ side) < radii
        # First contact: the tip's coordinate along the line where it first touches one of those spheres.
        first = along[hit] - np.sqrt(radii[hit] ** 2 - (across[hit] - line @ side) ** 2)
        back = float(line @ direction - first.min())
        behind = line - direction * (back + cfg.approach_gap)
        end = line - direction * back + direction * cfg.stroke
        tip = self.ik.tip_position(np.asarray(observation.q, dtype=np.float64))
        h, z = cfg.hover, cfg.push_height
        travel = np.array([tip, [*tip[:2], h], [*behind, h], [*behind, z]])
        stroke = np.array([[*behind, z], [*end, z], [*end, h]])
        return travel, stroke

    def plan(self, observation: Observation) -> np.ndarray:
        """Joint targets (L, J), one every H/m s, for the next stroke, the first at the observed joints."""
        cfg = self.config
        step = cfg.horizon / cfg.waypoints
        q = np.asarray(observation.q, dtype=np.float64)
        travel, stroke = self.stroke_points(observation, self._count)
        tips = np.concatenate([
            sample_path(travel, cfg.travel_speed, step, accel=cfg.travel_accel),
            sample_path(stroke[:2], cfg.speed, step, accel=cfg.accel)[1:],
            sample_path(stroke[1:], cfg.travel_speed, step, accel=cfg.travel_accel)[1:],
        ])  # fmt: skip
        self._count += 1
        return np.concatenate([q[None], joint_trajectory(self.ik, tips, q, panda.VELOCITY_LIMIT, step, strict=False)])

    def act(self, observation: Observation) -> ActionChunk:
        cfg = self.config
        now = float(observation.time)
        k0 = 0 if self._plan is None else round((now - self._t0) * cfg.waypoints / cfg.horizon)
        if self._plan is None or k0 >= len(self._plan) - 1:
            self._plan, self._t0, k0 = self.plan(observation), now, 0
        last = len(self._plan) - 1
        idx = np.minimum(k0 + np.arange(1, cfg.waypoints + 1), last)
        return ActionChunk(self._plan[idx], np.zeros(cfg.waypoints), cfg.horizon)
