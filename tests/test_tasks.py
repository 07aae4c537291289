"""Tasks: the registry, PushT's exact coverage against a point-sampling reference, evaluation thresholds,
the start sampler's rules, and the shipped start sets against their seeds."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from realissim import tasks
from realissim.assets.pusht import GOAL_POSE, T_NAME, WORKSPACE_CENTER, WORKSPACE_HALF, PushTConfig
from realissim.geometry import quat_yaw, yaw_quat
from realissim.spec.errors import SpecError
from realissim.spec.state import StartState
from realissim.tasks.base import load_start_set, start_set_path, write_start_set
from realissim.tasks.pusht import T_BLOCK, PushTTask, coverage, coverage_reference, yaw

GRID = 0.00025
"""Spacing of the reference's sample grid over the T, m (280 000 points; error well under 1e-4)."""


def sampled_coverage(pos: np.ndarray, heading: float, goal_pos: np.ndarray, goal_heading: float) -> float:
    """Reference: the fraction of a fine grid of cell centres over the T (body frame, equal cells) that,
    mapped to the world at (pos, heading), lies inside the T at the goal pose."""
    cells = []
    for box in T_BLOCK.boxes():
        axes = [np.arange(c - h + GRID / 2, c + h, GRID) for c, h in zip(box.center[:2], box.half[:2])]
        cells.append(np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2))
    points_B = np.concatenate(cells)
    c, s = math.cos(heading), math.sin(heading)
    points_W = points_B @ np.array([[c, s], [-s, c]]) + pos[:2]
    cg, sg = math.cos(goal_heading), math.sin(goal_heading)
    points_G = (points_W - goal_pos[:2]) @ np.array([[cg, -sg], [sg, cg]])
    inside = T_BLOCK.contains(np.column_stack([points_G, np.zeros(len(points_G))]))
    return float(inside.mean())


def at(x: float, y: float, heading: float) -> tuple[np.ndarray, np.ndarray]:
    """Position (3,) on the table and quaternion (4,) for a planar pose."""
    return np.array([x, y, 0.0175]), np.asarray(yaw_quat(heading))


@pytest.fixture(scope="module")
def task() -> PushTTask:
    return PushTTask()


# --- coverage ------------------------------------------------------------------------------------------


def test_coverage_matches_point_sampling() -> None:
    rng = np.random.default_rng(7)
    values = []
    for spread in np.linspace(0.1, 1.0, 12):  # from near the goal to barely overlapping
        goal_xy, goal_heading = rng.uniform(-0.2, 0.2, 2), rng.uniform(-math.pi, math.pi)
        xy, heading = goal_xy + rng.normal(0.0, 0.05 * spread, 2), goal_heading + rng.normal(0.0, spread)
        exact = coverage(*at(*xy, heading), *at(*goal_xy, goal_heading))
        reference = sampled_coverage(xy, heading, goal_xy, goal_heading)
        assert exact == pytest.approx(reference, abs=1e-3)
        values.append(exact)
    assert min(values) < 0.4 and max(values) > 0.8  # the poses span partial overlaps, not just the extremes


def test_coverage_exact_for_shifts_along_the_goal_axes() -> None:
    # Along the bar by d: bar ∩ bar = (0.2 − d)·0.05, stem ∩ stem = (0.05 − d)·0.15; the rest are disjoint.
    # Towards the bar by d: bar ∩ bar = 0.2·(0.05 − d), stem ∩ stem = 0.05·(0.15 − d), stem ∩ goal bar = 0.05·d.
    area = 0.2 * 0.05 + 0.05 * 0.15
    g, h = np.asarray(GOAL_POSE.pos), quat_yaw(GOAL_POSE.quat)
    along, across = np.array([math.cos(h), math.sin(h), 0.0]), np.array([-math.sin(h), math.cos(h), 0.0])
    for d in (0.0, 0.004, 0.02, 0.049):
        expected = ((0.2 - d) * 0.05 + (0.05 - d) * 0.15) / area
        assert coverage(g + d * along, GOAL_POSE.quat, g, GOAL_POSE.quat) == pytest.approx(expected, abs=1e-12)
        expected = (0.2 * (0.05 - d) + 0.05 * (0.15 - d) + 0.05 * d) / area
        assert coverage(g + d * across, GOAL_POSE.quat, g, GOAL_POSE.quat) == pytest.approx(expected, abs=1e-12)


