"""PushT: push the T-block onto its goal pose; success when it covers more than 95 % of the goal T.

Coverage is gym-pusht's: area(T ∩ goal T) / area(T) on the table plane, computed exactly. The T is the
union of two boxes with disjoint interiors (bar, stem), so the intersection is the sum over the four
box pairs of convex-polygon clips (Sutherland–Hodgman), done in the goal T's body frame, where each goal
box is axis-aligned. Only the yaw of either pose matters.

Starts: the T's centre uniform in the 0.5 × 0.5 m workspace, yaw uniform in [−π, π), resting on the table,
the arm at the scene's home joints. A start is rejected when it already succeeds, when the T lies under
the pusher's home tip, or when the pusher cannot reach around it: the rod, held vertical, must reach a
tip point at pushing height `reach_margin` beyond the middle of each of the T's eight outer sides (bar
top, both bar ends, the bar's underside on each side of the stem, both stem sides, stem end), each solved
by `PusherIK` seeded at the home joints.

Regenerate the shipped start sets with `python -m realissim.tasks.pusht --regenerate`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import tyro
from numba import njit
from numpy.typing import ArrayLike

from realissim.assets.pusht import (
    T_NAME,
    WORKSPACE_CENTER,
    WORKSPACE_HALF,
    PushTConfig,
    TBlock,
    pusht_scene,
)
from realissim.geometry import planar_rotation, yaw_quat
from realissim.spec.scene import Pose, SceneSpec
from realissim.spec.state import StartState
from realissim.tasks.base import (
    StartSetSpec,
    Task,
    TaskMetrics,
    generate_start_set,
    write_start_set,
)
from realissim.twin.kinematics import IKConfig, IKError, PusherIK

T_BLOCK = TBlock()
"""The T of the PushT scene."""

Rect = tuple[float, float, float, float]
"""An axis-aligned rectangle in a body frame: (x_min, x_max, y_min, y_max), m."""
Polygon = list[tuple[float, float]]
"""A convex polygon's vertices (x, y), m, in order."""


@dataclass(frozen=True)
class PushTTaskConfig:
    """Options of the PushT task."""

    success_threshold: float = 0.95
    """The T is placed when its coverage exceeds this (strictly, as gym-pusht)."""
    push_height: float = 0.015
    """Height of the pusher tip centre for the reachability targets, m (the scripted push's height)."""
    reach_margin: float = 0.04
    """Distance of each reachability target beyond the middle of a side of the T, m."""
    scene: PushTConfig = field(default_factory=PushTConfig)
    """The scene preset's options (masses, friction, cameras, pusher)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.success_threshold <= 1.0:
            raise ValueError(f"success_threshold must be in (0, 1], got {self.success_threshold}")
        if self.push_height <= 0.0:
            raise ValueError(f"push_height must be > 0 m, got {self.push_height}")
        if self.reach_margin <= 0.0:
            raise ValueError(f"reach_margin must be > 0 m, got {self.reach_margin}")


def yaw(quat: ArrayLike) -> float:
    """Heading (rad, in (−π, π]) of the body x axis on the world xy plane, for one quaternion (4,) wxyz.

    The scalar fast path of `realissim.geometry.quat_yaw` (same value; any norm).
    """
    w, x, y, z = np.asarray(quat, dtype=np.float64).reshape(4).tolist()
    return math.atan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z)


def wrap_angle(angle: float) -> float:
    """`angle` (rad) wrapped to [−π, π)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


@functools.cache
def _rects(block: TBlock) -> tuple[Rect, ...]:
    """The block's planar footprint as axis-aligned rectangles in its body frame."""
    return tuple(
        (b.center[0] - b.half[0], b.center[0] + b.half[0], b.center[1] - b.half[1], b.center[1] + b.half[1])
        for b in block.boxes()
    )


