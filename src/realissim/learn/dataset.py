"""Training samples from an episode store: for every frame of a successful episode, the observation inputs
at that frame and the chunk the policy should have returned there.

The target chunk of frame k (twin time t_k) holds, for i < m, the commanded joints q′ and the progress
label at t_k + (i + 1)·H/m — when waypoint i of a chunk asked for at t_k is due (`ActionChunk`). At 60 fps
with H = 1 s and m = 32 those times fall between frames, so both are interpolated linearly in time; past
the episode's end they hold its last values (the arm stays where the demonstration left it).

Relabelled episodes (`data.schema.RELABEL_KEY`: a policy's rollouts an expert labelled, DAgger) train on their
labelled frames only, whether or not the rollout succeeded: the target chunk of such a frame is the expert's chunk
there (`label_q`, resampled to the policy's waypoints), and its progress is unknown (the expert labels the joints,
not how far along a demonstration the state is), so the progress column of those samples carries no loss
(`ChunkSamples.progress_weight` 0).

Episodes, not frames, are split into training and validation, so no validation frame has a near-duplicate
neighbour in the training set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from realissim.data.reader import Dataset
from realissim.data.schema import DISTURBANCES_KEY, RELABEL_KEY, DatasetError, EpisodeInfo

if TYPE_CHECKING:  # the encoders import this module's fingerprint (render cache)
    from realissim.learn.observations import ObservationEncoder


@dataclass(frozen=True)
class ChunkSamples:
    """N training samples: observation inputs (N, ...) by name, target chunks (N, m, J + 1) float32 (q′ rad,
    then progress), the reference q′ (N, J) float32 the twin held at each frame (what `Observation.q_des`
    reads when the chunk is asked for), the episode index of each sample (N,), and the weight (N,) float32 of
    each sample's progress column in the loss (1: labelled, from a demonstration; 0: unknown, an expert's
    relabelled frame)."""

    inputs: dict[str, np.ndarray]
    actions: np.ndarray
    reference: np.ndarray
    episode: np.ndarray
    progress_weight: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)


def chunk_targets(time: np.ndarray, q_des: np.ndarray, progress: np.ndarray, horizon: float, m: int) -> np.ndarray:
    """(T, m, J + 1) float32: q_des (T, J) and progress (T,) at time[k] + (i + 1)·horizon/m, linear in `time`
    (T,) s, held at the last frame's values beyond it."""
    values = np.concatenate([q_des, progress[:, None]], axis=1).astype(np.float64)
    query = time[:, None] + np.arange(1, m + 1) * (horizon / m)  # (T, m)
    out = np.stack([np.interp(query, time, values[:, d]) for d in range(values.shape[1])], axis=-1)
    return out.astype(np.float32)


def disturbance_mask(time: np.ndarray, disturbances: list[float] | tuple[float, ...], horizon: float) -> np.ndarray:
    """(T,) bool: True for the frames whose target chunk (time[k], time[k] + horizon] reaches past a disturbance
    at one of `disturbances` (s), i.e. d − horizon < time[k] ≤ d: those targets show the expert reacting to a
    move it could not foresee, and are not trained on. Frames after a disturbance are kept."""
    time = np.asarray(time, dtype=np.float64)
    out = np.zeros(time.shape, dtype=bool)
    eps = 1e-6
    for d in disturbances:
        out |= (time > d - horizon + eps) & (time <= d + eps)
    return out


def label_targets(label_q: np.ndarray, label_horizon: float, horizon: float, m: int) -> np.ndarray:
    """(T, m, J + 1) float32 target chunks from an expert's labels `label_q` (T, M, J) rad — the joints q′ at
    (i + 1)·label_horizon/M s after each frame — resampled linearly in time to (i + 1)·horizon/m (held at the last
    label beyond it); the progress column is 0 (unknown: it carries no loss, `ChunkSamples.progress_weight`)."""
    label_q = np.asarray(label_q, dtype=np.float64)
    frames, waypoints, joints = label_q.shape
    given = np.arange(1, waypoints + 1) * (label_horizon / waypoints)
    query = np.arange(1, m + 1) * (horizon / m)
    out = np.zeros((frames, m, joints + 1), dtype=np.float32)
    for j in range(joints):
        out[:, :, j] = np.stack([np.interp(query, given, row) for row in label_q[:, :, j]]) if frames else 0.0
    return out


def is_relabelled(info: EpisodeInfo) -> bool:
    """Whether the episode is a policy's rollout an expert labelled (`data.schema.RELABEL_KEY`)."""
    return RELABEL_KEY in info.extra


