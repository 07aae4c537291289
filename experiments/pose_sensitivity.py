"""How precisely must a policy know where the object is? Two measurements (docs/decisions.md, "Flow policy").

`state CHECKPOINT`: a state policy evaluated offline on a start set while Gaussian noise (σ_xy m per axis,
σ_yaw rad) is added to the object pose it *observes* (the twin itself is untouched): success against noise.

`head CHECKPOINT`: an image policy trained with the auxiliary object-pose head (`train --aux-object`): the head's
position and yaw error against the truth on training and validation frames of its dataset (cached images), and in
closed loop (images the environment renders while the policy acts). The head is training-only; this reads it to
see what the encoder knows, never to act.

`composed STATE_CHECKPOINT IMAGE_CHECKPOINT`: the state policy acting on the pose the image policy's head reads
from the wrist images the environment renders (what `ModelConfig.via_pose` builds into one policy; this composes
two separately trained ones to see whether it can work).

    python experiments/pose_sensitivity.py state runs/x/checkpoints/step_0020000.pt --sigma-xy 0.005 --sigma-yaw 0.02
    python experiments/pose_sensitivity.py head runs/w/checkpoints/step_0006000.pt --data data/pusht60dfar

All judge on ground truth; `state` and `head` read the twin's true object pose (not deployable); `composed`
acts on images and q only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tyro

from realissim.data.reader import Dataset
from realissim.envs import BatchEnv, EnvConfig
from realissim.eval.episode import run_episodes
from realissim.eval.stats import rate_text
from realissim.geometry import quat_yaw
from realissim.learn.checkpoint import load_checkpoint
from realissim.learn.flow_policy import FlowPolicy
from realissim.learn.observations import state_vector
from realissim.policy import ActionChunk, Observation, Policy
from realissim.spec.state import StartState
from realissim.tasks import Task, make, start_set

log = logging.getLogger("pose_sensitivity")


def _yaw_quats(yaw: np.ndarray) -> np.ndarray:
    """Quaternions (..., 4) wxyz of rotations by `yaw` (...) rad about world z."""
    zero = np.zeros_like(yaw)
    return np.stack([np.cos(yaw / 2), zero, zero, np.sin(yaw / 2)], axis=-1)


def _successes(task: Task, starts: Sequence[StartState], envs: int, seconds: float, config: EnvConfig,
               policy_for: Callable[[int], Policy]) -> int:  # fmt: skip
    """Ground-truth successes of the policy `policy_for(i)` over `starts` in batches of `envs` (i: the batch's
    first start, also its seed)."""
    successes = 0
    for i in range(0, len(starts), envs):
        batch = starts[i : i + envs]
        results = run_episodes(BatchEnv(task, len(batch), config), policy_for(i), batch, seconds, seed=i)
        successes += sum(r.success for r in results)
    return successes


class NoisyPose:
    """A policy that acts on observations whose object poses carry Gaussian noise (σ_xy m, σ_yaw rad)."""

    def __init__(self, inner: FlowPolicy, sigma_xy: float, sigma_yaw: float, seed: int) -> None:
        self.inner, self.sigma_xy, self.sigma_yaw = inner, sigma_xy, sigma_yaw
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        self.inner.reset()

    def act(self, obs: Observation) -> ActionChunk:
        pos = np.array(obs.object_pos, dtype=np.float64)
        pos[..., :2] += self.rng.normal(0.0, self.sigma_xy, pos[..., :2].shape)
        yaw = quat_yaw(obs.object_quat) + self.rng.normal(0.0, self.sigma_yaw, pos.shape[:-1])
        return self.inner.act(dataclasses.replace(obs, object_pos=pos, object_quat=_yaw_quats(yaw)))


@dataclass
class State:
    """Success of a state policy against noise on the object pose it observes."""

    checkpoint: tyro.conf.Positional[Path]
    sigma_xy: float = 0.005
    """Noise on x and y, m (standard deviation)."""
    sigma_yaw: float = 0.02
    """Noise on yaw, rad."""
    starts: str = "pusht/select-v1"
    limit: int | None = None
    """Only the first N starts."""
    envs: int = 25
    seconds: float = 60.0

    def run(self) -> None:
        task = make(self.starts.split("/")[0])
        policy = FlowPolicy.load(self.checkpoint, obs="state", scene=task.scene)
        starts = start_set(self.starts)[: self.limit]
        successes = _successes(task, starts, self.envs, self.seconds, policy.env_config(),
                               lambda i: NoisyPose(policy, self.sigma_xy, self.sigma_yaw, seed=i))  # fmt: skip
        log.info("σ_xy %.4f m, σ_yaw %.3f rad: %s", self.sigma_xy, self.sigma_yaw, rate_text(successes, len(starts)))


def _errors(pred: np.ndarray, truth: np.ndarray) -> str:
    """Median and p90 of the planar position error (mm) and yaw error (deg) of poses (N, 4) (x, y, sin, cos)."""
    xy = np.linalg.norm(pred[:, :2] - truth[:, :2], axis=1) * 1000.0
    d = np.arctan2(pred[:, 2], pred[:, 3]) - np.arctan2(truth[:, 2], truth[:, 3])
    yaw = np.degrees(np.abs((d + np.pi) % (2 * np.pi) - np.pi))
    return (f"n {len(xy)}: position {np.median(xy):.1f} mm median (p90 {np.percentile(xy, 90):.1f}), "
            f"yaw {np.median(yaw):.1f}° (p90 {np.percentile(yaw, 90):.1f})")  # fmt: skip


@dataclass
class Head:
    """The auxiliary pose head's error: teacher-forced on dataset frames, and in closed loop."""

    checkpoint: tyro.conf.Positional[Path]
    data: Path
    """The dataset the policy was trained on (its validation episodes are read from the checkpoint)."""
    starts: str = "pusht/select-v1"
    envs: int = 10
    seconds: float = 30.0
    every: int = 10
    """Dataset frames: every N-th."""

    def run(self) -> None:
        task = make(self.starts.split("/")[0])
        policy = FlowPolicy.load(self.checkpoint, scene=task.scene)
        model = policy.model
        if model.aux_head is None:
            raise SystemExit(f"{self.checkpoint}: trained without the auxiliary pose head (--aux-object)")

        def predict(inputs: dict[str, np.ndarray]) -> np.ndarray:
            with torch.no_grad():
                return model.estimate_pose({k: torch.from_numpy(np.asarray(v)) for k, v in inputs.items()}).numpy()

        meta, _ = load_checkpoint(self.checkpoint)
        dataset = Dataset(self.data)
        val = set(meta["dataset"]["val_episodes"])
        for label, episodes in (("training", [e for e in dataset.episodes if e.index not in val][:3]),
                                ("validation", [e for e in dataset.episodes if e.index in val][:3])):  # fmt: skip
            inputs = model.encoder.dataset_inputs(dataset, episodes)
            rows = np.arange(0, len(inputs["q"]), self.every)
            pred = predict({k: v[rows] for k, v in inputs.items()})
            log.info("%s episodes %s, cached images: %s", label, [e.index for e in episodes],
                     _errors(pred, inputs["object"][rows]))  # fmt: skip

        pred_rows: list[np.ndarray] = []
        truth_rows: list[np.ndarray] = []

        class Reading:
            def reset(self) -> None:
                policy.reset()

            def act(self, obs: Observation) -> ActionChunk:
                pred_rows.append(predict(model.encoder.observation_inputs(obs)))
                state = state_vector(np.asarray(obs.q), np.asarray(obs.object_pos), np.asarray(obs.object_quat))
                truth_rows.append(state[:, model.encoder.joints :])
                return policy.act(obs)

        starts = start_set(self.starts)[: self.envs]
        results = run_episodes(
            BatchEnv(task, len(starts), policy.env_config()), Reading(), starts, self.seconds, seed=0
        )
        log.info("closed loop, %d starts of %s (%.0f s): %s", len(starts), self.starts, self.seconds,
                 _errors(np.concatenate(pred_rows), np.concatenate(truth_rows)))  # fmt: skip
        log.info("closed loop, first chunk: %s; successes %d of %d", _errors(pred_rows[0], truth_rows[0]),
                 sum(r.success for r in results), len(results))  # fmt: skip


