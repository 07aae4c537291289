"""Random pushes of the T: a policy-like motion that keeps the T moving for much of an episode.

Each push is planned from what the policy observes (the twin's T pose and the arm's joints): a random side
of the T's outline (mostly one near the tip), a contact point anywhere along it (off-centre contacts turn
the T), a push distance and a speed drawn at random. The tip backs off the T and goes round it at pushing
height to behind the contact (the shortest way clear of the T; of a few draws, the one with the shortest way),
then pushes along the side's inward normal — or, often, goes on pushing from where it is towards the T's
centre, turned a little. Pushes from a new side bring the T's centre back towards the middle of the workspace;
pushes that go on may take it to the edges. A push the arm cannot follow closely (a joint limit, an arm
reconfiguring) is drawn again, and pushes keep the T clear of the robot's base, where the folded arm cannot push it
back. The next push is planned shortly before the current one ends (with the environment re-planning every
`lead`·H/m s), for where the current push will leave the T, so the pusher does not idle.

Closed loop (`closed_loop`, the default): online the real arm follows the twin's, and the lead bound holds the
twin arm back, so a plan on its own clock runs ahead of the arm — by 15 cm, pushing where the T no longer is.
Each re-plan therefore checks the plan against what is observed: its clock waits for an arm that falls behind,
and a push is dropped, the next one planned from the arm's joints, when the T moves away before the tip reaches
it, when the tip has lost the T while pushing, or when the arm has not moved along the plan for `stall` s.
Used by the contact-rich sync scenario; a test motion, not an expert (it does not try to reach the goal).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from realissim.assets import panda
from realissim.assets.pusht import WORKSPACE_CENTER, TBlock
from realissim.expert.routing import route_in_plane
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.geometry import planar_rotation, quat_yaw
from realissim.policy.base import ActionChunk, Observation
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK

log = logging.getLogger(__name__)


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
    across, and down behind the contact (as `lifted_pushes`)."""
    keep_pushing: float = 0.7
    """Probability that a push goes on from where the last one ended, without lifting (long contact)."""
    turn: float = 0.5
    """A continued push heads for the T's centre turned by up to this, rad (off-centre: it turns the T)."""
    turns: int = 1
    """Headings drawn for a continued push before giving up on it (each must keep the T in the workspace for at
    least the shortest push; the push is cut short where it would leave)."""
    shorten: bool = True
    """A continued push that would take the T's centre out of the workspace is cut short where it would leave (if
    at least the shortest push remains); False: it is not taken (as `lifted_pushes`)."""
    reach: float = 0.13
    """A push goes on only while the tip is within this of the T's centre, m (still at its side)."""
    arm_reach: tuple[float, float] | None = (0.2, 0.78)
    """Planar distances from the robot's base the tip pushes and travels within, m: a contact whose approach point,
    or a continued push whose end, lies outside is not drawn, and the way round the T keeps inside. None: anywhere
    (as `lifted_pushes`)."""
    base_clear: float | None = 0.35
    """Pushes keep the T's predicted centre at least this far from the robot's base, m (within the workspace square
    too). Near the base the arm folds and cannot push the T back: the tip dwelt there for seconds, and a T there
    could only be pushed closer. None: the square alone (as `lifted_pushes`)."""
    near: float = 0.75
    """Probability of pushing next on one of the 3 sides nearest the tip (short travel keeps the T moving)."""
    candidates: int = 4
    """Pushes drawn per choice; the one with the shortest way there is taken (each corner counted as 10 cm, the
    tip stopping there)."""
    through: bool = True
    """The tip turns the corners of its way round the T without stopping (one speed profile over the way). A way
    that comes down from `hover` (the first move from home; with `travel` "lift", every way) stops at its corners:
    the arm rounds a corner taken at travel speed, and coming down it then cut over the T's edge — with the T's
    friction ×1.6 the rod, landing on the edge, stood the T on its side (corner profiles, seed 2: docs/decisions.md,
    "A T standing on a side")."""
    tries: int = 6
    """Draws of a push before one the arm can follow is given up on (1: the first draw, as `lifted_pushes`)."""
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
    predict: bool = True
    """A push planned ahead (appended to the one still pushing) is planned for where the T will be when that push
    ends: moved with the tip's remaining travel (not turned: a push that turns the T may be dropped at its end, the T
    no longer where it was planned for). False: for where the T is (as `lifted_pushes`)."""
    closed_loop: bool = True
    """Each re-plan checks the plan against what is observed: its clock waits for an arm that falls more than
    `resync` behind it, and a push is dropped (the next planned from the arm's joints) when the T moves more than
    `stale` / `stale_deg` while the tip travels to it, or the tip ends more than `lost` from the T while pushing.
    False: the plan runs on its own clock (as `lifted_pushes`)."""
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

    def __post_init__(self) -> None:
        if self.travel == "around" and not self.approach_gap > 0:
            raise ValueError(f"travel='around' needs approach_gap > 0 (the way round keeps half of it), got "
                             f"{self.approach_gap}")  # fmt: skip


