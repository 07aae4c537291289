"""The PushT expert: a sampling planner over single pushes that uses the twin's physics as its model.

Each decision, from what a policy sees (the twin's T pose and arm joints, never the oracle):

1. **Candidates.** Pushes against the T's outline: for each of its eight outer sides, contact points along
   the side, push directions tilted from the inward normal, and push lengths. A candidate whose approach
   point (behind the contact, at the rod's radius plus a gap) is inside or too close to the T, or out of the
   arm's reach, is dropped.
2. **Rollouts.** Every candidate is simulated in `PushModel` (the twin's objects, table and contacts, with a
   free planar rod in place of the arm): the rod starts at rest at the approach point, pushes at constant
   speed, and the T is left to settle.
3. **Choice.** The cost of a T pose is the mean distance of seven keypoints of its outline (bar and stem
   corners, centre) from the same points at the goal pose, m. The best candidates are refined by local
   perturbation and rolled out again; the best of all is executed, unless it does not beat standing still,
   in which case shorter pushes are tried.
4. **Execution.** The tip travels to the approach point in the table plane, on the shortest route around the
   T (`expert.routing`; lifted over it only where no such route exists, or with `planar` off), pushes, backs
   off, and holds while the T settles; the tip path is turned into joints by the planar IK (`PusherIK`, rod
   vertical) and emitted as chunks. Then it decides again.

When the T covers its goal by `done_coverage` (judged on the twin), the expert holds (lifting the rod clear
first unless `planar`), checking again every chunk. Its progress estimate is the fraction of the start's
keypoint cost removed.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from realissim.assets import panda
from realissim.assets.pusht import T_NAME, TBlock
from realissim.expert.push_model import PushModel, PushModelConfig
from realissim.expert.routing import route_in_plane
from realissim.expert.scripted import joint_trajectory, sample_path
from realissim.geometry import quat_yaw
from realissim.policy.base import ActionChunk, Observation
from realissim.spec.scene import SceneSpec
from realissim.tasks.pusht import coverage
from realissim.twin.kinematics import PusherIK
from realissim.twin.physics import PhysicsConfig

if TYPE_CHECKING:
    import mujoco

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PushTExpertConfig:
    """The PushT expert's planning and execution settings."""

    push_height: float = 0.015
    """Tip centre height while pushing, m."""
    hover: float = 0.065
    """Tip centre height when travelling over the T, m (the T is 0.035 m tall): only where no route in the
    table plane exists (or `planar` is off)."""
    planar: bool = True
    """Travel in the table plane around the T (shortest route past its corners) instead of over it, so once down
    the tip stays at `push_height`, as the paper's demonstrations held the arm planar: a policy cloning them
    then has one height to learn, not a choice between pushing and travelling heights. (From a raised tip, the
    home pose at the start, the first approach goes through the air.)"""
    approach_gap: float = 0.015
    """Free distance between the rod and the T at the approach point, m."""
    clearance: float = 0.03
    """Least distance kept between the rod and the T when travelling in the table plane, m (wider than a
    clone's typical centimetre of error)."""
    corner_margin: float = 0.004
    """Extra distance beyond `clearance` of the corners a planar route passes, m."""
    travel_speed: float = 0.2
    """Tip speed between pushes, m/s (in the table plane a fast pass close by the T is what a slightly
    imprecise clone turns into a blow that launches it)."""
    travel_cost: float = 0.02
    """Added to a candidate's keypoint cost per metre of travel from the tip to its approach point (m/m): of
    nearly equal pushes the nearer one wins, so consecutive pushes are neighbours and the demonstrations are
    more continuous (easier to clone). 0.06 with `reseed` gave a clone no better than the default (68 % against
    66 % on the same disturbed starts, docs/results.md) and failed a start of `pusht/eval-v1` (77: coverage
    0.938 at 60 s) that the default solves, so the default stays."""
    push_speed: float = 0.08
    """Tip speed while pushing, m/s."""
    accel: float = 2.5
    """Tip acceleration at the ends of each straight segment, m/s²."""
    retreat: float = 0.008
    """Distance the tip backs off after a push, m."""
    settle: float = 0.3
    """Time the T is left to settle after a push (in the model and in execution), s."""
    fractions: tuple[float, ...] = (0.15, 0.5, 0.85)
    """Contact points along each side of the T, as fractions of its length."""
    angles: tuple[float, ...] = (-35.0, 0.0, 35.0)
    """Push directions, degrees from the side's inward normal."""
    lengths: tuple[float, ...] = (0.012, 0.035, 0.09)
    """Push lengths beyond first contact, m."""
    refine_top: int = 6
    """Candidates refined by local perturbation."""
    refine_each: int = 10
    """Perturbations per refined candidate."""
    replan_deviation: float = 0.02
    """Decide again when the tip is farther than this from where the plan has it, m (the arm was held)."""
    done_coverage: float = 0.985
    """The T is considered placed at this coverage of its goal (on the twin)."""
    reach: tuple[float, float] = (0.3, 0.78)
    """Planar distances from the robot base the tip may push within, m."""
    waypoints: int = 32
    """Waypoints per full chunk."""
    horizon: float = 1.0
    """Horizon of a full chunk, s."""
    seed: int = 0
    """Seed of the refinement's perturbations."""
    reseed: bool = False
    """Draw the refinement's perturbations afresh from `seed` at every decision (the same offsets each time), so
    the chosen push is a function of what the expert observes — the same state, the same push — instead of
    also of how many decisions came before it in the episode (a clone then learns one answer per state).
    Measured with `travel_cost` 0.06: no gain for the clone (see `travel_cost`)."""
    model: PushModelConfig = field(default_factory=PushModelConfig)

    def __post_init__(self) -> None:
        if not 0 < self.push_height < self.hover:
            raise ValueError(f"need 0 < push_height < hover, got {self.push_height}, {self.hover}")
        if min(self.lengths) <= 0 or not self.fractions or not self.angles:
            raise ValueError("lengths must be > 0 m; fractions and angles must not be empty")
        if not 0 < self.done_coverage <= 1:
            raise ValueError(f"done_coverage must be in (0, 1], got {self.done_coverage}")


