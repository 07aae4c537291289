"""The lead bound: the twin arm may not run ahead of the real arm by more than a set distance at its tip.

In Real-is-Sim the twin arm leads and the real arm follows it through the follower, one frame late at best. It
falls further behind when the twin moves faster than the real arm's limits allow, and when the real object
resists the real arm more than the twin's resists the twin's (a heavier T, box edges against the twin's
spheres). The twin arm then pushes the twin's objects where the real arm has not arrived, and the visual
correction has to fight the twin's own contact to keep them with the real ones: measured on the contact-rich
scenario, the tip led by up to 70 mm and the T's largest losses came with those leads (docs/decisions.md,
"The lead bound").

`LeadBound.bound(q_des, q_previous, q_real)` shortens each frame's step of the twin's desired joints (from
the last frame's towards the policy's) so that the desired tip stays within `max_lead` of the real arm's measured
tip. The twin arm still moves as the policy asks while the real arm keeps up; when it does not, the twin waits
for it. The desired joints never jump back towards the real arm: an early version that projected them onto the
real arm yanked the twin's servos and, in real time, threw the T at 50 m/s. The measured joints are what a deployment
reads from the robot anyway: nothing here reads the oracle.

Bounded this way, the desired joints head straight for the policy's *latest* target. When they have fallen behind
(the real arm is slower than the policy's path), that cuts the path's corners: a tip that should travel above the
table and then come straight down beside the T comes down diagonally while still travelling, onto the T. With
`path_frames`, the bound keeps the policy's targets that the desired joints have not reached yet, in order, and
moves along them instead (a time scaling of the policy's path: the same path, later), up to that many targets
behind; older ones are dropped (the desired joints then cut across to the oldest one kept). Where the real arm
cannot close on the path (held by contact, or short of its target by its servos' steady error) the desired joints
stall; after `STALL_FRAMES` frames without progress the targets but the latest are dropped, and the step heads for
it as without a path, so a path never waits longer than the unbounded step would.

With `lag_frames`, the bound grows by the real tip's travel over the last frame times that: the real arm follows
one frame late and more, so at speed it trails the twin by its speed × that lag even when it keeps up, and a fixed
bound then holds the arm below the policy's speed (measured: 0.12 against 0.19 m/s, median, contact-rich seed 0).
A real arm that stops (held by contact) gets the fixed bound back at once.
"""

from __future__ import annotations

from collections import deque

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from realissim.assets import panda


