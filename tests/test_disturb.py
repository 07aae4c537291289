"""Disturbed demonstrations (`expert.disturb`): the collector moves the T between chunks while the demonstrator
works, stores when, and training drops the targets that would show a reaction to an unforeseeable move."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from realissim.apps.collect import CollectConfig, collect
from realissim.data.schema import DISTURBANCES_KEY
from realissim.data.store import Dataset
from realissim.expert.disturb import DisturbConfig, Disturber
from realissim.geometry import quat_yaw
from realissim.learn.dataset import build_samples, disturbance_mask
from realissim.learn.observations import make_encoder
from realissim.policy.base import ActionChunk, Observation
from realissim.tasks import make
from realissim.tasks.pusht import PushTTask


class HoldStill:
    """Holds the arm where it is (chunks of 32 waypoints over 1 s) and counts the times it is told to replan."""

    def __init__(self) -> None:
        self.replans = 0

    def reset(self) -> None:
        self.replans = 0

    def replan(self) -> None:
        self.replans += 1

    def act(self, observation: Observation) -> ActionChunk:
        q = np.repeat(np.asarray(observation.q_des, dtype=np.float64)[None], 32, axis=0)
        return ActionChunk(q, np.zeros(32), 1.0)


def test_disturbance_mask_drops_exactly_the_frames_whose_targets_reach_past_a_move() -> None:
    time = np.arange(1, 181) / 60.0  # frames at 1/60 … 3 s
    assert not disturbance_mask(time, [], 1.0).any()
    mask = disturbance_mask(time, [1.5], 1.0)
    # Targets of frame k cover (t_k, t_k + 1]: they reach past 1.5 s for t_k in (0.5, 1.5].
    assert np.array_equal(np.nonzero(mask)[0], np.nonzero((time > 0.5 + 1e-9) & (time <= 1.5 + 1e-9))[0])
    assert mask.sum() == 60
    both = disturbance_mask(time, [1.0, 2.5], 0.5)
    assert both.sum() == 60  # two windows of 30 frames


def test_disturbed_collection_moves_the_t_between_chunks_and_training_drops_those_targets(tmp_path: Path) -> None:
    out = tmp_path / "disturbed"
    policy = HoldStill()
    config = CollectConfig(episodes=1, out=out, seed=3, max_seconds=8.0, disturb_every=1.0, disturb_max=3,
                           progress=False)  # fmt: skip
    collect(config, policy)
    dataset = Dataset(out, include_failed=True)
    (info,) = dataset.all_episodes
    times = info.extra[DISTURBANCES_KEY]
    assert len(times) == 3 and policy.replans == 3  # the T rests and the rod is clear: every due move happens
    assert all(t >= DisturbConfig().not_before for t in times) and times == sorted(times)
    a = dataset.arrays(info.index)
    t, pos = a["time"][...], a["object_pos"][:, 0, :2]
    yaw = quat_yaw(a["object_quat"][:, 0])
    step = np.linalg.norm(np.diff(pos, axis=0), axis=1) + np.abs(np.angle(np.exp(1j * np.diff(yaw))))
    jumps = t[1:][step > 1e-3]
    # The T moves only at the disturbances (between chunks: whole seconds here), seen in the next frame.
    assert np.allclose(jumps, np.asarray(times) + 1 / 60, atol=1e-6)
    task = make("pusht")
    assert isinstance(task, PushTTask)
    for k in np.searchsorted(t, jumps):
        assert task.in_workspace(pos[k]) and not task.evaluate(a["object_pos"][k], a["object_quat"][k]).success

    encoder = make_encoder("state", task.scene)
    samples = build_samples(dataset, encoder, dataset.all_episodes, 1.0, 32)
    dropped = disturbance_mask(t, times, 1.0)
    assert dropped.sum() > 0 and len(samples) == info.length - dropped.sum()
    every_frame = encoder.dataset_inputs(dataset, dataset.all_episodes)["state"]
    assert np.allclose(samples.inputs["state"], every_frame[~dropped])


def test_disturbances_are_refused_where_they_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="offline"):
        CollectConfig(disturb_every=2.0, online=True)
    with pytest.raises(ValueError, match=r"disturb\.every"):
        CollectConfig(disturb_every=-1.0)

    class NoReplan:
        def reset(self) -> None: ...

        def act(self, observation: Observation) -> ActionChunk: ...

    with pytest.raises(TypeError, match="replan"):
        Disturber(NoReplan(), None, make("pusht"), DisturbConfig(every=1.0))  # type: ignore[arg-type]
