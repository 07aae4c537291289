"""Image representations of the flow policy: the render cache (equal to what the environment renders, rebuilt
when the dataset, camera or size changes), image policies that train and act in a batch of environments,
and the clear errors of a representation without its images."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from realissim.data.recorder import EpisodeRecorder, meta_for_env
from realissim.data.schema import DatasetError
from realissim.data.store import Dataset, DatasetWriter
from realissim.envs import BatchEnv, Env, EnvConfig
from realissim.eval.episode import EpisodeObserver, run_episode
from realissim.expert.pusht import PushTExpert
from realissim.learn.checkpoint import CheckpointError
from realissim.learn.config import ModelConfig, TrainConfig, UNetConfig, VisionConfig
from realissim.learn.flow_policy import FlowPolicy
from realissim.learn.image_cache import RenderCache
from realissim.learn.train import train
from realissim.tasks import Task, make

SIZE = (32, 32)
"""Small images keep rendering and training fast here."""


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def task() -> Task:
    return make("pusht")


class LastImage(EpisodeObserver):
    """Keeps the environment's observation (its wrist image) after the last frame."""

    def on_end(self, result: object) -> None:
        self.image = self.env.observe().images["wrist"]

    def on_reset(self, env: object, observation: object) -> None:
        self.env = env


def record(task: Task, path: Path, seconds: float, seed: int) -> np.ndarray:
    """An expert episode of `seconds` (stored, failed: too short to succeed) into the dataset at `path`; the
    environment's own wrist image after its last frame."""
    env = Env(task, EnvConfig(cameras=("wrist",), image_size=SIZE))
    last = LastImage()
    with DatasetWriter(path, meta_for_env(env, "expert")) as writer:
        run_episode(env, PushTExpert(task.scene), None, seconds, [EpisodeRecorder(writer), last], seed=seed)
    return last.image


def test_the_render_cache_equals_the_environments_images_and_is_rebuilt_when_anything_changes(
    task: Task, tmp_path: Path
) -> None:
    path = tmp_path / "ds"
    seen = record(task, path, 0.5, seed=1)
    dataset = Dataset(path, include_failed=True)
    cache = RenderCache(dataset, "wrist", SIZE, progress=False)
    assert cache.images.shape == (30, 32, 32, 3)
    assert np.array_equal(cache.rows(0)[-1], seen)  # what the policy would have seen at that frame
    built = os.stat(cache.path).st_mtime_ns
    again = RenderCache(Dataset(path, include_failed=True), "wrist", SIZE, progress=False)
    assert os.stat(again.path).st_mtime_ns == built and np.array_equal(again.images, cache.images)  # reused
    record(task, path, 0.25, seed=2)  # the dataset changes: one more episode
    grown = RenderCache(Dataset(path, include_failed=True), "wrist", SIZE, progress=False)
    assert grown.images.shape[0] == 45 and np.array_equal(grown.rows(0), cache.rows(0))
    assert not np.array_equal(grown.rows(1)[0], grown.rows(0)[0])
    other = RenderCache(Dataset(path, include_failed=True), "wrist", (48, 32), progress=False)
    assert other.images.shape == (45, 32, 48, 3) and other.path != grown.path
    front = RenderCache(Dataset(path, include_failed=True), "front", SIZE, progress=False)
    assert not np.array_equal(front.images, grown.images)


