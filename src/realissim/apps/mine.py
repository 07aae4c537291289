"""Failure mining: where a policy goes wrong, as a start set to demonstrate from.

The policy runs offline on a start set in batched twins (`BatchEnv`, the evaluation's settings). Each episode's
trajectory is kept at `sample_hz` (the objects' poses, the arm's joints, the task's coverage), and from the failed
and slow episodes (`slow`: solved, but later than that multiple of the median time to success) the *states*
where it goes wrong are extracted, each with its kind:

- **stall**: the coverage gains less than `stall_gain` over `stall_window` s (pushing without progress,
  oscillating, stuck in a corner) — the state at the window's start, one per window (a stall of 12 s is four
  states: the longer the policy is stuck somewhere, the more weight that place gets in the clustering);
- **regress**: the coverage falls by more than `regress_drop` within `regress_window` s (a push that moves the
  object away from the goal) — the state before the fall;
- **end**: the last state of a failed episode (what the policy left behind);
- **rare**: with `data` (the demonstrations it was trained on), a stalled or regressing state whose object pose is
  farther than `rare_distance` from every demonstrated frame's (poses the demonstrations rarely saw).

The states are clustered by their objects' planar pose (k-means on x, y, cos yaw, sin yaw; `clusters`) and
`keep` of them are chosen, spread over the clusters in proportion to their sizes (at least one from each).
Each becomes a start: the objects where they were (at rest), the arm where it was when its tip is clear of the
objects (`clearance`), else at the robot's home (a demonstration must not begin with the tip inside an object).
States the task would not accept as a start (`Task.reject_reason`: already solved, out of reach) and objects not
lying flat are left out.

Writes to `out`: `mined.json` (the start-set file, `tasks.write_start_file`: collection and evaluation start from
it), `failures.csv` (every state found, its kind, episode, time, coverage, cluster and whether it was kept),
`summary.json` (counts by kind and cluster, the episodes' success, the kept starts), `failures.png` (the states'
object poses by cluster over the workspace, the goal, the kept ones ringed) and the evaluation's own report in
`out/eval` (results.json, episodes.csv, the coverage curves).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from realissim.eval.episode import EpisodeObserver, EpisodeResult
from realissim.geometry import quat_yaw

if TYPE_CHECKING:
    from realissim.envs import BatchEnv, Env, FrameInfo
    from realissim.eval.offline import OfflineReport
    from realissim.policy.base import Observation, Policy
    from realissim.spec.state import StartState
    from realissim.tasks import Task

log = logging.getLogger(__name__)

FailureKind = Literal["stall", "regress", "end", "rare"]


@dataclass(frozen=True)
class MineConfig:
    """What to mine on and how failures are recognised."""

    envs: int = 20
    """Twins run at once."""
    sample_hz: float = 10.0
    """Rate at which each trajectory is kept, Hz."""
    slow: float = 1.5
    """A solved episode is slow (and mined) when its time to success exceeds this multiple of the median."""
    stall_window: float = 3.0
    """s over which a stall is judged."""
    stall_gain: float = 0.02
    """Least coverage gain over `stall_window` that is not a stall."""
    regress_window: float = 1.0
    """s over which a regression is judged."""
    regress_drop: float = 0.05
    """Coverage lost within `regress_window` that is a regression."""
    rare_distance: float = 0.03
    """With demonstrations: an object pose farther than this from every demonstrated one is rare (m, in the
    planar pose metric: position in m and yaw in rad × `yaw_scale`)."""
    yaw_scale: float = 0.05
    """m per rad of yaw in the pose metric (the T's half-size: a turn by 1 rad moves its ends ~5 cm)."""
    clusters: int = 6
    """k of the k-means over the failure states' object poses."""
    keep: int = 30
    """Starts written."""
    clearance: float = 0.02
    """Least gap between the pusher's rod and every object for a start to keep the arm's joints, m (`as_start`);
    closer, the start has the arm at home."""
    seed: int = 0
    """Seed of the clustering and the choice within a cluster (the command: also of fresh starts and the policy's
    noise)."""
    progress: bool = True


@dataclass
class Failure:
    """One state where the policy went wrong."""

    kind: str
    episode: int
    time: float
    coverage: float
    object_pos: np.ndarray
    object_quat: np.ndarray
    q: np.ndarray
    cluster: int = -1
    kept: bool = False

    def planar(self, yaw_scale: float) -> np.ndarray:
        """(4,) x, y m, then cos and sin of the first object's yaw × `yaw_scale`."""
        yaw = float(quat_yaw(self.object_quat[0]))
        return np.array([self.object_pos[0, 0], self.object_pos[0, 1], yaw_scale * math.cos(yaw),
                         yaw_scale * math.sin(yaw)])  # fmt: skip


@dataclass
class Trajectory:
    """One episode's kept samples: times (N,) s, object poses (N, K, 3) and (N, K, 4), joints (N, J), coverage (N,)."""

    time: list[float] = field(default_factory=list)
    object_pos: list[np.ndarray] = field(default_factory=list)
    object_quat: list[np.ndarray] = field(default_factory=list)
    q: list[np.ndarray] = field(default_factory=list)
    coverage: list[float] = field(default_factory=list)


class TrajectoryRecorder(EpisodeObserver):
    """Keeps every env's trajectory of a `BatchEnv`'s episodes at about `hz` (see `Trajectory`); `trajectories`
    accumulates over the batches, in start order."""

    def __init__(self, hz: float) -> None:
        self.hz = hz
        self.trajectories: list[Trajectory] = []
        self._batch: list[Trajectory] = []
        self._every = 1

    def on_reset(self, env: Env | BatchEnv, observation: Observation) -> None:
        from realissim.envs import BatchEnv

        if not isinstance(env, BatchEnv):
            raise TypeError(f"TrajectoryRecorder records a BatchEnv, got {type(env).__name__}")
        self._every = max(1, round(1.0 / (self.hz * env.dt)))
        self._batch = [Trajectory() for _ in range(env.size)]
        self._add(env, observation.time, observation.object_pos, observation.object_quat, observation.q)

    def on_frame(self, frame: FrameInfo) -> None:
        if frame.frame % self._every:
            return
        s = frame.state
        self._add(frame.env, frame.time, s.object_pos, s.object_quat, s.q)  # type: ignore[arg-type]

    def _add(self, env: BatchEnv, time: np.ndarray, pos: np.ndarray, quat: np.ndarray, q: np.ndarray) -> None:
        times = np.broadcast_to(np.asarray(time, dtype=np.float64), (env.size,))
        for b, traj in enumerate(self._batch):
            traj.time.append(float(times[b]))
            traj.object_pos.append(np.array(pos[b]))
            traj.object_quat.append(np.array(quat[b]))
            traj.q.append(np.array(q[b]))
            traj.coverage.append(float(env.task.evaluate(pos[b], quat[b]).coverage))

    def on_end(self, result: EpisodeResult | list[EpisodeResult]) -> None:
        self.trajectories.extend(self._batch)
        self._batch = []


def find_failures(
    trajectory: Trajectory, result: EpisodeResult, episode: int, config: MineConfig, mined: bool
) -> list[Failure]:
    """The failure states of one episode (see the module's docstring); none unless `mined` (failed or slow)."""
    if not mined or not trajectory.time:
        return []
    t, cov = np.asarray(trajectory.time), np.asarray(trajectory.coverage)
    out: list[Failure] = []

    def at(i: int, kind: str) -> Failure:
        return Failure(kind, episode, float(t[i]), float(cov[i]), trajectory.object_pos[i], trajectory.object_quat[i],
                       trajectory.q[i])  # fmt: skip

    end = len(t) if not result.success else int(np.searchsorted(t, result.success_time))
    stalled_until = -math.inf
    for i in range(end):
        j = int(np.searchsorted(t, t[i] + config.stall_window))
        if j >= end or t[i] < stalled_until:
            continue
        if cov[i : j + 1].max() - cov[i] < config.stall_gain:
            out.append(at(i, "stall"))
            stalled_until = t[j]  # (one state per stall)
    regressed_until = -math.inf
    for i in range(end):
        j = int(np.searchsorted(t, t[i] + config.regress_window, side="right"))
        if t[i] < regressed_until:
            continue
        drop = cov[i] - cov[i:j].min() if j > i else 0.0
        if drop > config.regress_drop:
            out.append(at(i, "regress"))
            regressed_until = t[min(j, len(t) - 1)]
    if not result.success:
        out.append(at(len(t) - 1, "end"))
    return out


def demonstrated_poses(data: Path, yaw_scale: float, every: int = 6) -> np.ndarray:
    """(N, 4) the first object's planar pose (`Failure.planar`) at every `every`-th frame of the successful episodes
    of the dataset at `data`."""
    from realissim.data.reader import Dataset

    dataset = Dataset(data)
    rows = []
    for info in dataset.episodes:
        a = dataset.arrays(info.index)
        pos, quat = a["object_pos"][::every, 0], a["object_quat"][::every, 0]
        yaw = np.array([quat_yaw(r) for r in quat])
        rows.append(np.column_stack([pos[:, 0], pos[:, 1], yaw_scale * np.cos(yaw), yaw_scale * np.sin(yaw)]))
    return np.concatenate(rows) if rows else np.zeros((0, 4))


def mark_rare(failures: Sequence[Failure], demonstrated: np.ndarray, config: MineConfig) -> list[Failure]:
    """A "rare" copy of each stall or regression whose pose is farther than `rare_distance` from every
    demonstrated pose (`demonstrated` (N, 4))."""
    from scipy.spatial import cKDTree

    if not len(demonstrated):
        return []
    tree = cKDTree(demonstrated)
    out = []
    for f in failures:
        if f.kind in ("stall", "regress"):
            distance, _ = tree.query(f.planar(config.yaw_scale))
            if distance > config.rare_distance:
                out.append(Failure("rare", f.episode, f.time, f.coverage, f.object_pos, f.object_quat, f.q))
    return out


def cluster(failures: Sequence[Failure], config: MineConfig) -> np.ndarray:
    """(k, 4) cluster centres of the failures' planar poses (k-means, `config.clusters` or fewer), each failure's
    `cluster` set."""
    from scipy.cluster.vq import kmeans2

    if not failures:
        return np.zeros((0, 4))
    x = np.stack([f.planar(config.yaw_scale) for f in failures])
    k = min(config.clusters, len(np.unique(x.round(6), axis=0)))
    if k <= 1:
        for f in failures:
            f.cluster = 0
        return x.mean(axis=0, keepdims=True)
    centres, labels = kmeans2(x, k, seed=np.random.default_rng(config.seed), minit="++")
    for f, c in zip(failures, labels, strict=True):
        f.cluster = int(c)
    return centres


def choose(failures: Sequence[Failure], keep: int, seed: int) -> list[Failure]:
    """Up to `keep` failures spread over their clusters: at least one from each (from the largest clusters when there
    are more clusters than `keep`), the rest in proportion to the clusters' sizes (largest remainders), drawn at
    random within a cluster by `seed`; each chosen one's `kept` set."""
    rng = np.random.default_rng(seed)
    groups: dict[int, list[Failure]] = {}
    for f in failures:
        groups.setdefault(f.cluster, []).append(f)
    if not groups or keep < 1:
        return []
    sizes = {c: len(g) for c, g in groups.items()}
    total = sum(sizes.values())
    quota = {c: min(sizes[c], max(1, math.floor(keep * sizes[c] / total))) for c in groups}
    while sum(quota.values()) > keep:  # (the one-each floor overshot: take from the largest, then drop the smallest)
        big = max(quota, key=lambda c: quota[c])
        if quota[big] > 1:
            quota[big] -= 1
        else:
            del quota[min(quota, key=lambda c: (sizes[c], c))]
    spare = keep - sum(quota.values())
    order = sorted(quota, key=lambda c: keep * sizes[c] / total - math.floor(keep * sizes[c] / total), reverse=True)
    while spare > 0 and any(quota[c] < sizes[c] for c in quota):
        for c in order:
            if spare > 0 and quota[c] < sizes[c]:
                quota[c] += 1
                spare -= 1
    chosen = []
    for c in sorted(quota):
        picks = rng.choice(len(groups[c]), size=min(quota[c], len(groups[c])), replace=False)
        chosen.extend(groups[c][i] for i in sorted(picks))
    for f in chosen:
        f.kept = True
    return chosen


def as_start(failure: Failure, task: Task, clearance: float) -> StartState | None:
    """The start of a failure state: its objects at rest where they were, the arm where it was if its rod is at
    least `clearance` clear of every object (`planar_gap`) and its joints within their limits, else at home; None
    when the task refuses it as a start or an object is not lying flat."""
    from realissim.spec.errors import SpecError
    from realissim.spec.state import StartState
    from realissim.twin.kinematics import PusherIK

    for quat in failure.object_quat:
        _, x, y, _ = quat / np.linalg.norm(quat)
        if 1.0 - 2.0 * (x * x + y * y) < 0.95:  # (the body's z axis, against the world's)
            return None
    q = np.asarray(failure.q, dtype=np.float64)
    scene = task.scene
    if scene.robot.pusher is not None:
        tip = PusherIK(scene).tip_position(q)
        gaps = [planar_gap(o, p, r, tip) for o, p, r in zip(scene.objects, failure.object_pos, failure.object_quat,
                                                              strict=True)]  # fmt: skip
        if min(gaps) < clearance + scene.robot.pusher.radius:
            q = np.asarray(scene.robot.home, dtype=np.float64)
    start = StartState.from_arrays(failure.object_pos, failure.object_quat, q)
    try:
        start.check(scene)
    except SpecError:
        start = StartState.from_arrays(failure.object_pos, failure.object_quat, np.asarray(scene.robot.home))
    if task.reject_reason(start) is not None:
        return None
    return start


def planar_gap(obj: Any, pos: np.ndarray, quat: np.ndarray, point: np.ndarray) -> float:
    """Planar distance, m, from world point `point` (≥ 2,) to object `obj` (an `ObjectSpec`) at pose `pos` (3,),
    `quat` (4,): to its boxes' outline (0 inside), else to its spheres'; the object is taken as lying flat."""
    yaw = float(quat_yaw(quat))
    c, s = math.cos(yaw), math.sin(yaw)
    d = np.asarray(point[:2], dtype=np.float64) - np.asarray(pos[:2], dtype=np.float64)
    local = np.array([c * d[0] + s * d[1], -s * d[0] + c * d[1]])  # (the point in the body frame)
    if obj.boxes:
        gaps = []
        for box in obj.boxes:
            outside = np.maximum(np.abs(local - np.asarray(box.center[:2])) - np.asarray(box.half[:2]), 0.0)
            gaps.append(float(np.linalg.norm(outside)))
        return min(gaps)
    centres = np.asarray(obj.spheres.centers, dtype=np.float64)[:, :2]
    return float(np.min(np.linalg.norm(centres - local, axis=1) - np.asarray(obj.spheres.radii)))


@dataclass
class MineReport:
    """The evaluation mined, every failure found, and the starts written."""

    evaluation: OfflineReport
    failures: list[Failure]
    starts: list[StartState]
    mined_episodes: list[int]
    path: Path | None = None

    def summary(self) -> dict[str, Any]:
        by_kind: dict[str, int] = {}
        by_cluster: dict[int, dict[str, int]] = {}
        for f in self.failures:
            by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
            row = by_cluster.setdefault(f.cluster, {})
            row[f.kind] = row.get(f.kind, 0) + 1
        ev = self.evaluation.summary()
        return {
            "episodes": ev["episodes"], "successes": ev["successes"], "success": ev["success"],
            "success_ci95": ev["success_ci95"], "mined_episodes": len(self.mined_episodes),
            "failures": len(self.failures), "by_kind": by_kind,
            "by_cluster": {str(c): row for c, row in sorted(by_cluster.items())},
            "starts_written": len(self.starts), "start_file": None if self.path is None else str(self.path),
        }  # fmt: skip


def mine(
    task: Task,
    policy: Policy,
    starts: Sequence[StartState],
    config: MineConfig = MineConfig(),
    data: Path | None = None,
    max_seconds: float | None = None,
) -> MineReport:
    """Run `policy` on `starts` in batches of `config.envs` twins and mine its failures (see the module's
    docstring); with `data` (the demonstrations), rare poses too. The starts are not yet written (`write_mined`)."""
    from realissim.envs import BatchEnv, EnvConfig
    from realissim.eval.episode import run_episodes
    from realissim.eval.offline import OfflineReport, batches

    recorder = TrajectoryRecorder(config.sample_hz)
    env_config = EnvConfig().observing(policy.needs)  # type: ignore[attr-defined]
    results: list[EpisodeResult] = []
    import time

    from tqdm import tqdm

    wall0 = time.perf_counter()
    env: BatchEnv | None = None
    with tqdm(total=len(starts), desc="mine", unit="episode", disable=not config.progress) as bar:
        for batch in batches(list(starts), config.envs):
            if env is None or env.size != len(batch):
                env = BatchEnv(task, len(batch), env_config)
            results.extend(run_episodes(env, policy, batch, max_seconds, [recorder]))
            bar.update(len(batch))
            bar.set_postfix(success=f"{sum(r.success for r in results)}/{len(results)}")
    evaluation = OfflineReport(results, time.perf_counter() - wall0, min(config.envs, len(starts)))
    solved = [r.success_time for r in results if r.success]
    median = float(np.median(solved)) if solved else math.inf
    mined = [i for i, r in enumerate(results) if not r.success or r.success_time > config.slow * median]
    failures: list[Failure] = []
    for i, (traj, r) in enumerate(zip(recorder.trajectories, results, strict=True)):
        failures.extend(find_failures(traj, r, i, config, i in mined))
    if data is not None:
        failures.extend(mark_rare(failures, demonstrated_poses(data, config.yaw_scale), config))
    starts_of = {id(f): s for f in failures if (s := as_start(f, task, config.clearance)) is not None}
    usable = [f for f in failures if id(f) in starts_of]
    log.info("mined %d episodes of %d: %d failure states (%d usable as starts)", len(mined), len(results),
             len(failures), len(usable))  # fmt: skip
    cluster(usable, config)
    chosen = choose(usable, config.keep, config.seed)
    new_starts = [starts_of[id(f)] for f in chosen]
    return MineReport(evaluation, failures, new_starts, mined)


def write_mined(report: MineReport, task: Task, out: Path, about: dict[str, Any], config: MineConfig) -> Path:
    """Write the mining run's outputs into `out` (see the module's docstring); the start-set file's path.
    ValueError when no failure state could become a start (nothing to demonstrate from)."""
    from realissim.eval.offline import write_report
    from realissim.tasks import write_start_file

    out.mkdir(parents=True, exist_ok=True)
    write_report(report.evaluation, out / "eval", about)
    with open(out / "failures.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["kind", "episode", "time", "coverage", "x", "y", "yaw", "cluster", "kept"])
        for x in report.failures:
            writer.writerow([x.kind, x.episode, f"{x.time:.2f}", f"{x.coverage:.4f}", f"{x.object_pos[0, 0]:.4f}",
                             f"{x.object_pos[0, 1]:.4f}", f"{float(quat_yaw(x.object_quat[0])):.4f}", x.cluster,
                             int(x.kept)])  # fmt: skip
    if not report.starts:
        (out / "summary.json").write_text(json.dumps(about | report.summary(), indent=2, default=float))
        raise ValueError(f"mine: no failure state to start from ({len(report.failures)} found; see {out})")
    version = f"mined-{about.get('label', 'run')}"
    report.path = write_start_file(out / "mined.json", task, version, report.starts, config.seed)
    (out / "summary.json").write_text(json.dumps(about | {"config": asdict(config)} | report.summary(), indent=2,
                                                 default=float))  # fmt: skip
    plot_failures(report, task, out / "failures.png")
    return report.path


def plot_failures(report: MineReport, task: Task, path: Path) -> None:
    """The failure states' first-object poses (a dot and a heading tick each) coloured by cluster, the kept ones
    ringed, the goal marked, over the workspace: `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    cmap = plt.get_cmap("tab10")
    kinds = {"stall": "o", "regress": "v", "end": "s", "rare": "D"}
    for f in report.failures:
        x, y = f.object_pos[0, :2]
        yaw = float(quat_yaw(f.object_quat[0]))
        color = cmap(f.cluster % 10) if f.cluster >= 0 else "0.6"
        ax.plot([x, x + 0.02 * math.cos(yaw)], [y, y + 0.02 * math.sin(yaw)], color=color, lw=0.8)
        ax.scatter([x], [y], color=color, marker=kinds.get(f.kind, "o"), s=16)
        if f.kept:
            ax.scatter([x], [y], facecolors="none", edgecolors="k", s=70, lw=0.8)
    for g in task.scene.goals:
        gx, gy = g.pose.pos[:2]
        gyaw = float(quat_yaw(np.asarray(g.pose.quat)))
        ax.plot([gx, gx + 0.03 * math.cos(gyaw)], [gy, gy + 0.03 * math.sin(gyaw)], color="g", lw=2)
        ax.scatter([gx], [gy], color="g", marker="*", s=150, label="goal")
    for kind, marker in kinds.items():
        ax.scatter([], [], color="0.3", marker=marker, label=kind)
    s = report.summary()
    title = f"{s['failures']} failure states in {s['mined_episodes']} episodes; {s['starts_written']} kept (ringed)"
    ax.set(xlabel="x (m)", ylabel="y (m)", aspect="equal", title=title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