def test_coverage_is_one_at_the_goal_and_zero_far_away() -> None:
    g, q = np.asarray(GOAL_POSE.pos), np.asarray(GOAL_POSE.quat)
    assert coverage(g, q, g, q) == pytest.approx(1.0, abs=1e-12)
    assert coverage(g + np.array([0.0, 0.0, 0.3]), q, g, q) == pytest.approx(1.0, abs=1e-12)  # height is ignored
    assert coverage(g + np.array([0.5, 0.0, 0.0]), q, g, q) == 0.0
    assert coverage(*at(0.0, 0.0, math.pi), *at(0.0, 0.0, 0.0)) < 0.5  # upside down overlaps only partly


def test_compiled_coverage_equals_the_reference_bit_for_bit() -> None:
    """The judge's compiled coverage is the plain-Python clipping, the same operations in the same order: success
    decisions at the 0.95 threshold cannot move."""
    rng = np.random.default_rng(11)
    for i in range(3000):
        near = i % 3 != 0  # most poses overlap the goal partly; a third anywhere in the workspace
        xy = rng.normal(0.0, 0.03, 2) if near else rng.uniform(-0.3, 0.3, 2)
        heading = rng.normal(0.0, 0.3) if near else rng.uniform(-math.pi, math.pi)
        a, b = at(*xy, heading), at(0.0, 0.0, 0.0)
        assert coverage(*a, *b) == coverage_reference(*a, *b)


def test_the_task_judges_with_coverage_bit_for_bit() -> None:
    """`PushTTask.evaluate` caches the goal's terms; its coverage, position and yaw errors are `coverage`'s and
    the plain formulas' to the last bit, so success at the threshold cannot move."""
    task = PushTTask()
    goal = next(g.pose for g in task.scene.goals if g.object == T_NAME)
    rng = np.random.default_rng(12)
    for i in range(2000):
        near = i % 3 != 0
        xy = np.asarray(goal.pos[:2]) + (rng.normal(0.0, 0.03, 2) if near else rng.uniform(-0.3, 0.3, 2))
        heading = yaw(goal.quat) + (rng.normal(0.0, 0.3) if near else rng.uniform(-math.pi, math.pi))
        pos = np.array([[xy[0], xy[1], goal.pos[2]]])
        quat = np.array([yaw_quat(heading)]) * rng.uniform(0.5, 2.0)  # any norm
        metrics = task.evaluate(pos, quat)
        assert metrics.coverage == coverage(pos[0], quat[0], goal.pos, goal.quat)
        assert metrics.success == (metrics.coverage > task.config.success_threshold)
        assert metrics.pos_err == math.hypot(pos[0, 0] - goal.pos[0], pos[0, 1] - goal.pos[1])
        assert metrics.yaw_err == abs((yaw(quat[0]) - yaw(goal.quat) + math.pi) % (2.0 * math.pi) - math.pi)


def test_coverage_symmetries() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        a = (*rng.uniform(-0.05, 0.05, 2), rng.uniform(-math.pi, math.pi))
        b = (*rng.uniform(-0.05, 0.05, 2), rng.uniform(-math.pi, math.pi))
        value = coverage(*at(*a), *at(*b))
        assert coverage(*at(*b), *at(*a)) == pytest.approx(value, abs=1e-12)
        assert coverage(*at(a[0], a[1], a[2] + 2 * math.pi), *at(*b)) == pytest.approx(value, abs=1e-12)
        pa, qa = at(*a)
        assert coverage(pa, -qa, *at(*b)) == pytest.approx(value, abs=1e-12)  # q and −q: the same rotation
        turn, shift = rng.uniform(-math.pi, math.pi), rng.uniform(-0.3, 0.3, 2)
        c, s = math.cos(turn), math.sin(turn)

        a_moved = (c * a[0] - s * a[1] + shift[0], s * a[0] + c * a[1] + shift[1], a[2] + turn)
        b_moved = (c * b[0] - s * b[1] + shift[0], s * b[0] + c * b[1] + shift[1], b[2] + turn)
        assert coverage(*at(*a_moved), *at(*b_moved)) == pytest.approx(value, abs=1e-12)


