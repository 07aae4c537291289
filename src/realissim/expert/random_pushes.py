"""Random pushes of the T: a policy-like motion that keeps the T moving for much of an episode.

Each push is planned from what the policy observes (the twin's T pose and the arm's joints): a random side
of the T's outline (mostly one near the tip), a contact point anywhere along it (off-centre contacts turn
the T), a push distance and a speed drawn at random; the tip lifts, travels above the table to behind the
contact, comes down and pushes along the side's inward normal — or, often, goes on pushing from where it is
towards the T's centre, turned a little. Pushes that would take the T's centre out of the workspace are
redrawn, so the T wanders over the whole workspace, edges included. The next push is planned shortly before
the current one ends (with the environment re-planning every `lead`·H/m s), so the pusher does not idle.
Used by the contact-rich sync scenario; a test motion, not an expert (it does not try to reach the goal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from realissim.assets import panda
from realissim.assets.pusht import WORKSPACE_CENTER, TBlock
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.geometry import quat_yaw
from realissim.policy.base import ActionChunk, Observation
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK


@dataclass(frozen=True)
class RandomPushesConfig:
    """The random pushes."""

    seed: int = 0
    """Seed of the pushes (side, contact, distance, speed)."""
    speed: tuple[float, float] = (0.1, 0.35)
    """Range of the tip's pushing speed, m/s (uniform)."""
    distance: tuple[float, float] = (0.06, 0.18)
    """Range of each push's length, m (uniform)."""
    off_centre: float = 0.8
    """Contacts spread over this fraction of each side's half-length (off-centre contacts turn the T)."""
    travel_speed: float = 0.8
    """Tip speed between pushes, m/s."""
    keep_pushing: float = 0.7
    """Probability that a push goes on from where the last one ended, without lifting (long contact)."""
    turn: float = 0.5
    """A continued push heads for the T's centre turned by up to this, rad (off-centre: it turns the T)."""
    reach: float = 0.13
    """A push goes on only while the tip is within this of the T's centre, m (still at its side)."""
    near: float = 0.75
    """Probability of pushing next on one of the 3 sides nearest the tip (short travel keeps the T moving)."""
    accel: float = 4.0
    """Tip acceleration at the ends of each straight segment, m/s²."""
    approach_gap: float = 0.02
    """Distance from the side where the tip comes down, m."""
    push_height: float = 0.015
    """Tip centre height while pushing, m."""
    hover: float = 0.05
    """Tip height while travelling, m."""
    workspace_half: float = 0.22
    """Pushes keep the T's predicted centre within this half-size of the workspace square, m."""
    waypoints: int = 32
    """Waypoints per chunk, m."""
    lead: int = 8
    """The next push is planned (from the latest observation) once fewer waypoints than this are left: run
    the environment with a re-plan period of lead·H/m s (0.25 s) so pushes follow each other without a pause
    and are planned from a T pose at most that old."""
    horizon: float = 1.0
    """Chunk horizon H, s."""


def t_sides(block: TBlock) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """The T's 8 outer sides in its body frame: (midpoint (2,) m, outward unit normal (2,), half-length m)."""
    bar, stem = block.boxes()
    bx, by, bc = bar.half[0], bar.half[1], bar.center[1]
    sx, sy, sc = stem.half[0], stem.half[1], stem.center[1]
    under = 0.5 * (bx - sx)
    sides = [
        ((0.0, bc + by), (0.0, 1.0), bx),
        ((bx, bc), (1.0, 0.0), by),
        ((-bx, bc), (-1.0, 0.0), by),
        ((0.5 * (bx + sx), bc - by), (0.0, -1.0), under),
        ((-0.5 * (bx + sx), bc - by), (0.0, -1.0), under),
        ((sx, sc), (1.0, 0.0), sy),
        ((-sx, sc), (-1.0, 0.0), sy),
        ((0.0, sc - sy), (0.0, -1.0), sx),
    ]
    return [(np.asarray(m), np.asarray(n), float(h)) for m, n, h in sides]