def _clip(poly: Polygon, nx: float, ny: float, d: float) -> Polygon:
    """The part of convex `poly` where nx·x + ny·y ≤ d (one Sutherland–Hodgman stage)."""
    out: Polygon = []
    if not poly:
        return out
    px, py = poly[-1]
    pv = nx * px + ny * py - d
    for qx, qy in poly:
        qv = nx * qx + ny * qy - d
        if (pv > 0.0) != (qv > 0.0):
            t = pv / (pv - qv)
            out.append((px + t * (qx - px), py + t * (qy - py)))
        if qv <= 0.0:
            out.append((qx, qy))
        px, py, pv = qx, qy, qv
    return out


def _area(poly: Polygon) -> float:
    """Area of a simple polygon (shoelace), m²."""
    total = 0.0
    px, py = poly[-1] if poly else (0.0, 0.0)
    for qx, qy in poly:
        total += px * qy - qx * py
        px, py = qx, qy
    return 0.5 * abs(total)


def _overlap(quad: Polygon, rect: Rect) -> float:
    """Area of convex `quad` inside the axis-aligned `rect`, m²."""
    x_min, x_max, y_min, y_max = rect
    xs = [p[0] for p in quad]
    ys = [p[1] for p in quad]
    if min(xs) >= x_max or max(xs) <= x_min or min(ys) >= y_max or max(ys) <= y_min:
        return 0.0
    poly = _clip(quad, 1.0, 0.0, x_max)
    poly = _clip(poly, -1.0, 0.0, -x_min)
    poly = _clip(poly, 0.0, 1.0, y_max)
    poly = _clip(poly, 0.0, -1.0, -y_min)
    return _area(poly)


def _placed(pos: ArrayLike, quat: ArrayLike, goal_pos: ArrayLike, goal_quat: ArrayLike) -> tuple[float, ...]:
    """The T's offset (tx, ty) in the goal T's body frame and the cosine and sine of its yaw relative to the
    goal's: where the goal's rectangles are axis-aligned."""
    goal_yaw = yaw(goal_quat)
    p, g = np.asarray(pos, dtype=np.float64), np.asarray(goal_pos, dtype=np.float64)
    return _in_goal_frame(float(p[0] - g[0]), float(p[1] - g[1]), yaw(quat) - goal_yaw,
                          math.cos(goal_yaw), math.sin(goal_yaw))  # fmt: skip


def _in_goal_frame(dx: float, dy: float, rel: float, goal_cos: float, goal_sin: float) -> tuple[float, ...]:
    """`_placed` from the T's world offset (dx, dy) m from the goal, its yaw `rel` rad relative to the goal's,
    and the cosine and sine of the goal's yaw."""
    return goal_cos * dx + goal_sin * dy, -goal_sin * dx + goal_cos * dy, math.cos(rel), math.sin(rel)


def coverage_reference(
    pos: ArrayLike, quat: ArrayLike, goal_pos: ArrayLike, goal_quat: ArrayLike, block: TBlock = T_BLOCK
) -> float:
    """`coverage` in plain Python (polygon clipping with lists): the specification the compiled one is tested
    against, bit for bit."""
    rects = _rects(block)
    tx, ty, c, s = _placed(pos, quat, goal_pos, goal_quat)
    inter = 0.0
    for x0, x1, y0, y1 in rects:
        quad = [(tx + c * x - s * y, ty + s * x + c * y) for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))]
        inter += sum(_overlap(quad, rect) for rect in rects)
    area = sum((x1 - x0) * (y1 - y0) for x0, x1, y0, y1 in rects)
    return min(1.0, inter / area)


def coverage(
    pos: ArrayLike, quat: ArrayLike, goal_pos: ArrayLike, goal_quat: ArrayLike, block: TBlock = T_BLOCK
) -> float:
    """area(T ∩ goal T) / area(T) in [0, 1] for the T at `pos` (3,) m, `quat` (4,) wxyz and its goal pose.

    World frame; the footprints are the T's planar outline at each pose's xy and yaw (z and tilt are
    ignored). Exact up to rounding. Both Ts have the same area, so the value is symmetric in the two poses.
    Compiled (numba): the same operations in the same order as `coverage_reference`, so the same bits (tested),
    in ~2 µs instead of ~30: it judges every environment of an evaluation several times a second.
    """
    rects, area = _rect_array(block)
    tx, ty, c, s = _placed(pos, quat, goal_pos, goal_quat)
    return min(1.0, _intersection_kernel(rects, tx, ty, c, s) / area)