@dataclass
class Composed:
    """A state policy acting on the object pose an image policy's auxiliary head reads from its images (the head
    as a pose estimator): how far a pose estimate of that quality carries the state policy."""

    state_checkpoint: tyro.conf.Positional[Path]
    image_checkpoint: tyro.conf.Positional[Path]
    starts: str = "pusht/select-v1"
    limit: int | None = None
    envs: int = 25
    seconds: float = 60.0

    def run(self) -> None:
        task = make(self.starts.split("/")[0])
        state = FlowPolicy.load(self.state_checkpoint, obs="state", scene=task.scene)
        image = FlowPolicy.load(self.image_checkpoint, scene=task.scene)
        model = image.model
        if model.aux_head is None:
            raise SystemExit(f"{self.image_checkpoint}: trained without the auxiliary pose head (--aux-object)")

        class Estimated:
            def reset(self) -> None:
                state.reset()

            @torch.no_grad()
            def act(self, obs: Observation) -> ActionChunk:
                inputs = model.encoder.observation_inputs(obs)
                pose = model.estimate_pose({k: torch.from_numpy(np.asarray(v)) for k, v in inputs.items()}).numpy()
                planar = pose.astype(np.float64).reshape(len(pose), -1, 4)  # (B, K, 4): x, y, sin, cos
                pos = np.array(obs.object_pos, dtype=np.float64)
                pos[..., :2] = planar[..., :2]
                quat = _yaw_quats(np.arctan2(planar[..., 2], planar[..., 3]))
                return state.act(dataclasses.replace(obs, object_pos=pos, object_quat=quat))

        starts = start_set(self.starts)[: self.limit]
        successes = _successes(task, starts, self.envs, self.seconds, image.env_config(), lambda i: Estimated())
        log.info("state policy on the head's pose: %s", rate_text(successes, len(starts)))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tyro.extras.subcommand_cli_from_dict({"state": State, "head": Head, "composed": Composed}).run()


if __name__ == "__main__":
    main()