class RandomPushes:
    """A `Policy` of random pushes of the scene's first object (a T) — see the module docstring."""

    def __init__(self, scene: SceneSpec, config: RandomPushesConfig = RandomPushesConfig()) -> None:
        self.scene, self.config = scene, config
        self.ik = PusherIK(scene)
        self.sides = t_sides(TBlock())
        self.rod = scene.robot.pusher.radius if scene.robot.pusher else 0.0
        self._rng = np.random.default_rng(config.seed)
        self._plan: np.ndarray | None = None
        self._t0 = 0.0

    def reset(self) -> None:
        self._rng = np.random.default_rng(self.config.seed)
        self._plan = None

    def act(self, observation: Observation) -> ActionChunk:
        cfg = self.config
        t = float(observation.time)
        if self._plan is None:
            self._plan, self._t0 = self._push(observation, np.asarray(observation.q, dtype=np.float64)), t
        k0 = round((t - self._t0) * cfg.waypoints / cfg.horizon)
        if len(self._plan) - 1 - k0 < cfg.lead:  # the push is nearly done: plan the next one after it
            self._plan = np.concatenate([self._plan, self._push(observation, self._plan[-1])[1:]])
        idx = np.minimum(k0 + np.arange(1, cfg.waypoints + 1), len(self._plan) - 1)
        progress = np.zeros(cfg.waypoints)  # a test motion: no task progress to report
        return ActionChunk(self._plan[idx], progress, cfg.horizon)

    def _push(self, observation: Observation, q_from: np.ndarray) -> np.ndarray:
        """Joint waypoints (L, J), one every H/m s, the first at `q_from`: one push of the observed T."""
        cfg = self.config
        pos, yaw = np.asarray(observation.object_pos[0][:2]), quat_yaw(np.asarray(observation.object_quat[0]))
        tip = self.ik.tip_position(q_from)
        h, z = cfg.hover, cfg.push_height
        on = self._continued(pos, tip)
        if on is not None:
            start, end = on
            travel = np.array([tip, [*start, z]])
        else:
            contact, inward, distance = self._choose(pos, yaw, tip[:2])
            start = contact - inward * (self.rod + cfg.approach_gap)
            end = contact - inward * self.rod + inward * distance
            travel = np.array([tip, [*tip[:2], h], [*start, h], [*start, z]])
        step = cfg.horizon / cfg.waypoints
        push = np.array([[*start, z], [*end, z]])  # no lift: the next push may go on from here
        tips = np.concatenate([
            sample_path(travel, cfg.travel_speed, step, accel=cfg.accel),
            sample_path(push, float(self._rng.uniform(*cfg.speed)), step, accel=cfg.accel)[1:],
        ])  # fmt: skip
        joints = joint_trajectory(self.ik, tips, q_from, panda.VELOCITY_LIMIT, step, strict=False)
        return np.concatenate([q_from[None], joints])

    def _continued(self, pos: np.ndarray, tip: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(start, end) (2,) m of a push going on from the tip at (3,) m in a turned direction, or None (drawn
        not to, the tip is up, or the T would leave the workspace)."""
        cfg = self.config
        towards = pos - tip[:2]
        near = float(np.linalg.norm(towards))
        if tip[2] > cfg.push_height + 0.01 or near > cfg.reach or self._rng.random() >= cfg.keep_pushing:
            return None
        angle = self._rng.uniform(-cfg.turn, cfg.turn)  # about the line to the T's centre: it keeps contact
        c, s = math.cos(angle), math.sin(angle)
        direction = np.array([[c, -s], [s, c]]) @ (towards / max(near, 1e-9))
        distance = float(self._rng.uniform(*cfg.distance))
        if np.any(np.abs(pos + direction * distance - np.asarray(WORKSPACE_CENTER)) > cfg.workspace_half):
            return None
        return tip[:2].copy(), tip[:2] + direction * distance

    def _choose(self, pos: np.ndarray, yaw: float, tip: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(contact point (2,) m, inward normal (2,), distance m) in the world for the T at pos, yaw: a random
        side (mostly one near the tip at (2,) m) and contact whose push keeps the T's centre in the workspace
        (else the one ending nearest the workspace's centre)."""
        cfg = self.config
        c, s = math.cos(yaw), math.sin(yaw)
        R = np.array([[c, -s], [s, c]])
        centre, best = np.asarray(WORKSPACE_CENTER), None
        order = self._rng.permutation(len(self.sides))
        if self._rng.random() < cfg.near:
            gap = [np.linalg.norm(pos + R @ (m + n * (self.rod + cfg.approach_gap)) - tip) for m, n, _ in self.sides]
            nearest = np.argsort(gap)[:3]
            order = np.concatenate([self._rng.permutation(nearest), [i for i in order if i not in nearest]])
        for i in order:
            mid, normal, half = self.sides[i]
            along = np.array([-normal[1], normal[0]])
            offset = self._rng.uniform(-cfg.off_centre, cfg.off_centre) * half
            contact = pos + R @ (mid + along * offset)
            inward = -(R @ normal)
            distance = float(self._rng.uniform(*cfg.distance))
            predicted = pos + inward * distance
            if np.all(np.abs(predicted - centre) <= cfg.workspace_half):
                return contact, inward, distance
            score = float(np.linalg.norm(predicted - centre))
            if best is None or score < best[0]:
                best = (score, contact, inward, distance)
        assert best is not None
        return best[1], best[2], best[3]