@functools.cache
def _rect_array(block: TBlock) -> tuple[np.ndarray, float]:
    """The block's rectangles (R, 4) for the kernel, and its area (summed as `coverage_reference` sums it)."""
    rects = _rects(block)
    return np.array(rects, dtype=np.float64).reshape(-1, 4), sum((x1 - x0) * (y1 - y0) for x0, x1, y0, y1 in rects)


@njit(cache=True)
def _intersection_kernel(rects, tx, ty, c, s):  # pragma: no cover - numba
    """Σ over the moved rectangles of Σ over the goal rectangles of their overlap area (as `coverage_reference`)."""
    quad = np.empty((4, 2))
    a, b = np.empty((8, 2)), np.empty((8, 2))
    inter = 0.0
    for i in range(rects.shape[0]):
        x0, x1, y0, y1 = rects[i, 0], rects[i, 1], rects[i, 2], rects[i, 3]
        corners = ((x0, y0), (x1, y0), (x1, y1), (x0, y1))
        for k in range(4):
            x, y = corners[k]
            quad[k, 0] = tx + c * x - s * y
            quad[k, 1] = ty + s * x + c * y
        partial = 0.0
        for j in range(rects.shape[0]):
            partial += _overlap_kernel(quad, rects[j, 0], rects[j, 1], rects[j, 2], rects[j, 3], a, b)
        inter += partial
    return inter


@njit(cache=True)
def _overlap_kernel(quad, x_min, x_max, y_min, y_max, a, b):  # pragma: no cover - numba
    """As `_overlap`; a and b (8, 2) are scratch."""
    if (quad[:, 0].min() >= x_max or quad[:, 0].max() <= x_min or quad[:, 1].min() >= y_max
            or quad[:, 1].max() <= y_min):  # fmt: skip
        return 0.0
    a[:4] = quad
    n = _clip_kernel(a, 4, 1.0, 0.0, x_max, b)
    n = _clip_kernel(b, n, -1.0, 0.0, -x_min, a)
    n = _clip_kernel(a, n, 0.0, 1.0, y_max, b)
    n = _clip_kernel(b, n, 0.0, -1.0, -y_min, a)
    total = 0.0
    if n == 0:
        return 0.0
    px, py = a[n - 1, 0], a[n - 1, 1]
    for k in range(n):
        qx, qy = a[k, 0], a[k, 1]
        total += px * qy - qx * py
        px, py = qx, qy
    return 0.5 * abs(total)


@njit(cache=True)
def _clip_kernel(poly, n, nx, ny, d, out):  # pragma: no cover - numba
    """As `_clip` on poly[:n], written to out; returns the vertex count."""
    m = 0
    if n == 0:
        return 0
    px, py = poly[n - 1, 0], poly[n - 1, 1]
    pv = nx * px + ny * py - d
    for k in range(n):
        qx, qy = poly[k, 0], poly[k, 1]
        qv = nx * qx + ny * qy - d
        if (pv > 0.0) != (qv > 0.0):
            t = pv / (pv - qv)
            out[m, 0], out[m, 1] = px + t * (qx - px), py + t * (qy - py)
            m += 1
        if qv <= 0.0:
            out[m, 0], out[m, 1] = qx, qy
            m += 1
        px, py, pv = qx, qy, qv
    return m


def push_points(block: TBlock, margin: float) -> np.ndarray:
    """Body-frame points (8, 2), m, `margin` beyond the middle of each outer side of the T's outline.

    Order: bar top, bar ends (+x, −x), the bar's underside beside the stem (+x, −x), stem sides (+x, −x),
    stem end.
    """
    bar, stem = block.boxes()
    bar_hx, bar_hy = bar.half[:2]
    stem_hx, stem_hy = stem.half[:2]
    bar_y, stem_y = bar.center[1], stem.center[1]
    under = bar_y - bar_hy - margin
    shoulder = 0.5 * (bar_hx + stem_hx)
    return np.array(
        [
            (0.0, bar_y + bar_hy + margin),
            (bar_hx + margin, bar_y),
            (-bar_hx - margin, bar_y),
            (shoulder, under),
            (-shoulder, under),
            (stem_hx + margin, stem_y),
            (-stem_hx - margin, stem_y),
            (0.0, stem_y - stem_hy - margin),
        ]
    )


