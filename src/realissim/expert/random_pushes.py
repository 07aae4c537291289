"""Random pushes of the T: a policy-like motion that keeps the T moving for much of an episode.

Each push is planned from what the policy observes (the twin's T pose and the arm's joints): a random side
of the T's outline (mostly one near the tip), a contact point anywhere along it (off-centre contacts turn
the T), a push distance and a speed drawn at random. The tip backs off the T and goes round it at pushing
height to behind the contact (the shortest way clear of the T; of a few draws, the one with the shortest way),
then pushes along the side's inward normal — or, often, goes on pushing from where it is towards the T's
centre, turned a little. Pushes from a new side bring the T's centre back towards the middle of the workspace;
pushes that go on may take it to the edges. A push the arm cannot follow closely (a joint limit, an arm
reconfiguring) is drawn again. The next push is planned shortly before the current one ends (with the
environment re-planning every `lead`·H/m s), so the pusher does not idle.

Closed loop (`closed_loop`, the default): online the real arm follows the twin's, and the lead bound holds the
twin arm back, so a plan on its own clock runs ahead of the arm — by 15 cm, pushing where the T no longer is.
Each re-plan therefore checks the plan against what is observed: its clock waits for an arm that falls behind,
and a push is dropped, the next one planned from the arm's joints, when the T moves away before the tip reaches
it, when the tip has lost the T while pushing, or when the arm has not moved along the plan for `stall` s.
Used by the contact-rich sync scenario; a test motion, not an expert (it does not try to reach the goal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from realissim.assets import panda
from realissim.assets.pusht import WORKSPACE_CENTER, TBlock
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.geometry import planar_rotation, quat_yaw
from realissim.policy.base import ActionChunk, Observation
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK


@dataclass(frozen=True)
class RandomPushesConfig:
    """The random pushes."""

    seed: int = 0
    """Seed of the pushes (side, contact, distance, speed)."""
    speed: tuple[float, float] = (0.05, 0.3)
    """Range of the tip's pushing speed, m/s (uniform)."""
    distance: tuple[float, float] = (0.08, 0.25)
    """Range of each push's length, m (uniform)."""
    off_centre: float = 0.8
    """Contacts spread over this fraction of each side's half-length (off-centre contacts turn the T)."""
    travel_speed: float = 0.8
    """Tip speed between pushes, m/s."""
    travel: Literal["around", "lift"] = "around"
    """How the tip gets from one push to the next: "around" — backs off the T and goes round it at pushing height
    (the shortest path clear of the T by `approach_gap`), so it never comes down on the T; "lift" — up to `hover`,
    across, and down behind the contact (stops 35–51)."""
    keep_pushing: float = 0.7
    """Probability that a push goes on from where the last one ended, without lifting (long contact)."""
    turn: float = 0.5
    """A continued push heads for the T's centre turned by up to this, rad (off-centre: it turns the T)."""
    turns: int = 1
    """Headings drawn for a continued push before giving up on it (each must keep the T in the workspace for at
    least the shortest push; the push is cut short where it would leave)."""
    shorten: bool = True
    """A continued push that would take the T's centre out of the workspace is cut short where it would leave (if
    at least the shortest push remains); False: it is not taken (stops 35–51)."""
    reach: float = 0.13
    """A push goes on only while the tip is within this of the T's centre, m (still at its side)."""
    near: float = 0.75
    """Probability of pushing next on one of the 3 sides nearest the tip (short travel keeps the T moving)."""
    candidates: int = 4
    """Pushes drawn per choice; the one with the shortest way there is taken (each corner counted as 10 cm, the
    tip stopping there)."""
    through: bool = True
    """The tip turns the corners of its way round the T without stopping (one speed profile over the way)."""
    tries: int = 6
    """Draws of a push before one the arm can follow is given up on (1: the first draw, as stops 35–51)."""
    slack: float = 1.2
    """A push fits if the arm's joint path takes at most this times the tip path's time (+ 4 waypoints)."""
    accel: float = 4.0
    """Tip acceleration at the ends of each straight segment, m/s²."""
    approach_gap: float = 0.012
    """Distance from the side where the tip comes down, m."""
    push_height: float = 0.015
    """Tip centre height while pushing, m."""
    hover: float = 0.05
    """Tip height while travelling, m."""
    workspace_half: float = 0.22
    """Pushes keep the T's predicted centre within this half-size of the workspace square, m."""
    aim_half: float = 0.15
    """A push from a new side keeps the T's predicted centre within this half-size of the workspace square, m
    (smaller than `workspace_half`: new pushes bring the T back towards the middle, where continued pushes have
    room)."""
    closed_loop: bool = True
    """Each re-plan checks the plan against what is observed: its clock waits for an arm that falls more than
    `resync` behind it, and a push is dropped (the next planned from the arm's joints) when the T moves more than
    `stale` / `stale_deg` while the tip travels to it, or the tip ends more than `lost` from the T while pushing.
    False: the plan runs on its own clock (stops 35–51)."""
    resync: float = 0.02
    """The plan's clock waits when its tip is this far from the arm's, m."""
    stale: float = 0.01
    """A push is dropped when the T moves this far before the tip reaches it, m."""
    stale_deg: float = 8.0
    """... or turns this much, degrees."""
    stall: float = 1.0
    """A push is dropped when the arm has not moved along it for this long, s (it is blocked: by the T under the
    tip, or a joint limit)."""
    lost: float = 0.02
    """A push is dropped when the tip is this far (beyond the rod) from the T while pushing, m."""
    waypoints: int = 32
    """Waypoints per chunk, m."""
    lead: int = 8
    """The next push is planned (from the latest observation) once fewer waypoints than this are left: run
    the environment with a re-plan period of lead·H/m s (0.25 s) so pushes follow each other without a pause
    and are planned from a T pose at most that old."""
    horizon: float = 1.0
    """Chunk horizon H, s."""