def test_yaw_matches_geometry_quat_yaw() -> None:
    quats = np.random.default_rng(5).normal(size=(200, 4))
    assert np.allclose([yaw(q) for q in quats], quat_yaw(quats), atol=1e-12)


# --- evaluate ------------------------------------------------------------------------------------------


def test_evaluate_errors_at_a_known_pose(task: PushTTask) -> None:
    g, h = np.asarray(GOAL_POSE.pos), quat_yaw(GOAL_POSE.quat)
    pos, quat = at(g[0] + 0.03, g[1] - 0.04, h + math.pi + 0.1)
    metrics = task.evaluate(pos[None], quat[None])
    assert metrics.pos_err == pytest.approx(0.05, abs=1e-12)
    assert metrics.yaw_err == pytest.approx(math.pi - 0.1, abs=1e-12)
    assert not metrics.success
    at_goal = task.evaluate(np.array([GOAL_POSE.pos]), np.array([GOAL_POSE.quat]))
    assert at_goal.as_dict() == {"coverage": 1.0, "success": True, "pos_err": 0.0, "yaw_err": 0.0}
    with pytest.raises(ValueError, match=r"\(1, 3\)"):
        task.evaluate(pos, quat)


def test_success_is_strictly_above_the_threshold() -> None:
    g, q = np.array([GOAL_POSE.pos]), np.array([GOAL_POSE.quat])
    h = quat_yaw(GOAL_POSE.quat)
    pos = g + 0.01 * np.array([math.cos(h), math.sin(h), 0.0])
    value = coverage(pos[0], q[0], g[0], q[0])
    assert tasks.make("pusht", success_threshold=value).evaluate(pos, q).success is False
    assert tasks.make("pusht", success_threshold=np.nextafter(value, 0.0)).evaluate(pos, q).success is True
    assert tasks.make("pusht", success_threshold=np.nextafter(value, 1.0)).evaluate(pos, q).success is False


def test_default_threshold_is_gym_pushts(task: PushTTask) -> None:
    # Towards the bar by d, coverage = 1 − 0.2·d / 0.0175: 0.95 at d = 4.375 mm.
    assert task.config.success_threshold == 0.95
    g, q = np.asarray(GOAL_POSE.pos), np.array([GOAL_POSE.quat])
    h = quat_yaw(GOAL_POSE.quat)
    across = np.array([-math.sin(h), math.cos(h), 0.0])
    assert task.evaluate((g + 0.0043 * across)[None], q).success
    assert not task.evaluate((g + 0.0045 * across)[None], q).success


# --- registry ------------------------------------------------------------------------------------------


def test_make_applies_overrides_and_rejects_unknown_names() -> None:
    assert tasks.names() == ("pusht",)
    heavy = tasks.make("pusht", scene=PushTConfig(t_mass=0.4), reach_margin=0.05)
    assert heavy.scene.object(T_NAME).mass == 0.4
    assert heavy.config.reach_margin == 0.05
    with pytest.raises(KeyError, match="pusht"):
        tasks.make("pushq")
    with pytest.raises(ValueError, match=r"'succes_threshold'.*success_threshold"):
        tasks.make("pusht", succes_threshold=0.9)
    with pytest.raises(ValueError, match="success_threshold"):
        tasks.make("pusht", success_threshold=1.5)


def test_unknown_start_set_lists_the_known_ones(task: PushTTask) -> None:
    assert tasks.start_set_names() == ("pusht/eval-v1", "pusht/online-v1", "pusht/select-v1")
    for name in ("pusht/eval-v9", "pushq/eval-v1", "pusht"):
        with pytest.raises(KeyError, match="pusht/eval-v1, pusht/online-v1, pusht/select-v1"):
            tasks.start_set(name)
    with pytest.raises(KeyError, match="eval-v1, online-v1, select-v1"):
        task.start_set("eval-v9")


def test_as_dict_is_json_with_the_resolved_config() -> None:
    data = json.loads(json.dumps(tasks.make("pusht", success_threshold=0.9).as_dict()))
    assert data["name"] == "pusht"
    assert data["config"]["success_threshold"] == 0.9
    assert data["goal"][0]["pose"]["quat"] == list(GOAL_POSE.quat)