class LeadBound:
    """Limits the desired tip's distance from the real arm's tip (see the module docstring).

    `model` is the twin's MuJoCo model, `robot_qpos` (J,) the robot joints' qpos addresses; the tip is the pusher
    tip's site, or the flange's for a robot without a pusher."""

    STALL_FRAMES = 10
    """Frames without progress (every joint within `STALL_STEP`) after which a path's targets but the latest are
    dropped."""
    STALL_STEP = 1e-4
    """A frame's step of the desired joints below this on every joint (rad) is no progress."""
    BISECTIONS = 12
    """Halvings of the step's fraction when the whole step would lead too far (to 1/4096 of the step)."""

    def __init__(
        self,
        model: mujoco.MjModel,
        robot_qpos: np.ndarray,
        max_lead: float,
        path_frames: int | None = None,
        lag_frames: float = 0.0,
    ) -> None:
        if not max_lead > 0:
            raise ValueError(f"max_lead: must be > 0 m, got {max_lead}")
        if path_frames is not None and path_frames < 1:
            raise ValueError(f"path_frames: must be ≥ 1 or None, got {path_frames}")
        if not lag_frames >= 0:
            raise ValueError(f"lag_frames: must be ≥ 0, got {lag_frames}")
        self.model, self.robot_qpos, self.max_lead = model, np.asarray(robot_qpos, dtype=np.intp), float(max_lead)
        self.path_frames, self.lag_frames = path_frames, float(lag_frames)
        self._path: deque[np.ndarray] = deque()
        self._stalled = 0
        self._real_before: np.ndarray | None = None
        site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, panda.TIP_SITE)
        if site < 0:
            site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, panda.FLANGE_SITE)
        if site < 0:
            raise ValueError(f"the model has neither a {panda.TIP_SITE!r} nor a {panda.FLANGE_SITE!r} site")
        self._site = site
        self._data = mujoco.MjData(model)  # mj_kinematics: 2.6 µs a tip here, ChainKinematics 7.6 µs for one q

    def reset(self) -> None:
        """Forget the policy's targets not reached yet (a new episode; the arm held: it restarts from there)."""
        self._path.clear()
        self._stalled = 0
        self._real_before = None

    @property
    def behind(self) -> int:
        """How many of the policy's targets the desired joints have not reached yet (0 without `path_frames`)."""
        return len(self._path)

    def tip(self, q: ArrayLike) -> np.ndarray:
        """World position (3,) m of the tip at the robot's joints q (J,) rad."""
        d = self._data
        d.qpos[self.robot_qpos] = q
        mujoco.mj_kinematics(self.model, d)
        return d.site_xpos[self._site].copy()

    def bound(self, q_des: ArrayLike, q_previous: ArrayLike, q_real: ArrayLike) -> tuple[np.ndarray, float]:
        """The desired joints (J,) rad to set this frame: the furthest point from q_previous (the twin's current
        desired joints) towards q_des whose tip leads the tip at q_real (the real arm's measured joints) by at
        most `max_lead` m — or, when q_previous already leads by more (the real arm fell behind), by no more than
        q_previous does. So the desired joints never jump back towards the real arm (no jerk for the twin's
        servos), and a step that closes the lead is always taken. Also returns the lead of q_des itself, m.
        With `path_frames`, q_des joins the targets not reached yet and the step goes along them, in order,
        instead of straight towards q_des. All arrays (J,) rad must be finite."""
        q_des, q_previous, q_real = (np.asarray(q, dtype=np.float64) for q in (q_des, q_previous, q_real))
        if not all(np.all(np.isfinite(q)) for q in (q_des, q_previous, q_real)):
            raise ValueError("lead bound: joint arrays must be finite")
        real = self.tip(q_real)
        lead = self._lead(q_des, real)
        moved = 0.0 if self._real_before is None else float(np.linalg.norm(real - self._real_before))
        self._real_before = real
        base = self.max_lead + self.lag_frames * moved
        if self.path_frames is None and lead <= base:  # the common case: no further kinematics this frame
            return q_des, lead
        allowed = max(base, self._lead(q_previous, real))
        if self.path_frames is None:
            if lead <= allowed:
                return q_des, lead
            return self._advance(q_previous, q_des, real, allowed)[0], lead
        if not self._path or not np.array_equal(self._path[-1], q_des):
            self._path.append(q_des.copy())
        while len(self._path) > self.path_frames:
            self._path.popleft()
        if self._stalled >= self.STALL_FRAMES:  # the real arm does not close on the path: go for the latest
            while len(self._path) > 1:
                self._path.popleft()
        q = q_previous
        while self._path:
            q, reached = self._advance(q, self._path[0], real, allowed)
            if not reached:
                break
            self._path.popleft()
        progress = bool(np.any(np.abs(q - q_previous) >= self.STALL_STEP))
        self._stalled = 0 if progress or not self._path else self._stalled + 1
        return q, lead

    def _advance(
        self, q_from: np.ndarray, q_to: np.ndarray, real: np.ndarray, allowed: float
    ) -> tuple[np.ndarray, bool]:
        """The furthest point from q_from towards q_to whose tip is within `allowed` of the real tip, and whether
        it is q_to."""
        if self._lead(q_to, real) <= allowed:
            return q_to, True
        step, lo, hi = q_to - q_from, 0.0, 1.0  # lo: a fraction known to be within the allowance
        for _ in range(self.BISECTIONS):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self._lead(q_from + mid * step, real) <= allowed else (lo, mid)
        return q_from + lo * step, False

    def _lead(self, q: np.ndarray, real_tip: np.ndarray) -> float:
        return float(np.linalg.norm(self.tip(q) - real_tip))