def training_episodes(dataset: Dataset) -> tuple[EpisodeInfo, ...]:
    """The episodes a policy trains on, by index: the successful ones (`dataset.episodes`) and every relabelled
    one (`is_relabelled`: its labelled frames teach, whether or not the policy that acted succeeded)."""
    return tuple(e for e in dataset.all_episodes if not e.failed or is_relabelled(e))


def build_samples(
    dataset: Dataset, encoder: ObservationEncoder, episodes: Sequence[EpisodeInfo], horizon: float, m: int
) -> ChunkSamples:
    """The samples of every frame of `episodes` (see the module's docstring), less the frames whose target chunk
    reaches past a disturbance of a disturbed demonstration (`disturbance_mask`); of a relabelled episode
    (`is_relabelled`), its labelled frames only, each with the expert's chunk as its target."""
    actions, reference, owner, keep, weight = [], [], [], [], []
    for info in episodes:
        a = dataset.arrays(info.index)
        time, q_des = a["time"][...], a["q_des"][...]
        if is_relabelled(info):
            if "label_q" not in a:
                raise DatasetError(f"{dataset.path}: episode {info.index} is marked relabelled but holds no labels")
            label = info.extra[RELABEL_KEY]
            actions.append(label_targets(a["label_q"][...], float(label["horizon"]), horizon, m))
            keep.append(np.asarray(a["label_mask"][...], dtype=bool))
            weight.append(np.zeros(info.length, np.float32))
        else:
            actions.append(chunk_targets(time, q_des, a["progress"][...], horizon, m))
            keep.append(~disturbance_mask(time, info.extra.get(DISTURBANCES_KEY, ()), horizon))
            weight.append(np.ones(info.length, np.float32))
        reference.append(q_des.astype(np.float32))
        owner.append(np.full(info.length, info.index, dtype=np.int64))
    joints = len(dataset.meta.joint_names)
    inputs = encoder.dataset_inputs(dataset, episodes)
    samples = ChunkSamples(
        inputs,
        np.concatenate(actions) if actions else np.zeros((0, m, joints + 1), np.float32),
        np.concatenate(reference) if reference else np.zeros((0, joints), np.float32),
        np.concatenate(owner) if owner else np.zeros(0, np.int64),
        np.concatenate(weight) if weight else np.zeros(0, np.float32),
    )
    kept = np.concatenate(keep) if keep else np.zeros(0, bool)
    if kept.all():
        return samples  # (memory-mapped image caches stay mapped)
    return ChunkSamples({k: v[kept] for k, v in inputs.items()}, samples.actions[kept], samples.reference[kept],
                        samples.episode[kept], samples.progress_weight[kept])  # fmt: skip


def split_episodes(
    episodes: Sequence[EpisodeInfo], val_fraction: float, seed: int
) -> tuple[tuple[EpisodeInfo, ...], tuple[EpisodeInfo, ...]]:
    """(train, validation) episodes: round(val_fraction · n) drawn by `seed` for validation, but at least one
    episode always trains. Each part keeps the store's order."""
    n = len(episodes)
    n_val = min(round(val_fraction * n), n - 1) if n else 0
    chosen = set(np.random.default_rng(seed).permutation(n)[:n_val].tolist())
    return (
        tuple(e for i, e in enumerate(episodes) if i not in chosen),
        tuple(e for i, e in enumerate(episodes) if i in chosen),
    )


def fingerprint(dataset: Dataset, all_episodes: bool = False) -> str:
    """sha256 (hex) of the dataset's meta and the infos of the episodes it trains on (`training_episodes`; or, with
    `all_episodes`,
    of every stored one, failed ones too): it changes when either does (an episode appended, a different
    store at the same path)."""
    episodes = dataset.all_episodes if all_episodes else training_episodes(dataset)
    payload = {"meta": dataset.meta.to_json(), "episodes": [{"index": e.index, **e.to_json()} for e in episodes]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def open_training_data(path: str | Path) -> Dataset:
    """The store at `path`; DatasetError naming it when it has no episode to train on (`training_episodes`)."""
    dataset = Dataset(path)
    if not training_episodes(dataset):
        total = len(dataset.all_episodes)
        raise DatasetError(
            f"{dataset.path}: no successful or relabelled episodes to train on ({total} stored, all failed)"
            if total
            else f"{dataset.path}: no episodes to train on (the dataset is empty)"
        )
    return dataset