@pytest.mark.parametrize("name", tasks.names())
def test_every_task_samples_evaluates_and_ships_its_sets(name: str) -> None:
    task = tasks.make(name)
    start = task.sample_start(np.random.default_rng(0))
    start.check(task.scene)
    metrics = task.evaluate(start.object_pos, start.object_quat)
    assert not metrics.success
    assert all(math.isfinite(v) for v in (metrics.coverage, metrics.pos_err, metrics.yaw_err))
    for version, spec in task.start_sets.items():
        assert len(tasks.start_set(f"{name}/{version}")) == spec.count


# --- the sampler's rules -------------------------------------------------------------------------------


def test_sampler_is_deterministic_and_draws_inside_the_workspace(task: PushTTask) -> None:
    first = tasks.generate_start_set(task, 5, seed=11)
    assert first == tasks.generate_start_set(task, 5, seed=11)
    assert first != tasks.generate_start_set(task, 5, seed=12)
    proposals = [task.propose_start(np.random.default_rng(i)) for i in range(200)]
    xy = np.array([p.object_pos[0, :2] for p in proposals])
    assert np.all(np.abs(xy - WORKSPACE_CENTER) <= WORKSPACE_HALF)
    assert np.ptp(xy, axis=0).min() > 0.8 * 2 * WORKSPACE_HALF  # spread over the square, not a corner of it


def test_rejects_starts_that_already_succeed_or_are_out_of_reach(task: PushTTask) -> None:
    home = task.scene.robot.home
    at_goal = StartState((GOAL_POSE,), home)
    assert task.reject_reason(at_goal) == "already successful"
    far_corner = StartState.from_arrays(*at(0.25, 0.25, 0.0), np.asarray(home))
    assert task.reject_reason(far_corner) == "the pusher cannot reach around the T"
    assert not task.reachable((0.25, 0.25, 0.0175), 0.0)
    assert task.reachable((0.0, 0.0, 0.0175), 0.0)
    targets = task.push_targets((0.1, -0.05, 0.0175), 0.7)
    assert targets.shape == (8, 3) and np.all(targets[:, 2] == task.config.push_height)
    # Each target lies `reach_margin` out from the middle of a side: that far from the outline, except the two
    # under the bar, which sit nearer the stem (by half the bar's overhang, 3.75 cm) — all clear of the rod.
    c, s = math.cos(0.7), math.sin(0.7)
    body = (targets[:, :2] - [0.1, -0.05]) @ np.array([[c, -s], [s, c]])
    gaps = [
        min(np.linalg.norm(np.maximum(np.abs(p - b.center[:2]) - b.half[:2], 0)) for b in T_BLOCK.boxes()) for p in body
    ]
    assert np.allclose(gaps, [0.04, 0.04, 0.04, 0.0375, 0.0375, 0.04, 0.04, 0.04], atol=1e-12)


def test_rejects_a_t_under_a_low_home_tip() -> None:
    # A 0.27 m rod puts the home tip centre 1 cm above the table, over (−0.1, 0): inside a T placed there.
    low = tasks.make("pusht", scene=PushTConfig(pusher_length=0.27))
    assert low.home_tip[2] == pytest.approx(0.01, abs=1e-3)
    under = StartState.from_arrays(*at(-0.1, 0.0, 0.3), np.asarray(low.scene.robot.home))
    assert low.reject_reason(under) == "the T lies under the pusher's home tip"
    assert not low.under_home_tip((0.1, 0.0, 0.0175), 0.3)
    assert not tasks.make("pusht").under_home_tip((-0.1, 0.0, 0.0175), 0.3)  # the default tip is 8 cm up


# --- the shipped start sets ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["eval-v1", "online-v1", "select-v1"])
def test_shipped_start_set_is_what_its_seed_generates(task: PushTTask, version: str) -> None:
    shipped = tasks.start_set(f"pusht/{version}")
    spec = task.start_sets[version]
    assert len(shipped) == spec.count
    assert tasks.generate_start_set(task, spec.count, spec.seed) == shipped


@pytest.mark.parametrize("version", ["eval-v1", "online-v1", "select-v1"])
def test_shipped_starts_are_valid(task: PushTTask, version: str) -> None:
    starts = task.start_set(version)
    rest_z = task.scene.object(T_NAME).pose.pos[2]
    for start in starts:
        start.check(task.scene)
        pos = start.object_pos[0]
        assert np.all(np.abs(pos[:2] - WORKSPACE_CENTER) <= WORKSPACE_HALF) and pos[2] == rest_z
        assert start.q == task.scene.robot.home
        assert not task.evaluate(start.object_pos, start.object_quat).success
        assert task.reachable(pos, yaw(start.object_quat[0]))
        assert task.reject_reason(start) is None
    assert len(set(starts)) == len(starts)