class PushTTask(Task[PushTTaskConfig]):
    """PushT: the T-block from a start pose onto `GOAL_POSE`, judged by exact coverage.

    The pusher inverse kinematics (for the reachability rule) is built on first use; it is stateful, so
    one task instance must not sample from several threads at once.
    """

    name = "pusht"
    config_type = PushTTaskConfig
    start_sets: ClassVar[Mapping[str, StartSetSpec]] = {
        "eval-v1": StartSetSpec(count=100, seed=20261201),
        "online-v1": StartSetSpec(count=20, seed=20261202),
        "select-v1": StartSetSpec(count=50, seed=20261203),
    }
    roles: ClassVar[Mapping[str, str]] = {"test": "eval-v1", "online": "online-v1", "select": "select-v1"}
    max_seconds: ClassVar[float] = 60.0
    expert: ClassVar[str | None] = "realissim.expert.pusht:PushTExpert.with_settings"

    def __init__(self, config: PushTTaskConfig = PushTTaskConfig()) -> None:
        super().__init__(config)
        self._t_index = [o.name for o in self.scene.objects].index(T_NAME)
        self._goal = next(g.pose for g in self.scene.goals if g.object == T_NAME)
        self._goal_yaw = yaw(self._goal.quat)
        # `coverage`'s goal-frame terms, computed once: `evaluate` judges every environment several times a second.
        self._goal_cos, self._goal_sin = math.cos(self._goal_yaw), math.sin(self._goal_yaw)
        self._rects, self._area = _rect_array(T_BLOCK)

    def _build_scene(self) -> SceneSpec:
        return pusht_scene(self.config.scene)

    @property
    def t_index(self) -> int:
        """The T's index among the scene's objects."""
        return self._t_index

    @staticmethod
    def in_workspace(pos: ArrayLike) -> bool:
        """Whether a planar position (2+,) m lies in the workspace square the starts are drawn from."""
        d = np.abs(np.asarray(pos, dtype=np.float64)[:2] - np.asarray(WORKSPACE_CENTER))
        return bool(np.all(d <= WORKSPACE_HALF))

    @functools.cached_property
    def ik(self) -> PusherIK:
        """The pusher's inverse kinematics on this task's scene: mink's solver (`IKConfig.solver` "mink"), the one
        the shipped start sets' reachability was decided with, so that they stay what their seeds generate (the
        compiled solver, which the experts and the runtime use, reaches starts near the arm's joint limits it did
        not, and a start set is part of a benchmark's definition)."""
        return PusherIK(self.scene, IKConfig(solver="mink"))

    @functools.cached_property
    def home_tip(self) -> np.ndarray:
        """World position (3,) m of the pusher tip centre at the home joints."""
        return self.ik.tip_position(self.scene.robot.home)

    def evaluate(self, object_pos: np.ndarray, object_quat: np.ndarray) -> TaskMetrics:
        """Coverage, success, planar position and yaw error of the T among objects (K, 3) m, (K, 4) wxyz."""
        pos = np.asarray(object_pos, dtype=np.float64)
        quat = np.asarray(object_quat, dtype=np.float64)
        k = len(self.scene.objects)
        if pos.shape != (k, 3) or quat.shape != (k, 4):
            raise ValueError(f"expected object_pos ({k}, 3) and object_quat ({k}, 4), got {pos.shape}, {quat.shape}")
        p, rel = pos[self._t_index], yaw(quat[self._t_index]) - self._goal_yaw
        # `coverage(p, q, goal pos, goal quat)` with the goal's terms cached (the same bits, tested).
        dx, dy = float(p[0] - self._goal.pos[0]), float(p[1] - self._goal.pos[1])
        placed = _in_goal_frame(dx, dy, rel, self._goal_cos, self._goal_sin)
        cov = min(1.0, _intersection_kernel(self._rects, *placed) / self._area)
        return TaskMetrics(
            coverage=cov,
            success=bool(cov > self.config.success_threshold),
            pos_err=math.hypot(dx, dy),
            yaw_err=abs(wrap_angle(rel)),
        )

    def propose_start(self, rng: np.random.Generator) -> StartState:
        """The T's centre uniform in the workspace square, yaw uniform in [−π, π), on the table; arm at home.

        Draws x, y, then yaw from `rng`.
        """
        x, y = np.asarray(WORKSPACE_CENTER) + rng.uniform(-WORKSPACE_HALF, WORKSPACE_HALF, size=2)
        heading = float(rng.uniform(-math.pi, math.pi))
        rest = StartState.of_scene(self.scene)
        objects = list(rest.objects)
        objects[self._t_index] = Pose((float(x), float(y), objects[self._t_index].pos[2]), yaw_quat(heading))
        return StartState(tuple(objects), rest.q)

    def reject_reason(self, start: StartState) -> str | None:
        """Why `start` is unusable: already successful, the T under the home tip, or not reachable around."""
        if self.evaluate(start.object_pos, start.object_quat).success:
            return "already successful"
        pose = start.objects[self._t_index]
        if self.under_home_tip(pose.pos, yaw(pose.quat)):
            return "the T lies under the pusher's home tip"
        if not self.reachable(pose.pos, yaw(pose.quat)):
            return "the pusher cannot reach around the T"
        return None

    def push_targets(self, pos: ArrayLike, heading: float) -> np.ndarray:
        """World tip targets (8, 3) m around the T at `pos` (3,) m and yaw `heading` rad (see `push_points`)."""
        c, s = math.cos(heading), math.sin(heading)
        xy = push_points(T_BLOCK, self.config.reach_margin) @ np.array([[c, s], [-s, c]]) + np.asarray(pos)[:2]
        return np.column_stack([xy, np.full(len(xy), self.config.push_height)])

    def reachable(self, pos: ArrayLike, heading: float) -> bool:
        """Whether the vertical rod reaches every push target around the T (IK seeded at the home joints)."""
        targets = self.push_targets(pos, heading)
        base = np.asarray(self.scene.robot.base.pos)
        # Most failures are out of reach far from the base or cramped close to it: try those targets first.
        order = np.argsort(np.linalg.norm(targets - base, axis=1))
        order = [order[-1], order[0], *order[1:-1]]
        home = np.asarray(self.scene.robot.home)
        for i in order:
            try:
                self.ik.solve(targets[i], home)
            except IKError:
                return False
        return True

    def under_home_tip(self, pos: ArrayLike, heading: float) -> bool:
        """Whether the T at `pos` (3,) m, yaw `heading` rad would touch the pusher tip at the home joints."""
        radius = self.scene.robot.pusher.radius if self.scene.robot.pusher else 0.0
        if self.home_tip[2] - radius >= T_BLOCK.height:
            return False
        d = self.home_tip[:2] - np.asarray(pos)[:2]
        return float(T_BLOCK.distance(planar_rotation(heading).T @ d)) < radius


@dataclass(frozen=True)
class _Args:
    """Check the shipped PushT start sets against their seeds, or regenerate them."""

    regenerate: bool = False
    """Write the start sets from their seeds, replacing the shipped files (otherwise only compare)."""
    versions: tuple[str, ...] = ()
    """Which sets (default: all)."""


def main() -> int:
    """Command line: compare (or with --regenerate, rewrite) the shipped start sets; 1 when any differs."""
    args = tyro.cli(_Args)
    task = PushTTask()
    differs = 0
    for version in args.versions or tuple(task.start_sets):
        if args.regenerate:
            print(f"wrote {write_start_set(task, version, progress=True)}")
            continue
        spec = task.start_set_spec(version)
        same = generate_start_set(task, spec.count, spec.seed, progress=True) == task.start_set(version)
        differs += not same
        print(f"{task.name}/{version}: {'matches its seed' if same else 'DIFFERS from its seed'}")
    return int(differs > 0)


if __name__ == "__main__":
    raise SystemExit(main())
