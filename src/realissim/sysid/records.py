"""What identification reads from an online episode (`Recording`), and `load_recordings` with its checks.

Times: `time[k]` is the twin's time after frame k, s. The real arm's reading `q_real[k]` was taken at the start of
frame k, when the real world stood at `time[k] − dt`: so the arm's measured trajectory is `q_real[k + 1]` at
`time[k]` (`arm_trajectory`). The object poses are the corrected twin's after each frame (the world frame, the
body origin; quaternions w, x, y, z). Nothing here reads the oracle fields.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from realissim.data.reader import Dataset
from realissim.spec.scene import SceneSpec

log = logging.getLogger(__name__)


class SysidError(ValueError):
    """Identification cannot run on this input; the message names the dataset, episode or parameter."""


@dataclass(frozen=True)
class Recording:
    """One online episode as identification reads it (T frames, J joints, K objects)."""

    episode: int
    """Its index in the dataset."""
    time: np.ndarray
    """(T,) s, the twin's time after each frame."""
    q_real: np.ndarray
    """(T, J) rad, the real arm's encoder reading at each frame's start."""
    q_sent: np.ndarray
    """(T, J) rad, the joint target sent to the real arm at each frame."""
    object_pos: np.ndarray
    """(T, K, 3) m, the corrected twin's object positions after each frame."""
    object_quat: np.ndarray
    """(T, K, 4) w, x, y, z."""
    object_linvel: np.ndarray
    """(T, K, 3) m/s, world frame."""
    object_angvel: np.ndarray
    """(T, K, 3) rad/s, world frame."""
    desynced: np.ndarray
    """(T,) bool, the desync detector's verdict: frames where the twin may not show the world."""
    correction_force: np.ndarray
    """(T, K, 3) N, the correction's force on each object during the frame."""

    @property
    def dt(self) -> float:
        """Frame period, s."""
        return float(np.median(np.diff(self.time)))

    @property
    def duration(self) -> float:
        return float(self.time[-1] - self.time[0] + self.dt)

    def arm_trajectory(self) -> tuple[np.ndarray, np.ndarray]:
        """The real arm's measured joints as a trajectory: times (T,) s and joints (T, J) rad, sample k at
        `time[k]` (the reading taken at the start of frame k + 1; the last sample repeats the last reading)."""
        q = np.concatenate([self.q_real[1:], self.q_real[-1:]], axis=0)
        return self.time.copy(), q


def load_recordings(path: str | Path, episodes: list[int] | None = None) -> tuple[SceneSpec, list[Recording]]:
    """The scene and the online episodes of the dataset at `path` (`episodes`: indices, None: all, failed ones
    included — a failed episode moved the objects just as well). Raises `SysidError` naming the problem: an
    offline dataset, episodes recorded without the measured fields (before identification was built), an index
    that is not there."""
    data = Dataset(path, include_failed=True)
    if not data.meta.online:
        raise SysidError(f"{path}: an offline dataset; identification needs online episodes (collect --online)")
    infos = data.all_episodes
    if not infos:
        raise SysidError(f"{path}: holds no episodes")
    chosen = list(range(len(infos))) if episodes is None else list(episodes)
    bad = [i for i in chosen if not 0 <= i < len(infos)]
    if bad:
        raise SysidError(f"{path}: no episode {bad[0]} (it holds {len(infos)})")
    out = []
    for i in chosen:
        e = data.episode(infos[i].index)
        if e.q_real is None or e.q_sent is None or e.correction_force is None:
            raise SysidError(
                f"{path}: episode {i} has no measured fields (q_real, q_sent, correction_force): it was recorded "
                "before identification needed them; collect online episodes again"
            )
        assert e.desynced is not None
        out.append(Recording(i, e.time, e.q_real, e.q_sent, e.object_pos, e.object_quat, e.object_linvel,
                             e.object_angvel, e.desynced, e.correction_force))  # fmt: skip
    return data.meta.scene, out
