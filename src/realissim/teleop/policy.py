"""`TeleopPolicy`: the operator's tip target becomes one-frame chunks of desired joints (a `Policy`).

Every call moves the commanded tip (world frame, m) towards the operator's target by at most
`speed · horizon` — a drag across the table never asks the arm for a jump — and solves `PusherIK` for
it with the rod vertical, warm-started from the previous solution. The chunk is that one waypoint, due
after `horizon` s (one frame by default, so the environment asks again every frame; it interpolates the
joints over longer horizons); progress is 0 (an operator does not report progress).
"""

from __future__ import annotations

import threading

import numpy as np
from numpy.typing import ArrayLike

from realissim.policy.base import ActionChunk, Observation
from realissim.twin.kinematics import PusherIK


def step_towards(current: np.ndarray, target: np.ndarray, max_step: float) -> np.ndarray:
    """`current` (3,) moved towards `target` (3,) by at most `max_step` (same units), along the straight line."""
    delta = target - current
    distance = float(np.linalg.norm(delta))
    return target.copy() if distance <= max_step else current + delta * (max_step / distance)


class TeleopPolicy:
    """Follows an operator's tip target (set from any thread) at a bounded tip speed."""

    def __init__(self, ik: PusherIK, horizon: float, speed: float) -> None:
        """`ik` for the task's robot; `horizon` the chunk's span, s (a whole number of frames); `speed` the
        largest commanded tip speed, m/s."""
        self.ik, self.horizon, self.speed = ik, horizon, speed
        self._lock = threading.Lock()
        self._target: np.ndarray | None = None
        self._tip: np.ndarray | None = None
        self._q: np.ndarray | None = None

    @property
    def target(self) -> np.ndarray | None:
        """The operator's tip target (3,) m, world frame (None: hold where the tip is)."""
        with self._lock:
            return None if self._target is None else self._target.copy()

    @target.setter
    def target(self, tip_W: ArrayLike | None) -> None:
        with self._lock:
            self._target = None if tip_W is None else np.asarray(tip_W, dtype=np.float64).reshape(3).copy()

    @property
    def commanded_tip(self) -> np.ndarray | None:
        """The rate-limited tip position (3,) m commanded by the last chunk (None before the first)."""
        return None if self._tip is None else self._tip.copy()

    def reset(self) -> None:
        """Forget the last episode: the next chunk starts from the tip the observation's desired joints give."""
        self._tip, self._q = None, None

    def act(self, observation: Observation) -> ActionChunk:
        """One waypoint, due after `horizon`: the joints putting the tip one rate-limited step closer."""
        if self._tip is None or self._q is None:
            self._q = np.asarray(observation.q_des, dtype=np.float64).copy()
            self._tip = self.ik.tip_position(self._q)
        target = self.target
        if target is not None:
            self._tip = step_towards(self._tip, target, self.speed * self.horizon)
            self._q = self.ik.solve(self._tip, self._q, strict=False)
        return ActionChunk(self._q[None], np.zeros(1), horizon=self.horizon)