def stop51_pushes(seed: int = 0) -> RandomPushesConfig:
    """The contact-rich scenario's pushes of stops 35–51, for comparison: lifted over the T, open loop (the plan on
    its own clock), one draw per push, faster and shorter pushes, new pushes anywhere in the workspace."""
    return RandomPushesConfig(seed=seed, travel="lift", through=False, closed_loop=False, candidates=1, tries=1,
                              speed=(0.1, 0.35), distance=(0.06, 0.18), approach_gap=0.02, aim_half=0.22,
                              shorten=False)  # fmt: skip


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
        self.boxes = [(np.asarray(b.center[:2]), np.asarray(b.half[:2])) for b in TBlock().boxes()]
        """The T's bar and stem in its body frame: (centre (2,), half-size (2,)) m."""
        self.rod = scene.robot.pusher.radius if scene.robot.pusher else 0.0
        self._rng = np.random.default_rng(config.seed)
        self._plan: np.ndarray | None = None
        self._t0 = 0.0
        self._meta: tuple[int, np.ndarray, float, int] = (0, np.zeros(2), 0.0, 0)
        self._replans = 0
        self._progress = (-1, 0.0)

    def reset(self) -> None:
        self._rng = np.random.default_rng(self.config.seed)
        self._plan = None
        self._replans = 0

    def act(self, observation: Observation) -> ActionChunk:
        cfg = self.config
        t = float(observation.time)
        q = np.asarray(observation.q, dtype=np.float64)
        if self._plan is None:
            self._start_plan(observation, q, t)
        assert self._plan is not None
        k0 = round((t - self._t0) * cfg.waypoints / cfg.horizon)
        if cfg.closed_loop:
            k0 = self._follow(observation, q, t, k0)
        if len(self._plan) - 1 - k0 < cfg.lead:  # the push is nearly done: plan the next one after it
            push, push_from = self._push(observation, self._plan[-1])
            self._plan = np.concatenate([self._plan, push[1:]])
            # Known defect (stop 52, measured as is): the offset should be the old length − 1. With this one an
            # appended push's travel is checked as if pushing (the tip more than `lost` off the T drops it, e.g.
            # at a corner of the way round), not for a moved T; pushes planned afresh are checked as documented.
            self._meta = self._meta_of(observation, len(self._plan), push_from)
        idx = np.minimum(k0 + np.arange(1, cfg.waypoints + 1), len(self._plan) - 1)
        progress = np.zeros(cfg.waypoints)  # a test motion: no task progress to report
        return ActionChunk(self._plan[idx], progress, cfg.horizon)

    @property
    def replans(self) -> int:
        """Pushes dropped and planned afresh since the reset (closed loop: the T moved under a plan, or a push
        lost the T)."""
        return self._replans

    def _start_plan(self, observation: Observation, q: np.ndarray, t: float) -> None:
        """A new plan from the arm's joints `q` (J,) at time `t` s, for the observed T."""
        (self._plan, push_from), self._t0 = self._push(observation, q), t
        self._meta = self._meta_of(observation, 0, push_from)
        self._progress = (-1, t)

    def _meta_of(self, observation: Observation, offset: int, push_from: int) -> tuple[int, np.ndarray, float, int]:
        """What the closed loop needs of the latest push, given its first waypoint's index `offset` in the plan and
        its pushing leg's start `push_from` within it: (that first index, the T's planar position (2,) m and yaw rad
        it was planned for, the pushing leg's start in the plan)."""
        pos = np.asarray(observation.object_pos[0][:2], dtype=np.float64).copy()
        return offset, pos, quat_yaw(np.asarray(observation.object_quat[0])), offset + push_from

    def _follow(self, observation: Observation, q: np.ndarray, t: float, k0: int) -> int:
        """The closed loop, each re-plan: the plan's clock waits for an arm that falls behind it (held back by the
        lead bound, or by contact) instead of running ahead; a push whose travel the T has moved away from, or whose
        pushing leg has lost the T, is dropped and the next one planned from the arm's joints. Returns the plan's
        index for time `t`."""
        cfg = self.config
        assert self._plan is not None
        tip = self.ik.tip_position(q)
        k0 = min(k0, len(self._plan) - 1)
        if np.linalg.norm(self.ik.tip_position(self._plan[k0]) - tip) > cfg.resync:
            lo = max(0, k0 - 4 * cfg.waypoints)
            near = [float(np.linalg.norm(self.ik.tip_position(self._plan[k]) - tip)) for k in range(lo, k0 + 1)]
            k = lo + int(np.argmin(near))
            self._t0 += (k0 - k) * cfg.horizon / cfg.waypoints
            k0 = k
        if k0 > self._progress[0] or self._progress[0] < 0:
            self._progress = (k0, t)
        stalled = t - self._progress[1] > cfg.stall  # the arm has not moved along the plan for a while
        first, pos0, yaw0, push_from = self._meta
        pos = np.asarray(observation.object_pos[0][:2], dtype=np.float64)
        yaw = quat_yaw(np.asarray(observation.object_quat[0]))
        left = len(self._plan) - 1 - k0
        if first <= k0 < push_from:  # travelling: the T must still be where the push was planned for
            turned = abs(math.remainder(yaw - yaw0, math.tau))
            stale = np.linalg.norm(pos - pos0) > cfg.stale or turned > math.radians(cfg.stale_deg)
        else:  # pushing: the tip must still be at the T
            body = planar_rotation(yaw).T @ (tip[:2] - pos)
            stale = _nearest(body, self.boxes)[1] > self.rod + cfg.lost
        if (stale or stalled) and left > cfg.lead:
            self._replans += 1
            self._start_plan(observation, q, t)
            return 0
        return k0

    def _push(self, observation: Observation, q_from: np.ndarray) -> tuple[np.ndarray, int]:
        """Joint waypoints (L, J), one every H/m s, the first at `q_from`: one push of the observed T; and the
        waypoint where its pushing leg starts (after the travel there). With
        `tries` > 1, a push the arm cannot follow closely (its joints needing more than `slack` of the tip's time,
        or the tip missing its path by more than 1 cm: a joint limit or an arm reconfiguring) is drawn again; the
        last draw is kept if none fits."""
        cfg = self.config
        pos, yaw = np.asarray(observation.object_pos[0][:2]), quat_yaw(np.asarray(observation.object_quat[0]))
        tip = self.ik.tip_position(q_from)
        for attempt in range(cfg.tries):
            tips, travel = self._tip_path(pos, yaw, tip, continued=attempt == 0)
            step = cfg.horizon / cfg.waypoints
            joints = joint_trajectory(self.ik, tips, q_from, panda.VELOCITY_LIMIT, step, strict=False)
            if len(joints) <= cfg.slack * len(tips) + 4 and self._follows(joints, tips):
                break
        return np.concatenate([q_from[None], joints]), round(travel * len(joints) / max(len(tips), 1))

    def _follows(self, joints: np.ndarray, tips: np.ndarray) -> bool:
        """Whether the joint waypoints (T, J) reach the tip path's (N, 3) end and points along it within 1 cm."""
        ends = [self.ik.tip_position(joints[-1]) - tips[-1]]
        if len(joints) == len(tips):
            ends += [self.ik.tip_position(joints[k]) - tips[k] for k in range(0, len(tips), 4)]
        return max(float(np.linalg.norm(e)) for e in ends) <= 0.01

    def _tip_path(self, pos: np.ndarray, yaw: float, tip: np.ndarray, continued: bool) -> tuple[np.ndarray, int]:
        """Tip positions (N, 3) m, one every H/m s, from `tip` (3,): the travel to a push of the T at `pos`, `yaw`
        (or, if `continued` allows and the draw says so, a push going on from the tip) and the push itself; and how
        many of them the travel takes."""
        cfg = self.config
        h, z = cfg.hover, cfg.push_height
        on = self._continued(pos, tip) if continued else None
        if on is not None:
            start, end = on
            travel = np.array([tip, [*start, z]])
        else:
            R = planar_rotation(yaw)
            backed = None  # where the tip backs off to, in the T's frame: the same for every draw
            if cfg.travel == "around" and tip[2] <= cfg.push_height + 0.01:
                backed = _back_off(R.T @ (tip[:2] - pos), self.boxes, self.rod + cfg.approach_gap)
            best: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
            for _ in range(cfg.candidates):  # the draw with the shortest way there
                contact, inward, distance = self._choose(pos, yaw, tip[:2])
                start = contact - inward * (self.rod + cfg.approach_gap)
                end = contact - inward * self.rod + inward * distance
                around = None if backed is None else self._around(pos, R, tip, backed, start)
                if around is not None:
                    travel = np.array([[*p, z] for p in around])
                    travel[0] = tip
                else:
                    travel = np.array([tip, [*tip[:2], h], [*start, h], [*start, z]])
                length = float(np.linalg.norm(np.diff(travel, axis=0), axis=1).sum()) + 0.1 * (len(travel) - 2)
                if around is None and cfg.travel == "around":
                    length += 1.0  # lifting over the T only if no draw has a way round it
                if best is None or length < best[0]:
                    best = (length, travel, start, end)
            assert best is not None
            _, travel, start, end = best
        step = cfg.horizon / cfg.waypoints
        push = np.array([[*start, z], [*end, z]])  # no lift: the next push may go on from here
        way = sample_path(travel, cfg.travel_speed, step, accel=cfg.accel, through=cfg.through)
        pushing = sample_path(push, float(self._rng.uniform(*cfg.speed)), step, accel=cfg.accel)[1:]
        return np.concatenate([way, pushing]), len(way)

    def _around(
        self, pos: np.ndarray, R: np.ndarray, tip: np.ndarray, backed: np.ndarray, start: np.ndarray
    ) -> list[np.ndarray] | None:
        """The tip's way at pushing height from `tip` (3,) m to the push's `start` (2,) m round the T at `pos` (2,),
        turned by `R` (2, 2): back off to `backed` (2,) in the T's frame (`approach_gap` from it), then the shortest
        path through the corners of the T's outline pushed out by rod + `approach_gap`, each leg clear of the T by
        the rod and half the gap. Points (2,) m in the world, the first the tip's own; None if there is no clear way
        (the caller lifts instead)."""
        cfg = self.config
        out, check = self.rod + cfg.approach_gap, self.rod + 0.5 * cfg.approach_gap
        b = R.T @ (start - pos)
        nodes = [backed, b, *self.corners(out)]
        if _inside(backed, self.boxes, check) or _inside(b, self.boxes, check):
            return None
        n = len(nodes)
        cost = np.full(n, math.inf)
        prev = [-1] * n
        cost[0], done = 0.0, np.zeros(n, dtype=bool)
        while True:  # Dijkstra over the few corners
            open_ = np.where(~done, cost, math.inf)
            i = int(np.argmin(open_))
            if not math.isfinite(open_[i]) or i == 1:
                break
            done[i] = True
            for j in range(n):
                if not done[j] and _clear(nodes[i], nodes[j], self.boxes, check):
                    d = cost[i] + float(np.linalg.norm(nodes[j] - nodes[i]))
                    if d < cost[j]:
                        cost[j], prev[j] = d, i
        if not math.isfinite(cost[1]):
            return None
        path, i = [], 1
        while i != -1:
            path.append(pos + R @ nodes[i])
            i = prev[i]
        path.reverse()
        return [tip[:2].copy(), *(p for p in path if np.linalg.norm(p - path[0]) > 1e-4 or p is path[0])]

    def corners(self, out: float) -> list[np.ndarray]:
        """The T outline's convex corners pushed out diagonally by `out` m (body frame, (2,) each): the bar's 4,
        the stem's 2 free ones."""
        (bc, bh), (sc, sh) = self.boxes
        pts = [bc + np.array([i * bh[0], j * bh[1]]) + out * np.array([i, j]) for i in (-1, 1) for j in (-1, 1)]
        return pts + [sc + np.array([i * sh[0], -sh[1]]) + out * np.array([i, -1]) for i in (-1, 1)]

    def _continued(self, pos: np.ndarray, tip: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(start, end) (2,) m of a push going on from the tip at (3,) m in a turned direction, or None (drawn
        not to, the tip is up, or the T would leave the workspace)."""
        cfg = self.config
        towards = pos - tip[:2]
        near = float(np.linalg.norm(towards))
        if tip[2] > cfg.push_height + 0.01 or near > cfg.reach or self._rng.random() >= cfg.keep_pushing:
            return None
        towards = towards / max(near, 1e-9)
        if not cfg.shorten:  # stops 35–51: one heading; not taken if the T would leave the workspace
            direction = planar_rotation(self._rng.uniform(-cfg.turn, cfg.turn)) @ towards
            distance = float(self._rng.uniform(*cfg.distance))
            if np.any(np.abs(pos + direction * distance - np.asarray(WORKSPACE_CENTER)) > cfg.workspace_half):
                return None
            return tip[:2].copy(), tip[:2] + direction * distance
        distance = float(self._rng.uniform(*cfg.distance))
        for _ in range(cfg.turns):  # headings about the line to the T's centre (it keeps contact), drawn until
            direction = planar_rotation(self._rng.uniform(-cfg.turn, cfg.turn)) @ towards  # one keeps the T inside
            room = _room(pos - np.asarray(WORKSPACE_CENTER), direction, cfg.workspace_half)
            if room >= cfg.distance[0]:
                return tip[:2].copy(), tip[:2] + direction * min(distance, room)
        return None

    def _choose(self, pos: np.ndarray, yaw: float, tip: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(contact point (2,) m, inward normal (2,), distance m) in the world for the T at pos, yaw: a random
        side (mostly one near the tip at (2,) m) and contact whose push keeps the T's centre in the workspace
        (else the one ending nearest the workspace's centre)."""
        cfg = self.config
        R = planar_rotation(yaw)
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
            if np.all(np.abs(predicted - centre) <= cfg.aim_half):
                return contact, inward, distance
            score = float(np.linalg.norm(predicted - centre))
            if best is None or score < best[0]:
                best = (score, contact, inward, distance)
        assert best is not None
        return best[1], best[2], best[3]


def _nearest(p: np.ndarray, boxes: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, float]:
    """The point of the boxes' union nearest `p` (2,) (all in one frame, m) and its distance (0 inside)."""
    best: tuple[np.ndarray, float] | None = None
    for centre, half in boxes:
        q = centre + np.clip(p - centre, -half, half)
        d = float(np.linalg.norm(p - q))
        if best is None or d < best[1]:
            best = (q, d)
    assert best is not None
    return best


def _inside(p: np.ndarray, boxes: list[tuple[np.ndarray, np.ndarray]], margin: float) -> bool:
    """Whether `p` (2,) lies within `margin` m of a box (the boxes grown by `margin`, square corners)."""
    return any(bool(np.all(np.abs(p - c) < h + margin)) for c, h in boxes)


def _clear(a: np.ndarray, b: np.ndarray, boxes: list[tuple[np.ndarray, np.ndarray]], margin: float) -> bool:
    """Whether the segment a→b ((2,) each, m) stays out of every box grown by `margin` m (slab test)."""
    d = b - a
    for centre, half in boxes:
        lo, hi = centre - half - margin, centre + half + margin
        t0, t1 = 0.0, 1.0
        for k in range(2):
            if abs(d[k]) < 1e-12:
                if not lo[k] < a[k] < hi[k]:
                    t0, t1 = 1.0, 0.0
                    break
                continue
            u, v = (lo[k] - a[k]) / d[k], (hi[k] - a[k]) / d[k]
            t0, t1 = max(t0, min(u, v)), min(t1, max(u, v))
        if t0 < t1 - 1e-9:
            return False
    return True


def _room(p: np.ndarray, direction: np.ndarray, half: float) -> float:
    """How far (m) a point `p` (2,) inside the square |x|, |y| ≤ `half` can go along the unit `direction` (2,)
    before leaving it (0 if it is outside)."""
    if np.any(np.abs(p) > half):
        return 0.0
    steps = [((half if d > 0 else -half) - x) / d for x, d in zip(p, direction) if abs(d) > 1e-12]
    return float(min(steps)) if steps else math.inf


def _back_off(p: np.ndarray, boxes: list[tuple[np.ndarray, np.ndarray]], out: float) -> np.ndarray:
    """Where a tip at `p` (2,) (beside the boxes, or inside them: the T not where a push expected it) gets out to
    `out` m from them by the shortest straight move (16 headings, 5 mm steps; `p` itself if already there)."""
    near, gap = _nearest(p, boxes)
    if gap >= out - 1e-9:
        return p
    if gap > 1e-9:
        backed = p + (p - near) / gap * (out - gap)
        if _nearest(backed, boxes)[1] >= out - 1e-6:
            return backed
    best = None
    for angle in np.linspace(0.0, math.tau, 16, endpoint=False):
        heading = np.array([math.cos(angle), math.sin(angle)])
        for step in np.arange(0.005, 0.3, 0.005):
            if _nearest(p + heading * step, boxes)[1] >= out:
                if best is None or step < best[0]:
                    best = (step, p + heading * step)
                break
    return p if best is None else best[1]
