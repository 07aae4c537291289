"""Failure mining and expert relabelling (issue 62): labels stored with their frames and trained on; the labeller's
plan following; a DAgger round end to end and its resume; failure states found, clustered, chosen and written as a
start set the collector and the evaluation take."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from realissim.apps.mine import Failure, MineConfig, Trajectory, as_start, choose, cluster, find_failures, planar_gap
from realissim.cli.main import main
from realissim.data.recorder import EpisodeRecorder, meta_for_env
from realissim.data.schema import RELABEL_KEY, DatasetError
from realissim.data.store import Dataset, DatasetWriter
from realissim.envs import Env
from realissim.eval.episode import EpisodeResult, run_episode
from realissim.expert.pusht import PushTExpert
from realissim.geometry import quat_yaw, yaw_quat
from realissim.learn.config import ModelConfig, TrainConfig
from realissim.learn.dagger import DaggerConfig, ExpertLabeller, padded_label, run_dagger
from realissim.learn.dataset import build_samples, label_targets, training_episodes
from realissim.learn.flow import flow_loss
from realissim.learn.observations import make_encoder
from realissim.learn.train import TrainResult, train
from realissim.policy import ActionChunk
from realissim.spec.scene import Pose
from realissim.spec.state import StartState
from realissim.tasks import Task, make, read_start_file
from test_data_store import make_episode, make_meta

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def task() -> Task:
    return make("pusht")


# --- labels in the store and in training ----------------------------------------------------------------------


def test_label_targets_resample_the_experts_chunk_and_hold_its_last_waypoint() -> None:
    label = np.zeros((1, 4, 2), np.float32)
    label[0, :, 0] = [1.0, 2.0, 3.0, 4.0]  # at 0.25, 0.5, 0.75, 1.0 s
    out = label_targets(label, 1.0, 2.0, 8)  # asked at 0.25 … 2.0 s
    assert out.shape == (1, 8, 3)
    np.testing.assert_allclose(out[0, :4, 0], [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(out[0, 4:, 0], 4.0)  # (held past the label's horizon)
    assert np.all(out[..., -1] == 0.0)  # (progress unknown)


def test_a_short_chunk_is_padded_on_the_label_grid_and_an_off_grid_one_refused() -> None:
    chunk = ActionChunk(np.arange(6, dtype=float).reshape(3, 2), np.zeros(3), horizon=3 / 32)
    out = padded_label(chunk, 32, 1.0)
    assert out.shape == (32, 2) and np.all(out[2:] == out[2])
    with pytest.raises(ValueError, match="not on the grid"):
        padded_label(ActionChunk(np.zeros((3, 2)), np.zeros(3), horizon=0.5), 32, 1.0)


def test_labels_are_stored_and_only_the_labelled_frames_of_a_failed_rollout_train(task: Task, tmp_path: Path) -> None:
    """A relabelled rollout that failed still trains, on its labelled frames only, each with the expert's chunk
    and no progress loss; an unmarked failed episode does not train; labels given without their mask are refused."""
    meta = make_meta(task.scene)
    demo, rollout, failed = (make_episode(meta, n, seed) for n, seed in ((40, 0), (30, 1), (20, 2)))
    mask = np.zeros(30, bool)
    mask[[3, 10, 11]] = True
    label = np.zeros((30, 32, 7), np.float32)
    label[mask] = 0.5
    rollout = dataclasses.replace(rollout, label_mask=mask, label_q=label)
    start = StartState.of_scene(task.scene)
    with DatasetWriter(tmp_path / "ds", meta) as writer:
        writer.append(demo, success=True, start=start)
        writer.append(rollout, success=False, start=start,
                      extra={RELABEL_KEY: {"horizon": 1.0, "waypoints": 32, "round": 1}})  # fmt: skip
        writer.append(failed, success=False, start=start)
        with pytest.raises(ValueError, match="label_q: missing while label_mask"):
            writer.append(dataclasses.replace(demo, label_mask=mask[:1].repeat(40)), success=True, start=start)
    dataset = Dataset(tmp_path / "ds")
    assert [e.index for e in training_episodes(dataset)] == [0, 1]
    stored = dataset.episode(1)
    np.testing.assert_array_equal(stored.label_mask, mask)
    samples = build_samples(dataset, make_encoder("state", task.scene), training_episodes(dataset), 1.0, 32)
    assert len(samples) == 40 + 3
    relabelled = samples.episode == 1
    assert relabelled.sum() == 3 and np.all(samples.actions[relabelled][..., :7] == 0.5)
    assert np.all(samples.progress_weight[relabelled] == 0) and np.all(samples.progress_weight[~relabelled] == 1)


def test_a_zero_weight_carries_no_loss() -> None:
    """The weighted flow loss ignores a column of weight 0 whatever its targets, and equals the plain loss at 1."""
    torch.manual_seed(0)
    actions = torch.randn(4, 8, 3)
    cond = torch.randn(4, 5)

    def velocity(x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return 0.3 * x

    weight = torch.ones(4, 1, 3)
    weight[:, 0, -1] = 0.0
    other = actions.clone()
    other[..., -1] = 100.0
    from realissim.learn.config import FlowConfig

    loss = [flow_loss(velocity, a, cond, FlowConfig(), torch.Generator().manual_seed(1), weight)
            for a in (actions, other)]  # fmt: skip
    assert torch.allclose(loss[0], loss[1])
    plain = flow_loss(velocity, actions, cond, FlowConfig(), torch.Generator().manual_seed(1))
    ones = flow_loss(velocity, actions, cond, FlowConfig(), torch.Generator().manual_seed(1), torch.ones(4, 1, 3))
    assert torch.allclose(plain, ones)


# --- the labeller ------------------------------------------------------------------------------------------------


def near_goal_start(task: Task, dx: float = -0.04) -> StartState:
    scene = task.scene
    goal = scene.goals[0].pose
    yaw = float(quat_yaw(np.asarray(goal.quat))) + 0.1
    pose = Pose((goal.pos[0] + dx, goal.pos[1], scene.objects[0].pose.pos[2]), yaw_quat(yaw))
    return StartState((pose,), tuple(scene.robot.home))


def test_the_labeller_follows_the_experts_plan_and_decides_again_only_when_due(task: Task) -> None:
    """On the arm the plan expects, every frame is labelled from one decision; an arm far off the plan gets a fresh
    decision only once `decide_every` has passed (no label in between)."""
    env = Env(task)
    obs = env.reset(near_goal_start(task))
    labeller = ExpertLabeller(PushTExpert(task.scene), decide_every=0.5)
    labeller.reset()
    first = labeller.label(obs)
    assert first is not None and labeller.decisions == 1
    for k in range(1, 10):  # the arm where the plan has it
        t = k / 32
        on_plan = dataclasses.replace(obs, time=np.asarray(t), q=first.q_des[k - 1])
        assert labeller.label(on_plan) is not None
    assert labeller.decisions == 1
    off = dataclasses.replace(obs, time=np.asarray(0.3), q=np.asarray(task.scene.robot.home) + 0.3)
    assert labeller.label(off) is None and labeller.decisions == 1
    late = dataclasses.replace(off, time=np.asarray(0.6))
    assert labeller.label(late) is not None and labeller.decisions == 2


# --- a tiny policy, a DAgger round, mining ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(task: Task, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "ds"
    env = Env(task)
    with DatasetWriter(path, meta_for_env(env, "expert")) as writer:
        run_episode(env, PushTExpert(task.scene), near_goal_start(task), 15.0, [EpisodeRecorder(writer)])
    assert Dataset(path).episodes
    return path


@pytest.fixture(scope="module")
def policy(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> TrainResult:
    config = TrainConfig(model=ModelConfig(network=dataclasses.replace(ModelConfig().network, channels=(16, 32))),
                         steps=40, batch_size=16, warmup_steps=5, val_fraction=0.0, checkpoint_every=40,
                         progress=False)  # fmt: skip
    return train(config, demo, tmp_path_factory.mktemp("run") / "run")


def test_a_dagger_round_labels_rollouts_fine_tunes_and_resumes(policy: TrainResult, demo: Path, tmp_path: Path) -> None:
    config = DaggerConfig(rounds=1, rollouts=2, envs=2, decide_every=0.5, train_steps=10, max_seconds=1.5,
                          threads=1, progress=False)  # fmt: skip
    out = tmp_path / "dagger"
    report = run_dagger(config, policy.checkpoint, demo, out)
    record = report.rounds[0]
    assert record.rollouts == 2 and record.decisions >= 2 and 0 < record.labelled_frames <= record.frames
    aggregate = Dataset(out / "data", include_failed=True)
    relabelled = [e for e in aggregate.all_episodes if RELABEL_KEY in e.extra]
    demos = len(Dataset(demo, include_failed=True).all_episodes)
    assert len(relabelled) == 2 and len(aggregate.all_episodes) == demos + 2
    assert sum(e.extra[RELABEL_KEY]["labelled_frames"] for e in relabelled) == record.labelled_frames
    from realissim.data.info import describe

    line = f"relabelled 2 policy rollouts (rounds 1), {record.labelled_frames} frames labelled"
    assert line in describe(out / "data")
    journal = json.loads((out / "dagger.json").read_text())
    assert journal["policy"] == report.policy and Path(report.policy).exists()
    from realissim.learn.checkpoint import load_checkpoint

    meta, _ = load_checkpoint(report.policy)
    assert meta["init_from"]["path"] == str(policy.checkpoint) and meta["dataset"]["train_frames"] > 0
    again = run_dagger(config, policy.checkpoint, demo, out)  # resumed: nothing left to do
    assert again.rounds[0].checkpoint == record.checkpoint
    assert len(Dataset(out / "data", include_failed=True).all_episodes) == len(aggregate.all_episodes)


def test_init_from_refuses_another_model(policy: TrainResult, demo: Path, tmp_path: Path) -> None:
    from realissim.learn.checkpoint import CheckpointError

    config = TrainConfig(steps=2, val_fraction=0.0, progress=False, init_from=str(policy.checkpoint))
    with pytest.raises(CheckpointError, match="init_from differs"):
        train(config, demo, tmp_path / "run")


def trajectory(coverage: list[float], dt: float = 0.1) -> Trajectory:
    n = len(coverage)
    quat = np.array([[1.0, 0.0, 0.0, 0.0]])
    return Trajectory(
        time=[i * dt for i in range(n)],
        object_pos=[np.array([[0.1 + 0.001 * i, 0.0, 0.0175]]) for i in range(n)],
        object_quat=[quat for _ in range(n)],
        q=[np.zeros(7) for _ in range(n)],
        coverage=list(coverage),
    )


def test_failures_are_stalls_regressions_and_the_end_of_a_failed_episode() -> None:
    config = MineConfig(stall_window=1.0, stall_gain=0.02, regress_window=0.5, regress_drop=0.05)
    rising = list(np.linspace(0.0, 0.9, 20))
    cov = rising + [0.9] * 15 + [0.8] + list(np.linspace(0.8, 0.85, 10))  # progress, a stall, a fall, a crawl
    start = StartState.from_arrays(np.zeros((1, 3)), np.array([[1.0, 0, 0, 0]]), np.zeros(7))
    failed = EpisodeResult(start=start, success=False)
    found = find_failures(trajectory(cov), failed, 0, config, mined=True)
    kinds = [f.kind for f in found]
    assert kinds.count("end") == 1 and found[-1].time == pytest.approx(4.5)
    stalls = [f.time for f in found if f.kind == "stall"]
    assert stalls and stalls[0] == pytest.approx(1.9) and all(t >= 1.9 - 1e-9 for t in stalls)
    falls = [f.time for f in found if f.kind == "regress"]
    assert falls and all(2.95 < t < 3.55 for t in falls)  # (within the window before the fall at 3.5 s)
    steady = find_failures(trajectory(rising), EpisodeResult(start=start, success=True, success_time=1.95), 0, config,
                           mined=True)  # fmt: skip
    assert steady == []  # (steady progress, solved: nothing went wrong)
    assert find_failures(trajectory(cov), failed, 0, config, mined=False) == []


def test_the_chosen_starts_cover_every_cluster_in_proportion() -> None:
    rng = np.random.default_rng(0)
    failures = []
    for centre, n in (((0.1, 0.1), 30), ((-0.1, 0.1), 8), ((0.0, -0.15), 2)):
        for _ in range(n):
            pos = np.array([[centre[0] + rng.normal(0, 0.005), centre[1] + rng.normal(0, 0.005), 0.0175]])
            failures.append(Failure("stall", 0, 0.0, 0.1, pos, np.array([[1.0, 0, 0, 0]]), np.zeros(7)))
    cluster(failures, MineConfig(clusters=3))
    assert len({f.cluster for f in failures}) == 3
    chosen = choose(failures, 10, seed=0)
    sizes = sorted(sum(f.cluster == c for f in chosen) for c in {f.cluster for f in chosen})
    assert len(chosen) == 10 and sizes == [1, 2, 7]  # (30:8:2 of 10 → 7.5, 2, 0.5 → at least one each)
    two = choose(failures, 2, seed=0)  # (fewer starts than clusters: one from each of the largest two)
    assert len(two) == 2 and sorted(sum(f.cluster == g.cluster for f in failures) for g in two) == [8, 30]


def test_a_mined_start_keeps_a_clear_arm_and_sends_one_touching_the_object_home(task: Task) -> None:
    from realissim.twin.kinematics import PusherIK

    scene = task.scene
    t = scene.objects[0]
    goal = scene.goals[0].pose
    pos = np.array([[goal.pos[0] - 0.05, goal.pos[1], t.pose.pos[2]]])
    quat = np.array([np.asarray(yaw_quat(0.7))])
    ik = PusherIK(scene)
    on_top = ik.solve(np.array([pos[0, 0], pos[0, 1], 0.015]), np.asarray(scene.robot.home, dtype=float))
    away = ik.solve(np.array([pos[0, 0], pos[0, 1] + 0.2, 0.015]), np.asarray(scene.robot.home, dtype=float))
    assert planar_gap(t, pos[0], quat[0], ik.tip_position(on_top)) == 0.0
    assert planar_gap(t, pos[0], quat[0], ik.tip_position(away)) > 0.05
    home = as_start(Failure("stall", 0, 0.0, 0.2, pos, quat, on_top), task, 0.02)
    kept = as_start(Failure("stall", 0, 0.0, 0.2, pos, quat, away), task, 0.02)
    assert home is not None and np.allclose(home.q, scene.robot.home)
    assert kept is not None and np.allclose(kept.q, away)
    standing = np.array([[math.cos(0.6), math.sin(0.6), 0.0, 0.0]])  # (turned 1.2 rad about x: on its side)
    assert as_start(Failure("end", 0, 0.0, 0.0, pos, standing, away), task, 0.02) is None


def test_realissim_mine_writes_a_start_set_the_collector_takes(
    policy: TrainResult, demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mined"
    code = main(["mine", str(policy.checkpoint), "--count", "4", "--envs", "4", "--max-seconds", "3", "--keep", "3",
                 "--data", str(demo), "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    header = read_start_file(out / "mined.json", make("pusht"))
    summary = json.loads((out / "summary.json").read_text())
    assert 1 <= header.count <= 3 and summary["starts_written"] == header.count
    assert summary["failures"] >= summary["mined_episodes"] >= 1  # (a barely trained policy fails; each leaves ≥ 1)
    assert (out / "failures.png").exists() and (out / "eval" / "results.json").exists()
    rows = (out / "failures.csv").read_text().splitlines()
    assert len(rows) == summary["failures"] + 1 and sum(r.endswith(",1") for r in rows[1:]) == header.count


def test_mine_refuses_a_bad_checkpoint_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main(["mine", str(bad), "--count", "1", "--out", str(tmp_path / "m")]) != 0
    assert "bad.pt" in capsys.readouterr().err


def test_a_dataset_with_nothing_to_train_names_relabelled_episodes(task: Task, tmp_path: Path) -> None:
    meta = make_meta(task.scene)
    with DatasetWriter(tmp_path / "ds", meta) as writer:
        writer.append(make_episode(meta, 5), success=False, start=StartState.of_scene(task.scene))
    with pytest.raises(DatasetError, match="no successful or relabelled episodes"):
        train(TrainConfig(steps=1, progress=False), tmp_path / "ds", tmp_path / "run")