def test_a_rebuild_removes_the_images_a_killed_build_left(task: Task, tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "ds"
    record(task, path, 0.25, seed=3)
    child = subprocess.Popen(["true"])  # a process that has ended and been reaped: as a killed build's
    child.wait()
    folder = path / ".cache"
    folder.mkdir()
    stem = f".render-wrist-{SIZE[0]}x{SIZE[1]}.npy"
    dead = folder / f"{stem}.{child.pid}.tmp.npy"
    alive = folder / f"{stem}.{os.getpid()}.tmp.npy"  # a build still running (this process)
    for leftover in (dead, alive):
        leftover.write_bytes(b"x" * 100)
    RenderCache(Dataset(path, include_failed=True), "wrist", SIZE, progress=False)
    assert not dead.exists() and alive.exists()


def image_config(obs: str) -> TrainConfig:
    model = ModelConfig(
        obs=obs,  # type: ignore[arg-type]
        image_size=SIZE,
        vision=VisionConfig(widths=(8, 16), blocks=1, keypoints=4, features=8, crop=28),
        network=UNetConfig(channels=(16, 32), time_dim=16),
    )
    return TrainConfig(model=model, steps=6, batch_size=4, val_fraction=0.0, checkpoint_every=6, progress=False)


@pytest.fixture(scope="module")
def image_data(task: Task, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset of two short expert episodes, stored as successful (training reads only those)."""
    folder = tmp_path_factory.mktemp("img")
    record(task, folder / "raw", 0.5, seed=3)
    record(task, folder / "raw", 0.5, seed=4)
    raw = Dataset(folder / "raw", include_failed=True)
    with DatasetWriter(folder / "ds", raw.meta) as writer:
        for info in raw.all_episodes:
            writer.append(raw.episode(info.index), success=True, start=info.start, seed=info.seed)
    assert len(Dataset(folder / "ds").episodes) == 2
    return folder / "ds"


@pytest.mark.parametrize("obs", ["wrist", "static"])
def test_an_image_policy_trains_and_acts_in_a_batch_of_environments(
    obs: str, task: Task, image_data: Path, tmp_path: Path
) -> None:
    """The wrist policy with its keypoints lifted onto the table and the fusion MLP (`wrist_lift`,
    `image_hidden`); the static one without."""
    config = image_config(obs)
    if obs == "wrist":
        config = dataclasses.replace(
            config, model=dataclasses.replace(config.model, wrist_lift=True, image_hidden=(16,))
        )
    result = train(config, image_data, tmp_path / "run")
    assert len(result.losses) == 6 and np.all(np.isfinite(result.losses))
    assert result.model.encoder.feature_dim == 8 + 7 + (2 * 4 + 16 if obs == "wrist" else 0)
    policy = FlowPolicy.load(result.checkpoint, obs=obs, scene=task.scene)
    config = policy.env_config()
    assert config.cameras == (("wrist",) if obs == "wrist" else ("front",)) and config.image_size == SIZE
    observation = BatchEnv(task, 2, config).reset(seed=0)
    chunk = policy.act(observation)
    assert chunk.q_des.shape == (2, 32, 7) and np.all(np.isfinite(chunk.q_des))
    again = FlowPolicy.load(result.checkpoint)
    policy.reset(), again.reset()
    assert np.array_equal(again.act(observation).q_des, policy.act(observation).q_des)
    with pytest.raises(CheckpointError, match=f"trained on '{obs}' observations, not 'state'"):
        FlowPolicy.load(result.checkpoint, obs="state")
    blind = dataclasses.replace(observation, images={})
    with pytest.raises(ValueError, match=r"observation\.images: no '(wrist|front)' image"):
        policy.act(blind)


def test_the_real_representation_needs_recorded_real_frames(image_data: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"no real 'front' frames recorded .*only online"):
        train(image_config("real"), image_data, tmp_path / "run")


def test_max_episodes_trains_on_the_first_successful_episodes_only(image_data: Path, tmp_path: Path) -> None:
    from realissim.learn.checkpoint import load_checkpoint

    model = ModelConfig(network=UNetConfig(channels=(16, 32), time_dim=16))
    config = TrainConfig(model=model, steps=2, batch_size=4, val_fraction=0.0, max_episodes=1, progress=False)
    meta, _ = load_checkpoint(train(config, image_data, tmp_path / "run").checkpoint)
    assert meta["dataset"]["train_episodes"] == [0] and meta["dataset"]["train_frames"] == 30
    with pytest.raises(ValueError, match="max_episodes"):
        TrainConfig(max_episodes=0)


def test_the_auxiliary_pose_loss_trains_a_head_that_reads_the_object_pose_from_the_features(
    task: Task, image_data: Path, tmp_path: Path
) -> None:
    from realissim.learn.dataset import build_samples
    from realissim.learn.train import validation_loss

    """With the encoder's fusion MLP (`image_hidden`) too, whose features the head reads with the rest. (300 steps:
    at 150 the head reached 0.70 of the baseline on the compiled IK's demonstrations, 0.07 at 300.)"""
    base = image_config("static")
    config = dataclasses.replace(
        base, model=dataclasses.replace(base.model, aux_object=1.0, image_hidden=(32,)), steps=300, lr=3e-3,
        warmup_steps=10, checkpoint_every=300, val_samples=256,
    )  # fmt: skip
    result = train(config, image_data, tmp_path / "run")
    assert result.model.encoder.feature_dim == 8 + 7 + 32  # image features, q, the MLP's
    dataset = Dataset(image_data)
    samples = build_samples(dataset, result.model.encoder, dataset.episodes, 1.0, 32)
    assert samples.inputs["object"].shape == (len(samples), 4)
    # The two episodes start the T at different poses: predicting their mean scores ~1 in normalised units².
    truth = result.model.aux_norm.normalize(torch.from_numpy(samples.inputs["object"]))
    baseline = float(torch.mean((truth - truth.mean(0)) ** 2))
    learned = validation_loss(result.model, samples, config, "object")
    assert baseline > 0.3 and learned < 0.2 * baseline
    # Acting needs no pose: the head is training-only.
    policy = FlowPolicy.load(result.checkpoint, scene=task.scene)
    assert policy.config.image_hidden == (32,)
    chunk = policy.act(BatchEnv(task, 2, policy.env_config()).reset(seed=0))
    assert np.all(np.isfinite(chunk.q_des))
    with pytest.raises(ValueError, match="only for image representations"):
        ModelConfig(obs="state", aux_object=1.0)


def test_lifted_wrist_keypoints_land_where_the_wrist_camera_sees_them(task: Task) -> None:
    """Points on the objects' plane, projected into the wrist camera the environment renders (posed from the
    twin's body poses), come back to their world (x, y) through `lift_pixels` at the camera pose computed from q
    alone; a ray that misses the plane stays finite."""
    from realissim.geometry import project_points
    from realissim.learn.lift import WristGeometry, lift_pixels
    from realissim.twin.physics import PhysicsConfig, build_model
    from realissim.views.virtual import WristCamera, WristMount, body_poses

    geometry = WristGeometry(task.scene, (96, 96))
    assert abs(geometry.plane - 0.035) < 1e-9  # the T's top face: centre 17.5 mm up, spheres of 17.5 mm
    model = build_model(task.scene, PhysicsConfig())
    rng = np.random.default_rng(0)
    home = np.asarray(task.scene.robot.home)
    q = home + rng.normal(0.0, 0.15, (4, len(home)))
    qpos = np.tile(model.qpos0, (len(q), 1))
    qpos[:, : len(home)] = q
    xpos, xquat = body_poses(model, qpos)
    X_WC = WristCamera(model, WristMount(), 96, 96).pose(xpos, xquat)
    camera = torch.from_numpy(geometry.camera_poses(q))
    for b in range(len(q)):
        assert np.allclose(camera[b, :3].numpy(), X_WC[b, :3, 3], atol=1e-5)
        eye, axis = X_WC[b, :3, 3], X_WC[b, :3, 2]
        centre = eye + axis * (geometry.plane - eye[2]) / axis[2]  # where the optical axis meets the plane
        points = np.array(
            [[centre[0] + dx, centre[1] + dy, geometry.plane] for dx in (-0.03, 0.02) for dy in (-0.02, 0.04)]
        )
        pixels, depth = project_points(points, geometry.K, X_WC[b])
        assert np.all(depth > 0)
        lifted = lift_pixels(torch.tensor(pixels[None], dtype=torch.float32), camera[b : b + 1],
                             torch.tensor(geometry.K, dtype=torch.float32), geometry.plane)  # fmt: skip
        assert np.allclose(lifted[0].numpy(), points[:, :2], atol=1e-4)
    up = torch.tensor([[[48.0, -5000.0]]])  # far above the image's top: a ray at or above the horizon
    assert torch.isfinite(lift_pixels(up, camera[:1], torch.tensor(geometry.K, dtype=torch.float32), 0.035)).all()
    with pytest.raises(ValueError, match="wrist_lift"):
        ModelConfig(obs="static", wrist_lift=True)


def test_the_torch_state_vector_equals_the_state_encoders(task: Task, image_data: Path) -> None:
    """`state_from_pose` (what a `via_pose` policy builds from its estimate) is the state policy's own vector for
    the recorded pose, and reads an unnormalised (sin, cos) pair as the yaw it encodes."""
    from realissim.learn.observations import StateEncoder, state_from_pose
    from realissim.twin.kinematics import PusherIK

    encoder = StateEncoder(7, 1, PusherIK(task.scene))
    dataset = Dataset(image_data)
    expected = encoder.dataset_inputs(dataset, dataset.episodes)["state"]
    a = dataset.arrays(0)
    n = a["q"].shape[0]
    q = torch.from_numpy(np.concatenate([dataset.arrays(e.index)["q"][...] for e in dataset.episodes]))
    tip = torch.from_numpy(np.concatenate([dataset.arrays(e.index)["tip"][...] for e in dataset.episodes]))
    pose = torch.from_numpy(expected[:, 7:11].copy())
    got = state_from_pose(q, pose, tip).numpy()
    assert got.shape == expected.shape and np.allclose(got, expected, atol=1e-5)
    scaled = pose.clone()
    scaled[:, 2:] *= 3.0  # the same yaw, not unit length
    assert np.allclose(state_from_pose(q, scaled, tip).numpy(), expected, atol=1e-5)
    assert state_from_pose(q[:n], pose[:n], None).shape == (n, 11)


def test_a_via_pose_policy_acts_on_its_estimate_and_learns_the_actions_on_the_recorded_pose(
    task: Task, image_data: Path, tmp_path: Path
) -> None:
    """`via_pose`: training conditions the velocity network on the recorded pose (the flow loss's gradient does
    not reach the image trunk; the pose loss's does); acting and validation condition it on the head's estimate."""
    from realissim.learn.dataset import build_samples

    base = image_config("wrist")
    config = dataclasses.replace(
        base, model=dataclasses.replace(base.model, aux_object=1.0, via_pose=True, state_hidden=(16,)), steps=4
    )
    result = train(config, image_data, tmp_path / "run")
    model = result.model
    assert model.pose_state is not None
    assert model.pose_state.feature_dim == 7 + 4 + 3 + 2 + 16  # q, pose, tip world, tip in the T's frame; the MLP's
    dataset = Dataset(image_data)
    samples = build_samples(dataset, model.encoder, dataset.episodes, 1.0, 32)
    idx = np.arange(0, len(samples), 7)
    inputs = {k: torch.from_numpy(np.asarray(v[idx])) for k, v in samples.inputs.items()}
    actions, reference = torch.from_numpy(samples.actions[idx]), torch.from_numpy(samples.reference[idx])
    moved = dict(inputs, object=inputs["object"] + torch.tensor([0.05, -0.05, 0.0, 0.0]))

    model.requires_grad_(True)  # (the result holds the EMA weights, frozen)
    model.train()
    assert not torch.allclose(model.condition(inputs), model.condition(moved))  # teacher forcing
    model.zero_grad()
    model.loss_terms(inputs, actions, reference)["flow"].backward()
    assert all(p.grad is None or not p.grad.any() for p in model.encoder.trunk.parameters())
    assert model.velocity.parameters().__next__().grad is not None
    model.zero_grad()
    model.loss_terms(inputs, actions, reference)["object"].backward()
    assert any(p.grad is not None and p.grad.any() for p in model.encoder.trunk.parameters())

    model.eval()
    with torch.no_grad():
        acting = model.condition(inputs)
        assert torch.equal(acting, model.condition(moved))  # the recorded pose is never read when acting
        estimate = model.estimate_pose(inputs)
        assert torch.allclose(acting, model.condition(dict(inputs, object=estimate)))
    policy = FlowPolicy.load(result.checkpoint, obs="wrist", scene=task.scene)
    assert policy.config.via_pose
    chunk = policy.act(BatchEnv(task, 2, policy.env_config()).reset(seed=0))
    assert chunk.q_des.shape == (2, 32, 7) and np.all(np.isfinite(chunk.q_des))
    with pytest.raises(ValueError, match="aux_object > 0"):
        ModelConfig(obs="wrist", via_pose=True)
    with pytest.raises(ValueError, match="via_pose: only for image"):
        ModelConfig(obs="state", via_pose=True, aux_object=1.0)


def test_a_via_pose_policy_adopts_a_trained_state_policy_frozen(task: Task, image_data: Path, tmp_path: Path) -> None:
    """`policy_from`: the image policy takes the state policy's velocity network, state MLP and normalisers as
    they are and trains only its image encoder and pose head; a state policy of another config is refused."""
    from realissim.learn.checkpoint import load_checkpoint

    base = image_config("wrist")
    state_model = dataclasses.replace(base.model, obs="state", state_hidden=(16,), image_size=(96, 96))
    state = train(dataclasses.replace(base, model=state_model, steps=3), image_data, tmp_path / "state")
    _, tensors = load_checkpoint(state.checkpoint)
    wrist_model = dataclasses.replace(base.model, aux_object=1.0, via_pose=True, state_hidden=(16,))
    config = dataclasses.replace(base, model=wrist_model, steps=4, policy_from=str(state.checkpoint))
    result = train(config, image_data, tmp_path / "wrist")
    ema = result.model.state_dict()
    for key, value in tensors["ema"].items():
        if key.startswith("velocity."):
            assert torch.equal(ema[key], value), key
        elif key.startswith("encoder."):
            assert torch.equal(ema["pose_state." + key[len("encoder.") :]], value), key
    assert torch.equal(ema["state_norm.scale"], tensors["ema"]["obs_norm.state.scale"])
    first = train(dataclasses.replace(config, steps=1), image_data, tmp_path / "wrist1").model.state_dict()
    assert not torch.equal(first["aux_head.0.weight"], ema["aux_head.0.weight"])  # the head trained
    meta, _ = load_checkpoint(result.checkpoint)
    assert meta["policy_from"]["path"] == str(state.checkpoint) and meta["policy_from"]["step"] == 3
    policy = FlowPolicy.load(result.checkpoint, obs="wrist", scene=task.scene)
    assert np.all(np.isfinite(policy.act(BatchEnv(task, 2, policy.env_config()).reset(seed=0)).q_des))
    other = dataclasses.replace(config, model=dataclasses.replace(wrist_model, state_hidden=(8,)))
    with pytest.raises(CheckpointError, match=r"policy_from differs in model\.state_hidden"):
        train(other, image_data, tmp_path / "other")
    with pytest.raises(ValueError, match="policy_from: only for"):
        TrainConfig(model=state_model, policy_from=str(state.checkpoint))
    # The same state policy as if trained on another dataset of this scene: refused, unless asked for; and one
    # trained in another scene is refused even then.
    from realissim.learn.checkpoint import save_checkpoint

    meta, tensors = load_checkpoint(state.checkpoint)
    meta["dataset"]["fingerprint"] = "0" * 64
    foreign = save_checkpoint(tmp_path / "foreign.pt", meta, tensors)
    elsewhere = dataclasses.replace(config, policy_from=str(foreign))
    with pytest.raises(CheckpointError, match="trained on another dataset"):
        train(elsewhere, image_data, tmp_path / "foreign_refused")
    crossed = train(dataclasses.replace(elsewhere, policy_from_any_dataset=True), image_data, tmp_path / "crossed")
    crossed_state = crossed.model.state_dict()  # the foreign policy adopted as it is
    assert all(torch.equal(crossed_state[k], v) for k, v in tensors["ema"].items() if k.startswith("velocity."))
    assert load_checkpoint(crossed.checkpoint)[0]["policy_from"]["fingerprint"] == "0" * 64
    meta["scene"]["objects"][0]["mass"] = 2 * meta["scene"]["objects"][0]["mass"]
    heavier = save_checkpoint(tmp_path / "heavier.pt", meta, tensors)
    with pytest.raises(CheckpointError, match=r"another scene: .*scene\.objects"):
        train(dataclasses.replace(elsewhere, policy_from=str(heavier), policy_from_any_dataset=True), image_data,
              tmp_path / "heavier")  # fmt: skip
    with pytest.raises(ValueError, match="policy_from_any_dataset: only with policy_from"):
        TrainConfig(model=wrist_model, policy_from_any_dataset=True)