def test_eval_online_and_selection_sets_are_disjoint(task: PushTTask) -> None:
    sets = [set(task.start_set(v)) for v in ("eval-v1", "online-v1", "select-v1")]
    assert not sets[0] & sets[1] and not sets[0] & sets[2] and not sets[1] & sets[2]


def test_start_set_file_is_checked_against_its_header(
    task: PushTTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = dataclasses.replace(task.start_sets["online-v1"], count=3)
    first_three = task.start_set("online-v1")[:3]
    monkeypatch.setattr(PushTTask, "start_sets", {"tiny": small})
    path = write_start_set(task, "tiny", tmp_path)
    assert path == start_set_path("pusht", "tiny", tmp_path)
    assert load_start_set(path, task, "tiny", small) == first_three
    with pytest.raises(SpecError, match="count: expected 4"):
        load_start_set(path, task, "tiny", dataclasses.replace(small, count=4))
    data = json.loads(path.read_text())
    data["starts"][1]["q"] = data["starts"][1]["q"][:6]
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"starts\[1\]\.q"):
        load_start_set(path, task, "tiny", small)


def test_a_start_set_file_of_ones_own_reads_back_and_bad_ones_are_named(task: PushTTask, tmp_path: Path) -> None:
    """A start-set file in the shipped format (a miner's or a user's): written, read back by `start_set` from its
    path (for its task only), and each fault named with the file and the field."""
    starts = task.start_set("select-v1")[:4]
    path = tasks.write_start_file(tmp_path / "mined.json", task, "mined-run-1", starts)
    assert tasks.is_start_file(str(path)) and not tasks.is_start_file("pusht/eval-v1")
    assert tasks.start_set(str(path)) == starts == tasks.start_set(str(path), "pusht")
    assert tasks.start_set_task(str(path)) == "pusht" and tasks.start_set_label(str(path)) == "mined"
    assert tasks.start_set_label("pusht/eval-v1") == "pusht_eval-v1"
    header = tasks.read_start_file(path, task)
    assert (header.task, header.version, header.count) == ("pusht", "mined-run-1", 4)
    with pytest.raises(ValueError, match="for task 'pusht', not 'other'"):
        tasks.start_set("pusht/eval-v1", "other")
    data = json.loads(path.read_text())
    for change, match in (
        ({"count": 5}, "header says 5 starts, the file holds 4"),
        ({"task": "cube"}, "task 'cube'"),
        ({"starts": [], "count": 0}, "at least one start"),
    ):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data | change))
        with pytest.raises(SpecError, match=match) as err:
            tasks.read_start_file(bad, task)
        assert str(bad) in str(err.value)
    data["starts"][2]["objects"][0]["pos"] = [0.0, 0.0, float("nan")]
    bad.write_text(json.dumps(data).replace("NaN", '"nan"'))
    with pytest.raises(SpecError, match=r"starts\[2\]"):
        tasks.read_start_file(bad, task)
    with pytest.raises(SpecError, match="cannot read start set file"):
        tasks.start_set(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="no starts"):
        tasks.write_start_file(tmp_path / "none.json", task, "v", [])


def test_wilson_intervals_match_hand_computed_values() -> None:
    from realissim.eval.stats import rate_text, wilson

    # 7 of 10: centre (k + z²/2) / (n + z²), half-width z √(p(1−p)/n + z²/4n²) / (1 + z²/n), z = 1.95996.
    z, n, p = 1.959963984540054, 10, 0.7
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = wilson(7, 10)
    assert abs(low - (centre - half)) < 1e-9 and abs(high - (centre + half)) < 1e-9
    assert wilson(0, 20)[0] == 0.0 and abs(wilson(0, 20)[1] - 0.16113) < 1e-4
    assert wilson(20, 20)[1] == 1.0
    assert rate_text(7, 10) == "7/10 = 70.0 % [39.7, 89.2]"
    with pytest.raises(ValueError):
        wilson(3, 2)