def t_outline(block: TBlock) -> np.ndarray:
    """The T's outline (8, 2) in its body frame, counter-clockwise, m: stem end right corner first."""
    bar, stem = block.boxes()
    bx, by0, by1 = bar.half[0], bar.center[1] - bar.half[1], bar.center[1] + bar.half[1]
    sx, sy0 = stem.half[0], stem.center[1] - stem.half[1]
    return np.array([(sx, sy0), (sx, by0), (bx, by0), (bx, by1), (-bx, by1), (-bx, by0), (-sx, by0), (-sx, sy0)])


def t_keypoints(block: TBlock) -> np.ndarray:
    """Points (7, 2) in the T's body frame whose distances measure a pose error: the outline's convex corners
    and the centre, m."""
    o = t_outline(block)
    return np.concatenate([o[[0, 2, 3, 4, 5, 7]], np.zeros((1, 2))])


def _rot(yaw: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 2, 2) for yaws (...)."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


@dataclass(frozen=True)
class Push:
    """One push in the world frame: the rod's approach point (2,) m, unit direction (2,), length beyond first
    contact m, and the model's predicted keypoint cost after it, m."""

    approach: np.ndarray
    direction: np.ndarray
    length: float
    cost: float


class PushTExpert:
    """The PushT expert as a `Policy` (see the module docstring). It reads only its observations."""

    def __init__(
        self,
        scene: SceneSpec,
        config: PushTExpertConfig = PushTExpertConfig(),
        physics: PhysicsConfig = PhysicsConfig(),
        block: TBlock = TBlock(),
    ) -> None:
        self.scene, self.config, self.block = scene, config, block
        names = [o.name for o in scene.objects]
        if T_NAME not in names:
            raise ValueError(f"PushTExpert: the scene has no object {T_NAME!r} (objects: {names})")
        self._t = names.index(T_NAME)
        goal = next(g.pose for g in scene.goals if g.object == T_NAME)
        self._goal_pos, self._goal_quat = np.asarray(goal.pos), np.asarray(goal.quat)
        self._goal_xy, self._goal_yaw = self._goal_pos[:2], float(quat_yaw(self._goal_quat))
        self._rod = scene.robot.pusher.radius if scene.robot.pusher else 0.01
        self._base = np.asarray(scene.robot.base.pos[:2], dtype=np.float64)
        self.ik = PusherIK(scene)
        self.model = PushModel(scene, physics, config.model)
        self._outline = t_outline(block)
        self._keys = t_keypoints(block)
        self._goal_keys = self._keys @ _rot(np.array(self._goal_yaw)).T + self._goal_xy
        self._rng = np.random.default_rng(config.seed)
        self.pushes: list[Push] = []
        """The pushes executed in the current episode."""
        self.reset()

    @classmethod
    def with_settings(cls, scene: SceneSpec, **settings: object) -> PushTExpert:
        """The expert for `scene` with these `PushTExpertConfig` fields changed (the task's `expert` entry)."""
        return cls(scene, replace(PushTExpertConfig(), **settings))  # type: ignore[arg-type]

    # -- policy ---------------------------------------------------------------------------------------------

    def planning_models(self) -> tuple[mujoco.MjModel, ...]:
        """The push model's MuJoCo model (`PlansInPhysics`): randomised object dynamics must reach it too."""
        return (self.model.model,)

    def reset(self) -> None:
        self._plan: np.ndarray | None = None
        self._plan_progress: np.ndarray | None = None
        self._t0 = 0.0
        self._cost0: float | None = None
        self.pushes = []
        self._rng = np.random.default_rng(self.config.seed)

    def replan(self) -> None:
        """Drop the current plan: the next `act` decides again from what it observes (the world was changed
        under the plan, e.g. by a disturbance, `expert.disturb`). The episode's progress reference is kept."""
        self._plan, self._plan_progress = None, None

    def act(self, observation: Observation) -> ActionChunk:
        k0 = self._plan_index(observation)
        if k0 is not None:
            return self._chunk(k0)
        self._plan, self._plan_progress = self._decide(observation)
        self._t0 = float(observation.time)
        return self._chunk(0)

    def keeps_plan(self, observation: Observation) -> bool:
        """Whether `act(observation)` would go on with the current plan (cheap: forward kinematics) rather than
        decide afresh (a push search, ~2 s on one core): a plan exists, is not used up, and the arm is within
        `replan_deviation` of where it has the arm now. Expert relabelling (`learn.dagger`) labels a policy's
        frames this way while the arm follows the plan, and decides again only now and then."""
        return self._plan_index(observation) is not None

    def _plan_index(self, observation: Observation) -> int | None:
        """The plan's waypoint index at the observation's time, while the plan holds (see `keeps_plan`)."""
        if self._plan is None:
            return None
        k0 = round((float(observation.time) - self._t0) / (self.config.horizon / self.config.waypoints))
        if k0 < len(self._plan) - 1 and self._on_plan(observation.q, k0):
            return k0
        return None

    def _on_plan(self, q: ArrayLike, k0: int) -> bool:
        """Whether the arm's tip is within `replan_deviation` of where the plan has it now (it is not when the
        arm was held, e.g. by the desync detector online)."""
        assert self._plan is not None
        here = self.ik.tip_position(np.asarray(q, dtype=np.float64))
        planned = self.ik.tip_position(self._plan[min(k0, len(self._plan) - 1)])
        off = float(np.linalg.norm(here - planned))
        if off > self.config.replan_deviation:
            log.info("the arm is %.0f mm off the plan: deciding again", off * 1e3)
            return False
        return True

    def _chunk(self, k0: int) -> ActionChunk:
        """The next ≤ m waypoints of the plan after index k0 (a shorter chunk near its end)."""
        assert self._plan is not None and self._plan_progress is not None
        cfg = self.config
        idx = np.arange(k0 + 1, min(k0 + cfg.waypoints, len(self._plan) - 1) + 1)
        horizon = cfg.horizon * len(idx) / cfg.waypoints
        return ActionChunk(self._plan[idx], self._plan_progress[idx], horizon)

    # -- decisions -------------------------------------------------------------------------------------------

    def cost(self, xy: ArrayLike, yaw: ArrayLike) -> np.ndarray:
        """Mean keypoint distance (...) m of T poses (planar position (..., 2) m, yaw (...) rad) from the goal."""
        xy, yaw = np.asarray(xy, dtype=np.float64), np.asarray(yaw, dtype=np.float64)
        pts = np.einsum("...ij,kj->...ki", _rot(yaw), self._keys) + xy[..., None, :]
        return np.linalg.norm(pts - self._goal_keys, axis=-1).mean(axis=-1)

    def progress(self, cost: float) -> float:
        """The progress estimate for a keypoint cost: the fraction of the start's cost removed, in [0, 1]."""
        if self._cost0 is None or self._cost0 <= 0:
            return 0.0
        return float(np.clip(1.0 - cost / self._cost0, 0.0, 1.0))

    def _decide(self, observation: Observation) -> tuple[np.ndarray, np.ndarray]:
        """A plan: joint targets (L, J) every H/m s from the observed joints, and progress (L,)."""
        cfg = self.config
        pos, quat = np.asarray(observation.object_pos)[self._t], np.asarray(observation.object_quat)[self._t]
        xy, yaw = pos[:2], float(quat_yaw(quat))
        now = float(self.cost(xy, yaw))
        if self._cost0 is None:
            self._cost0 = now
        q = np.asarray(observation.q, dtype=np.float64)
        tip = self.ik.tip_position(q)
        cov = coverage(pos, quat, self._goal_pos, self._goal_quat, self.block)
        if cov >= cfg.done_coverage:
            return self._hold_clear(q, tip, xy, yaw)
        push = self.plan_push(pos, quat, now, tip=tip[:2])
        self.pushes.append(push)
        log.debug("push from %s along %s, %.1f mm: cost %.1f -> %.1f mm", push.approach.round(3),
                  push.direction.round(2), push.length * 1e3, now * 1e3, push.cost * 1e3)  # fmt: skip
        tips, speeds = self._push_path(tip, xy, yaw, push)
        plan = self._joints(tips, speeds, q)
        hold = max(1, round(cfg.settle * cfg.waypoints / cfg.horizon))
        plan = np.concatenate([plan, np.repeat(plan[-1:], hold, axis=0)])
        p0, p1 = self.progress(now), max(self.progress(now), self.progress(push.cost))
        return plan, np.linspace(p0, p1, len(plan))

    def _hold_clear(self, q: np.ndarray, tip: np.ndarray, xy: np.ndarray, yaw: float) -> tuple[np.ndarray, np.ndarray]:
        """Lift the rod (if low) and hold for one horizon: the T is placed."""
        cfg = self.config
        up = np.array([tip[0], tip[1], cfg.hover])
        tips = [tip, up] if tip[2] < cfg.hover - 1e-3 and not cfg.planar else [tip, tip]
        plan = self._joints([np.asarray(tips)], [cfg.travel_speed], q)
        n = max(cfg.waypoints + 1, len(plan))
        plan = np.concatenate([plan, np.repeat(plan[-1:], n - len(plan), axis=0)])
        return plan, np.ones(len(plan))

    def plan_push(
        self, object_pos: ArrayLike, object_quat: ArrayLike, now: float | None = None, tip: ArrayLike | None = None
    ) -> Push:
        """The best single push for the T at `object_pos` (K, 3) m, `object_quat` (K, 4) (all objects, scene
        order), judged by rolling candidates out in the push model; with the tip's planar position `tip` (2,) m,
        each candidate's cost also carries `travel_cost` per metre from the tip to its approach point."""
        cfg = self.config
        pos, quat = np.asarray(object_pos, dtype=np.float64), np.asarray(object_quat, dtype=np.float64)
        if pos.ndim == 1:
            pos, quat = pos[None], quat[None]
        xy, yaw = pos[self._t, :2], float(quat_yaw(quat[self._t]))
        now = float(self.cost(xy, yaw)) if now is None else now
        cands = self._candidates(xy, yaw, cfg.fractions, cfg.angles, cfg.lengths)
        costs = self._evaluate(pos, quat, cands)
        best = np.argsort(costs)[: cfg.refine_top]
        local = self._perturb(xy, yaw, cands[best])
        if len(local):
            cands = np.concatenate([cands, local])
            costs = np.concatenate([costs, self._evaluate(pos, quat, local)])
        if costs.min() >= now - 1e-4:  # nothing helps: try short, careful pushes
            fine = self._candidates(xy, yaw, np.linspace(0.1, 0.9, 5), np.linspace(-45, 45, 5), (0.004, 0.008))
            if len(fine):
                cands = np.concatenate([cands, fine])
                costs = np.concatenate([costs, self._evaluate(pos, quat, fine)])
        judged = costs
        if tip is not None and cfg.travel_cost > 0:
            approach, _ = self._geometry(xy, yaw, cands)
            judged = costs + cfg.travel_cost * np.linalg.norm(approach - np.asarray(tip, dtype=np.float64), axis=-1)
        i = int(np.argmin(judged))
        return self._to_push(xy, yaw, cands[i], float(costs[i]))

    def _candidates(
        self, xy: np.ndarray, yaw: float, fractions: ArrayLike, angles: ArrayLike, lengths: ArrayLike
    ) -> np.ndarray:
        """Feasible candidates (N, 4): side index, fraction along it, angle (deg), length (m)."""
        grid = np.array(np.meshgrid(np.arange(8), fractions, angles, lengths, indexing="ij")).reshape(4, -1).T
        return grid[self._feasible(xy, yaw, grid)]

    def _perturb(self, xy: np.ndarray, yaw: float, seeds: np.ndarray) -> np.ndarray:
        """Local variations (≤ N·refine_each, 4) of candidates `seeds` (N, 4), feasible ones only."""
        n = self.config.refine_each
        if self.config.reseed:
            self._rng = np.random.default_rng(self.config.seed)
        rep = np.repeat(seeds, n, axis=0)
        noise = self._rng.normal(size=rep.shape) * np.array([0.0, 0.12, 12.0, 0.0])
        rep = rep + noise
        rep[:, 1] = np.clip(rep[:, 1], 0.05, 0.95)
        rep[:, 2] = np.clip(rep[:, 2], -60.0, 60.0)
        rep[:, 3] = np.clip(rep[:, 3] * np.exp(self._rng.normal(size=len(rep)) * 0.35), 0.003, 0.15)
        return rep[self._feasible(xy, yaw, rep)]

    def _geometry(self, xy: np.ndarray, yaw: float, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Approach points (N, 2) and unit push directions (N, 2), world frame, of candidates (N, 4)."""
        side = cands[:, 0].astype(int)
        a, b = self._outline[side], self._outline[(side + 1) % 8]
        edge = b - a
        inward = np.stack([-edge[:, 1], edge[:, 0]], -1) / np.linalg.norm(edge, axis=-1, keepdims=True)
        ang = np.radians(cands[:, 2])
        c, s = np.cos(ang), np.sin(ang)
        d_B = np.stack([c * inward[:, 0] - s * inward[:, 1], s * inward[:, 0] + c * inward[:, 1]], -1)
        contact_B = a + edge * cands[:, 1:2]
        approach_B = contact_B - d_B * (self._rod + self.config.approach_gap) / np.maximum(
            np.sum(d_B * inward, axis=-1, keepdims=True), 0.3
        )
        R = _rot(np.array(yaw))
        return approach_B @ R.T + xy, d_B @ R.T

    def _feasible(self, xy: np.ndarray, yaw: float, cands: np.ndarray) -> np.ndarray:
        """(N,) bool: the approach point is clear of the T and the push stays within the arm's reach."""
        approach, d = self._geometry(xy, yaw, cands)
        R = _rot(np.array(yaw))
        clear = self.block.distance((approach - xy) @ R) >= self._rod + 0.5 * self.config.approach_gap
        end = approach + d * (cands[:, 3:4] + self._rod + self.config.approach_gap)
        lo, hi = self.config.reach
        reach = np.ones(len(cands), dtype=bool)
        for p in (approach, end):
            r = np.linalg.norm(p - self._base, axis=-1)
            reach &= (r >= lo) & (r <= hi)
        return clear & reach

    def _evaluate(self, pos: np.ndarray, quat: np.ndarray, cands: np.ndarray) -> np.ndarray:
        """Keypoint cost (N,) m after each candidate (N, 4), by rollouts in the push model."""
        if len(cands) == 0:
            return np.zeros(0)
        cfg = self.config
        xy, yaw = pos[self._t, :2], float(quat_yaw(quat[self._t]))
        approach, d = self._geometry(xy, yaw, cands)
        travel = cands[:, 3] + self._rod + cfg.approach_gap
        dt = self.model.dt
        costs = np.empty(len(cands))
        # Group by duration so short pushes are not padded to the longest one.
        frames = np.ceil((travel / cfg.push_speed + cfg.settle) / dt).astype(int)
        for n in np.unique(np.minimum(frames // 10 * 10 + 10, 10_000)):
            sel = np.nonzero(np.minimum(frames // 10 * 10 + 10, 10_000) == n)[0]
            t = np.arange(1, n + 1) * dt
            s = np.minimum(t[None, :] * cfg.push_speed, travel[sel, None])  # (n_sel, n)
            paths = approach[sel, None, :] + s[..., None] * d[sel, None, :]
            states = np.stack([self.model.initial_state(pos, quat, approach[k]) for k in sel])
            out_pos, out_quat, _ = self.model.rollout(states, paths)
            costs[sel] = self.cost(out_pos[:, self._t, :2], quat_yaw(out_quat[:, self._t]))
            # A T knocked over or off the table is no good.
            tilted = np.abs(out_pos[:, self._t, 2] - pos[self._t, 2]) > 0.01
            costs[sel[tilted]] = np.inf
        return costs

    def _to_push(self, xy: np.ndarray, yaw: float, cand: np.ndarray, cost: float) -> Push:
        approach, d = self._geometry(xy, yaw, cand[None])
        return Push(approach[0], d[0], float(cand[3]), cost)

    # -- execution -------------------------------------------------------------------------------------------

    def _clear_path(self, a: np.ndarray, b: np.ndarray, xy: np.ndarray, yaw: float) -> bool:
        """Whether the rod moving in the table plane from `a` to `b` (2,) m stays clear of the T."""
        n = max(2, math.ceil(np.linalg.norm(b - a) / 0.004))
        pts = a + (b - a) * np.linspace(0, 1, n)[:, None]
        R = _rot(np.array(yaw))
        return bool(self.block.distance((pts - xy) @ R).min() >= self._rod + self.config.clearance)

    def _push_path(
        self, tip: np.ndarray, xy: np.ndarray, yaw: float, push: Push
    ) -> tuple[list[np.ndarray], list[float]]:
        """Tip polylines (each (M, 3) m) with their speeds (m/s): to the approach point, the push, the back-off."""
        cfg = self.config
        z, h = cfg.push_height, cfg.hover
        a = np.array([*push.approach, z])
        low = tip[2] < z + 0.01
        # From a raised tip (the home pose at the start) the first approach is made through the air, straight
        # to above the approach point: a route around the T from there would be a left-or-right choice that a
        # clone averages into a path straight through the T. Afterwards the tip stays in the plane.
        travel = self._plane_travel(tip, push.approach, xy, yaw) if cfg.planar and low else None
        if travel is None and low and self._clear_path(tip[:2], push.approach, xy, yaw):
            travel = np.array([tip, a])
        if travel is None:
            top = max(h, tip[2])
            travel = np.array([tip, [tip[0], tip[1], top], [a[0], a[1], top], a])
        end = a.copy()
        end[:2] += push.direction * (push.length + self._rod + cfg.approach_gap)
        back = end.copy()
        back[:2] -= push.direction * cfg.retreat
        return [travel, np.array([a, end]), np.array([end, back])], [cfg.travel_speed, cfg.push_speed, cfg.push_speed]

    def _plane_travel(self, tip: np.ndarray, approach: np.ndarray, xy: np.ndarray, yaw: float) -> np.ndarray | None:
        """Tip polyline (M, 3) m from `tip` (3,), at pushing height, to the approach point (2,) in the table plane
        around the T; None when there is none."""
        cfg = self.config
        z, lo, hi = cfg.push_height, cfg.reach[0], cfg.reach[1]
        check = self._rod + cfg.clearance
        points = [tip]

        ends = np.linalg.norm(np.stack([tip[:2], approach]) - self._base, axis=-1)
        lo, hi = min(lo, *ends) - 1e-3, max(hi + 0.02, *ends) + 1e-3  # not nearer the base than pushes go

        def reach(p: np.ndarray) -> np.ndarray:
            r = np.linalg.norm(p - self._base, axis=-1)
            return (r >= lo) & (r <= hi)

        route = route_in_plane(
            tip[:2], approach, xy, yaw, self.block, self.block.distance, check,
            check + cfg.corner_margin, allowed=reach,
        )  # fmt: skip
        if route is None:
            log.info("no route in the table plane from %s to %s: travelling over the T", tip[:2].round(3),
                     approach.round(3))  # fmt: skip
            return None
        points += [np.array([p[0], p[1], z]) for p in route[1:]]
        return np.asarray(points)

    def _joints(self, polylines: list[np.ndarray], speeds: list[float], q: np.ndarray) -> np.ndarray:
        """Joint targets (L, J) every H/m s along the polylines, the first at `q`."""
        cfg = self.config
        step = cfg.horizon / cfg.waypoints
        tips = [sample_path(p, v, step, accel=cfg.accel)[1:] for p, v in zip(polylines, speeds) if len(p) > 1]
        points = np.concatenate(tips) if tips else np.zeros((0, 3))
        if len(points) == 0:
            return q[None].copy()
        return np.concatenate([q[None], joint_trajectory(self.ik, points, q, panda.VELOCITY_LIMIT, step, strict=False)])