def lifted_pushes(seed: int = 0) -> RandomPushesConfig:
    """The contact-rich scenario's earlier pushes, for comparison: lifted over the T, open loop (the plan on
    its own clock), one draw per push, faster and shorter pushes, new pushes anywhere in the workspace."""
    return RandomPushesConfig(seed=seed, travel="lift", through=False, closed_loop=False, candidates=1, tries=1,
                              speed=(0.1, 0.35), distance=(0.06, 0.18), approach_gap=0.02, aim_half=0.22,
                              shorten=False, arm_reach=None, base_clear=None, predict=False)  # fmt: skip


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
        self.block = TBlock()
        self.sides = t_sides(self.block)
        self.rod = scene.robot.pusher.radius if scene.robot.pusher else 0.0
        self.base = np.asarray(scene.robot.base.pos[:2], dtype=np.float64)
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
            pos, yaw = _planar(observation)
            if cfg.predict:
                pos = self._predict(pos, yaw, k0)
            push, push_from = self._push(pos, yaw, self._plan[-1])
            first = len(self._plan) - 1  # the push's first waypoint is the plan's last
            self._plan = np.concatenate([self._plan, push[1:]])
            self._meta = (first, pos, yaw, first + push_from)
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
        pos, yaw = _planar(observation)
        (self._plan, push_from), self._t0 = self._push(pos, yaw, q), t
        self._meta = (0, pos, yaw, push_from)
        self._progress = (-1, t)

    def _predict(self, pos: np.ndarray, yaw: float, k0: int) -> np.ndarray:
        """Where the T at `pos` (2,) m, `yaw` rad will be when the plan ends, from plan index `k0` on: moved with the
        tip's remaining planar travel if the tip is pushing it (past its push's start and at the T), else where it
        is."""
        assert self._plan is not None
        k0 = min(k0, len(self._plan) - 1)  # open loop, the plan's clock may have run past its end
        tip = self.ik.tip_position(self._plan[k0])
        at_t = float(self.block.distance(planar_rotation(yaw).T @ (tip[:2] - pos))) <= self.rod + 0.005
        if k0 < self._meta[3] or not at_t:
            return pos
        return pos + (self.ik.tip_position(self._plan[-1]) - tip)[:2]

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
        pos, yaw = _planar(observation)
        left = len(self._plan) - 1 - k0
        if first <= k0 < push_from:  # travelling: the T must still be where the push was planned for
            turned = abs(math.remainder(yaw - yaw0, math.tau))
            stale = np.linalg.norm(pos - pos0) > cfg.stale or turned > math.radians(cfg.stale_deg)
        else:  # pushing: the tip must still be at the T
            body = planar_rotation(yaw).T @ (tip[:2] - pos)
            stale = float(self.block.distance(body)) > self.rod + cfg.lost
        if (stale or stalled) and left > cfg.lead:
            why = "stalled" if stalled else "T moved" if first <= k0 < push_from else "lost the T"
            log.debug("t=%.2f s: push dropped (%s), planned afresh", t, why)
            self._replans += 1
            self._start_plan(observation, q, t)
            return 0
        return k0

    def _push(self, pos: np.ndarray, yaw: float, q_from: np.ndarray) -> tuple[np.ndarray, int]:
        """Joint waypoints (L, J), one every H/m s, the first at `q_from`: one push of the T at `pos` (2,) m, `yaw`
        rad; and the waypoint where its pushing leg starts (after the travel there). With `tries` > 1, a push the arm
        cannot follow closely (its joints needing more than `slack` of the tip's time, or the tip missing its path by
        more than 1 cm: a joint limit or an arm reconfiguring) is drawn again; if none fits, the draw the arm follows
        best is kept."""
        cfg = self.config
        tip = self.ik.tip_position(q_from)
        step = cfg.horizon / cfg.waypoints
        best: tuple[float, np.ndarray, int] | None = None
        for attempt in range(cfg.tries):
            tips, travel = self._tip_path(pos, yaw, tip, continued=attempt == 0)
            joints = joint_trajectory(self.ik, tips, q_from, panda.VELOCITY_LIMIT, step, strict=False)
            slow = max(0.0, len(joints) - cfg.slack * len(tips) - 4) / max(len(tips), 1)
            miss = max(0.0, self._miss(joints, tips) - 0.01) / 0.01
            pushing_from = round(travel * len(joints) / max(len(tips), 1))
            if best is None or slow + miss < best[0]:
                best = (slow + miss, joints, pushing_from)
            if slow + miss == 0.0:
                break
        assert best is not None
        return np.concatenate([q_from[None], best[1]]), best[2]

    def _miss(self, joints: np.ndarray, tips: np.ndarray) -> float:
        """How far (m) the joint waypoints (T, J) leave the tip path (N, 3): at its end, and at points along it when
        they keep its time."""
        ends = [self.ik.tip_position(joints[-1]) - tips[-1]]
        if len(joints) == len(tips):
            ends += [self.ik.tip_position(joints[k]) - tips[k] for k in range(0, len(tips), 4)]
        return max(float(np.linalg.norm(e)) for e in ends)

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
                backed = _back_off(R.T @ (tip[:2] - pos), self.block, self.rod + cfg.approach_gap)
            best: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
            for _ in range(cfg.candidates):  # the draw with the shortest way there
                contact, inward, distance = self._choose(pos, yaw, tip[:2])
                start = contact - inward * (self.rod + cfg.approach_gap)
                end = contact - inward * self.rod + inward * distance
                around = None if backed is None else self._around(pos, yaw, tip, backed, start)
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
        descends = bool(np.any(np.diff(travel[:, 2]) < -0.5 * (h - z)))  # from hover height, down behind the contact
        way = sample_path(travel, cfg.travel_speed, step, accel=cfg.accel, through=cfg.through and not descends)
        pushing = sample_path(push, float(self._rng.uniform(*cfg.speed)), step, accel=cfg.accel)[1:]
        return np.concatenate([way, pushing]), len(way)

    def _around(
        self, pos: np.ndarray, yaw: float, tip: np.ndarray, backed: np.ndarray, start: np.ndarray
    ) -> list[np.ndarray] | None:
        """The tip's way at pushing height from `tip` (3,) m to the push's `start` (2,) m round the T at `pos` (2,) m,
        `yaw` rad: back off to `backed` (2,) in the T's frame (`approach_gap` from it), then the shortest route through
        the corners of the T's boxes inflated by rod + `approach_gap` (`expert.routing.route_in_plane`), each leg clear
        of the T by the rod and half the gap and within `arm_reach`. Points (2,) m in the world, the first the tip's
        own; None if there is no clear way (the caller lifts instead)."""
        cfg = self.config
        out, check = self.rod + cfg.approach_gap, self.rod + 0.5 * cfg.approach_gap
        R = planar_rotation(yaw)
        if min(self.block.distance(backed), self.block.distance(R.T @ (start - pos))) < check:
            return None
        a = pos + R @ backed
        ends = np.stack([a, start])
        route = route_in_plane(a, start, pos, yaw, self.block, self.block.distance, check, out,
                               allowed=lambda p: self._reachable(p, ends))  # fmt: skip
        if route is None:
            return None
        return [tip[:2].copy(), route[0], *(p for p in route[1:] if np.linalg.norm(p - route[0]) > 1e-4)]

    def _reachable(self, points: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
        """(N,) bool: whether planar points (N, 2) m lie within `arm_reach` of the base (widened to take in `ends`
        (K, 2), a route's own ends); all True without a reach."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        if self.config.arm_reach is None:
            return np.ones(len(points), dtype=bool)
        lo, hi = self.config.arm_reach
        if ends is not None:
            r_ends = np.linalg.norm(np.asarray(ends).reshape(-1, 2) - self.base, axis=-1)
            lo, hi = min(lo, *r_ends) - 1e-3, max(hi, *r_ends) + 1e-3
        r = np.linalg.norm(points - self.base, axis=-1)
        return (r >= lo) & (r <= hi)

    def _continued(self, pos: np.ndarray, tip: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(start, end) (2,) m of a push going on from the tip at (3,) m in a turned direction, or None (drawn
        not to, the tip is up, or the T would leave the workspace)."""
        cfg = self.config
        towards = pos - tip[:2]
        near = float(np.linalg.norm(towards))
        if tip[2] > cfg.push_height + 0.01 or near > cfg.reach or self._rng.random() >= cfg.keep_pushing:
            return None
        towards = towards / max(near, 1e-9)
        if not cfg.shorten:  # one heading; not taken if the T would leave the workspace
            direction = planar_rotation(self._rng.uniform(-cfg.turn, cfg.turn)) @ towards
            distance = float(self._rng.uniform(*cfg.distance))
            if np.any(np.abs(pos + direction * distance - np.asarray(WORKSPACE_CENTER)) > cfg.workspace_half):
                return None
            base = math.inf if cfg.base_clear is None else _room_outside(pos - self.base, direction, cfg.base_clear)
            if base < distance or not self._reachable(tip[:2] + direction * distance)[0]:
                return None
            return tip[:2].copy(), tip[:2] + direction * distance
        distance = float(self._rng.uniform(*cfg.distance))
        for _ in range(cfg.turns):  # headings about the line to the T's centre (it keeps contact), drawn until
            direction = planar_rotation(self._rng.uniform(-cfg.turn, cfg.turn)) @ towards  # one keeps the T inside
            room = _room(pos - np.asarray(WORKSPACE_CENTER), direction, cfg.workspace_half)
            if cfg.base_clear is not None:
                room = min(room, _room_outside(pos - self.base, direction, cfg.base_clear))
            end = tip[:2] + direction * min(distance, room)
            if room >= cfg.distance[0] and self._reachable(end)[0]:
                return tip[:2].copy(), end
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
            reachable = self._reachable(contact - inward * (self.rod + cfg.approach_gap))[0]
            clear = cfg.base_clear is None or float(np.linalg.norm(predicted - self.base)) >= cfg.base_clear
            if reachable and clear and np.all(np.abs(predicted - centre) <= cfg.aim_half):
                return contact, inward, distance
            score = float(np.linalg.norm(predicted - centre)) + (0.0 if reachable and clear else 1.0)
            if best is None or score < best[0]:
                best = (score, contact, inward, distance)
        assert best is not None
        return best[1], best[2], best[3]


def _room_outside(p: np.ndarray, direction: np.ndarray, radius: float) -> float:
    """How far (m) a point `p` (2,) can go along the unit `direction` (2,) before coming within `radius` m of the
    origin (0 if it is already within)."""
    w = float(np.dot(p, p)) - radius * radius
    if w < 0:
        return 0.0
    b = float(np.dot(p, direction))
    disc = b * b - w
    if b >= 0 or disc < 0:  # heading away, or passing clear
        return math.inf
    return -b - math.sqrt(disc)


def _planar(observation: Observation) -> tuple[np.ndarray, float]:
    """The observed T's planar position (2,) m and yaw rad (world frame)."""
    return np.asarray(observation.object_pos[0][:2], dtype=np.float64).copy(), quat_yaw(
        np.asarray(observation.object_quat[0])
    )


def _room(p: np.ndarray, direction: np.ndarray, half: float) -> float:
    """How far (m) a point `p` (2,) inside the square |x|, |y| ≤ `half` can go along the unit `direction` (2,)
    before leaving it (0 if it is outside)."""
    if np.any(np.abs(p) > half):
        return 0.0
    steps = [((half if d > 0 else -half) - x) / d for x, d in zip(p, direction) if abs(d) > 1e-12]
    return float(min(steps)) if steps else math.inf


def _back_off(p: np.ndarray, block: TBlock, out: float) -> np.ndarray:
    """Where a tip at `p` (2,) in the T's frame (beside it, or inside it: the T not where a push expected it) gets
    out to `out` m from it by the shortest straight move: straight away from the nearest point of the T when that
    works, else the shortest of 16 headings in 5 mm steps (`p` itself if already there)."""
    gap = float(block.distance(p))
    if gap >= out - 1e-9:
        return p
    if gap > 1e-9:
        eps = 1e-5  # outside, the distance's gradient points straight away from the nearest point
        grad = np.array([block.distance(p + d) - block.distance(p - d) for d in np.eye(2) * eps]) / (2 * eps)
        backed = p + grad / max(float(np.linalg.norm(grad)), 1e-12) * (out - gap)
        if block.distance(backed) >= out - 1e-6:
            return backed
    angles = np.linspace(0.0, math.tau, 16, endpoint=False)
    steps = np.arange(0.005, 0.3, 0.005)
    headings = np.stack([np.cos(angles), np.sin(angles)], axis=-1)
    points = p + steps[:, None, None] * headings[None]  # (steps, headings, 2)
    ok = block.distance(points) >= out
    if not ok.any():
        return p
    first = np.where(ok.any(axis=1))[0][0]  # the shortest step some heading clears
    return points[first, int(np.argmax(ok[first]))]
