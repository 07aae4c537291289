"""Training samples from an episode store: for every frame of a successful episode, the observation inputs
at that frame and the chunk the policy should have returned there.

The target chunk of frame k (twin time t_k) holds, for i < m, the commanded joints q′ and the progress
label at t_k + (i + 1)·H/m — when waypoint i of a chunk asked for at t_k is due (`ActionChunk`). At 60 fps
with H = 1 s and m = 32 those times fall between frames, so both are interpolated linearly in time; past
the episode's end they hold its last values (the arm stays where the demonstration left it).

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
from realissim.data.schema import DISTURBANCES_KEY, DatasetError, EpisodeInfo

if TYPE_CHECKING:  # the encoders import this module's fingerprint (render cache)
    from realissim.learn.observations import ObservationEncoder


@dataclass(frozen=True)
class ChunkSamples:
    """N training samples: observation inputs (N, ...) by name, target chunks (N, m, J + 1) float32 (q′ rad,
    then progress), the reference q′ (N, J) float32 the twin held at each frame (what `Observation.q_des`
    reads when the chunk is asked for), and the episode index of each sample (N,)."""

    inputs: dict[str, np.ndarray]
    actions: np.ndarray
    reference: np.ndarray
    episode: np.ndarray

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


def build_samples(
    dataset: Dataset, encoder: ObservationEncoder, episodes: Sequence[EpisodeInfo], horizon: float, m: int
) -> ChunkSamples:
    """The samples of every frame of `episodes` (see the module's docstring), less the frames whose target chunk
    reaches past a disturbance of a disturbed demonstration (`disturbance_mask`)."""
    actions, reference, owner, keep = [], [], [], []
    for info in episodes:
        a = dataset.arrays(info.index)
        time, q_des = a["time"][...], a["q_des"][...]
        actions.append(chunk_targets(time, q_des, a["progress"][...], horizon, m))
        reference.append(q_des.astype(np.float32))
        owner.append(np.full(info.length, info.index, dtype=np.int64))
        keep.append(~disturbance_mask(time, info.extra.get(DISTURBANCES_KEY, ()), horizon))
    joints = len(dataset.meta.joint_names)
    inputs = encoder.dataset_inputs(dataset, episodes)
    samples = ChunkSamples(
        inputs,
        np.concatenate(actions) if actions else np.zeros((0, m, joints + 1), np.float32),
        np.concatenate(reference) if reference else np.zeros((0, joints), np.float32),
        np.concatenate(owner) if owner else np.zeros(0, np.int64),
    )
    kept = np.concatenate(keep) if keep else np.zeros(0, bool)
    if kept.all():
        return samples  # (memory-mapped image caches stay mapped)
    return ChunkSamples({k: v[kept] for k, v in inputs.items()}, samples.actions[kept], samples.reference[kept],
                        samples.episode[kept])  # fmt: skip


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
    """sha256 (hex) of the dataset's meta and the infos of its included episodes (or, with `all_episodes`,
    of every stored one, failed ones too): it changes when either does (an episode appended, a different
    store at the same path)."""
    episodes = dataset.all_episodes if all_episodes else dataset.episodes
    payload = {"meta": dataset.meta.to_json(), "episodes": [{"index": e.index, **e.to_json()} for e in episodes]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def open_training_data(path: str | Path) -> Dataset:
    """The store at `path` with its successful episodes; DatasetError naming it when there are none."""
    dataset = Dataset(path)
    if not dataset.episodes:
        total = len(dataset.all_episodes)
        raise DatasetError(
            f"{dataset.path}: no successful episodes to train on ({total} stored, all failed)"
            if total
            else f"{dataset.path}: no episodes to train on (the dataset is empty)"
        )
    return dataset
