"""The follower: streams the twin robot's actual joints to the real robot through Ruckig (docs/design.md §4).

`Follower.step` — once per twin frame, every `dt` seconds — moves the command one period along a Ruckig
trajectory towards the twin, within a fraction of the robot's published velocity, acceleration and jerk
limits, so the real arm never receives a step. Targets outside the position limits are clipped (and
reported); a target farther than `max_jump` from the command makes the follower hold — brake to rest —
instead of racing after it, until the target comes back within reach.

Tracking. The reference is the twin one period late, moving on at its velocity: r(τ) = q_sim +
qd_sim·(τ − dt), τ from now. Ruckig plans in the reference's frame, where it is a fixed point (velocity
limits shifted by qd_sim), to meet it no sooner than τ = dt; the command is the plan's state at τ = dt.
On track the commands are the twin's positions one frame late, as smooth as the twin moved; off track
(at the start, after a hold, behind a twin faster than the limits) the follower intercepts the moving
reference. Aiming at the twin's current state as a fixed target instead made an arm at rest run backwards
to gather speed when the twin set off fast, and replanning it time-optimally every frame drove the
commands' acceleration to the limit on a gentle trajectory. The one-period minimum duration also keeps
Ruckig away from near-zero-duration synchronisations, which fail numerically (pantor/ruckig#160).
Between commands Ruckig's own profile is time-optimal, i.e. bang-bang within the limits: a faster
hardware loop should interpolate the commands rather than run this follower at its own rate.

Position limits. Community Ruckig ignores `min_position`/`max_position`, so the follower keeps an
invariant instead: from every command, braking each joint time-optimally to rest (Ruckig's velocity
interface) stays inside the position limits. A tracking step is accepted only if its new state keeps the
invariant (one more Ruckig calculation); otherwise that period brakes, which keeps it, as the remainder
of a time-optimal brake is the same brake. Starting at rest inside the limits, every command therefore
lies inside them.

Units: rad, rad/s, rad/s², rad/s³, s. Joint arrays are (dof,) in `RobotDescription.joint_names` order.
Never set Ruckig's `intermediate_positions` (waypoints): that calls a remote service.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import ruckig
from numpy.typing import ArrayLike

from realissim.real.interfaces import Robot, RobotDescription
from realissim.twin.physics import FRAME_RATE

logger = logging.getLogger(__name__)

_OK_RESULTS = (ruckig.Result.Working, ruckig.Result.Finished)
_ROUNDING = 1e-12
"""Position tolerance for float rounding, rad: a follower resting on a limit may read a few ulp past it."""

TWIN_SPEED_FRACTION = 0.95
"""The twin's velocity is followed up to this fraction of the planning velocity limit, so that a follower
that has fallen behind can always catch up."""

_JointState = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Position (dof,) rad, velocity (dof,) rad/s, acceleration (dof,) rad/s²."""

Mode = Literal["track", "brake", "hold"]
"""What a follower step did: "track" the twin; "brake" for one period, because tracking would have left
no room to stop inside the position limits; "hold": brake to, or rest at, a standstill after a jump."""


class RuckigFailedError(RuntimeError):
    """Ruckig could not plan (its message or result is named). Raised by `Follower.step` when even braking
    fails; a failed tracking plan makes the follower brake for that period instead."""


@dataclass(frozen=True)
class FollowerConfig:
    """How the follower streams targets to the robot."""

    dt: float = 1.0 / FRAME_RATE
    """Command period, s: the time between calls to `step`, each bringing a new twin frame (default: the twin's
    frame period)."""
    max_jump: float = 0.5
    """Largest distance, rad, on any joint, from the commanded position to a target the follower tracks;
    a target farther away makes it hold (brake to rest) until the target comes back within this bound."""
    limit_margin: float = 0.9
    """Fraction (0, 1] of the published velocity, acceleration and jerk limits the follower plans with."""
    position_margin: float = 0.02
    """Distance, rad, kept inside each position limit when clipping targets."""

    def __post_init__(self) -> None:
        if not (np.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"dt must be a positive number of seconds, got {self.dt}")
        if not (np.isfinite(self.max_jump) and self.max_jump > 0):
            raise ValueError(f"max_jump must be positive, got {self.max_jump}")
        if not (0 < self.limit_margin <= 1):
            raise ValueError(f"limit_margin must be in (0, 1], got {self.limit_margin}")
        if not (np.isfinite(self.position_margin) and self.position_margin >= 0):
            raise ValueError(f"position_margin must be >= 0, got {self.position_margin}")


@dataclass(frozen=True)
class FollowerStep:
    """One command: position q (dof,) rad, and Ruckig's planned velocity qd (dof,) rad/s and acceleration
    qdd (dof,) rad/s² there (on track: the twin's velocity and zero); the clipped target (dof,) rad; which
    joints were clipped (dof,) bool; what the follower did (`Mode`); and Ruckig's result: Finished if the
    plan ends within this period, else Working."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    target: np.ndarray
    clipped: np.ndarray
    mode: Mode
    result: ruckig.Result

    @property
    def holding(self) -> bool:
        """Whether the follower is holding because the target jumped."""
        return self.mode == "hold"


@dataclass
class TrackingStats:
    """Running tracking error |q_real − q_sim| per joint, rad, over `count` samples."""

    joint_names: tuple[str, ...]
    count: int = 0
    sum_sq: np.ndarray = field(init=False)
    """Sum of squared errors per joint (dof,), rad²."""
    max_abs: np.ndarray = field(init=False)
    """Largest error per joint (dof,), rad."""

    def __post_init__(self) -> None:
        self.sum_sq = np.zeros(len(self.joint_names))
        self.max_abs = np.zeros(len(self.joint_names))

    def add(self, q_real: ArrayLike, q_sim: ArrayLike) -> np.ndarray:
        """Record one pair of joint vectors (dof,) rad; returns their error |q_real − q_sim| (dof,) rad."""
        dof = len(self.joint_names)
        err = np.abs(_as_joint_vector(q_real, "q_real", dof) - _as_joint_vector(q_sim, "q_sim", dof))
        self.count += 1
        self.sum_sq += err**2
        self.max_abs = np.maximum(self.max_abs, err)
        return err

    @property
    def rms(self) -> np.ndarray:
        """Root-mean-square error per joint (dof,), rad (zeros before the first sample)."""
        return np.sqrt(self.sum_sq / max(self.count, 1))

    def summary(self) -> dict[str, float]:
        """Flat metrics: sample count, worst-joint RMS and max (rad), and both per joint."""
        out: dict[str, float] = {
            "samples": float(self.count),
            "rms_rad": float(self.rms.max(initial=0.0)),
            "max_rad": float(self.max_abs.max(initial=0.0)),
        }
        for name, rms, mx in zip(self.joint_names, self.rms, self.max_abs):
            out[f"rms_rad/{name}"] = float(rms)
            out[f"max_rad/{name}"] = float(mx)
        return out


class Follower:
    """Streams twin joint targets to a Robot through Ruckig, within the robot's published limits.

    Call `reset(q_measured)` with the robot at rest, then `step(q_sim)` (or `follow(robot, q_sim)`) once
    per twin frame, every `config.dt` seconds.
    """

    def __init__(self, description: RobotDescription, config: FollowerConfig | None = None) -> None:
        _check_description(description)
        self.description = description
        self.config = config if config is not None else FollowerConfig()
        self.dof = description.dof
        self._q_lower = np.asarray(description.q_lower, dtype=np.float64)
        self._q_upper = np.asarray(description.q_upper, dtype=np.float64)
        self._q_min = self._q_lower + self.config.position_margin
        self._q_max = self._q_upper - self.config.position_margin
        if np.any(self._q_min > self._q_max):
            raise ValueError("position_margin leaves no room between the position limits")
        scale = self.config.limit_margin
        self._v_max = scale * np.asarray(description.velocity, dtype=np.float64)
        self._a_max = scale * np.asarray(description.acceleration, dtype=np.float64)
        self._j_max = scale * np.asarray(description.jerk, dtype=np.float64)
        self._otg = ruckig.Ruckig(self.dof)
        self._trajectory = ruckig.Trajectory(self.dof)
        self._track_input = self._new_input(ruckig.ControlInterface.Position, ruckig.Synchronization.Time)
        self._track_input.target_position = np.zeros(self.dof)
        self._track_input.minimum_duration = self.config.dt
        self._brake_input = self._new_input(ruckig.ControlInterface.Velocity, ruckig.Synchronization.No)
        self._state = (np.zeros(self.dof), np.zeros(self.dof), np.zeros(self.dof))
        self._started = False
        self._holding = False
        self._clipping = False
        self._history: list[np.ndarray] = []
        self.tracking = TrackingStats(tuple(description.joint_names))

    @property
    def holding(self) -> bool:
        """Whether the follower is braking to, or resting at, a standstill because the target jumped."""
        return self._holding

    def reachable(self, q: ArrayLike) -> np.ndarray:
        """q (..., dof) rad clipped to the positions the follower commands: the position limits less
        `position_margin`. A target beyond them is followed only as far as them."""
        return np.clip(np.asarray(q, dtype=np.float64), self._q_min, self._q_max)

    @property
    def q(self) -> np.ndarray:
        """The latest commanded position (dof,), rad."""
        self._require_started()
        return self._state[0].copy()

    def reset(self, q_measured: ArrayLike) -> None:
        """Start from the robot's measured position (dof,) rad, at rest; clears the tracking statistics."""
        q = _as_joint_vector(q_measured, "q_measured", self.dof)
        if np.any(q < self._q_lower) or np.any(q > self._q_upper):
            raise ValueError(f"q_measured {q} is outside the position limits")
        self._state = (q, np.zeros(self.dof), np.zeros(self.dof))
        self._started = True
        self._holding = False
        self._clipping = False
        self._history = []
        self.tracking = TrackingStats(tuple(self.description.joint_names))

    def step(self, q_sim: ArrayLike, qd_sim: ArrayLike | None = None, hold: bool = False) -> FollowerStep:
        """Advance one period towards the twin's joints q_sim (dof,) rad moving at qd_sim (dof,) rad/s
        (None: estimated from the last three targets); returns the command for the end of the period."""
        self._require_started()
        q_sim = _as_joint_vector(q_sim, "q_sim", self.dof)
        target = self.reachable(q_sim)
        clipped = target != q_sim
        qd_twin = None if qd_sim is None else _as_joint_vector(qd_sim, "qd_sim", self.dof)
        estimate = self._estimate_velocity(target)  # every frame, so the history stays current
        velocity = np.where(clipped, 0.0, estimate if qd_twin is None else qd_twin)
        self._log_clipping(clipped)
        self._update_holding(np.abs(target - self._state[0]))
        holding = hold or self._holding  # `hold`: the caller (e.g. a desync alarm) stops the arm this period
        planned = None if holding else self._try_track(target, velocity)
        mode: Mode = "hold" if holding else "brake" if planned is None else "track"
        state, result = self._brake() if planned is None else planned
        self._state = state
        q, qd, qdd = (x.copy() for x in state)
        return FollowerStep(q, qd, qdd, target, clipped, mode, result)

    def record(self, q_real: ArrayLike, q_sim: ArrayLike) -> np.ndarray:
        """Add one tracking sample: the robot's measured q_real and the twin's q_sim (dof,) rad, taken at
        the same time; returns |q_real − q_sim| (dof,) rad."""
        return self.tracking.add(q_real, q_sim)

    def follow(
        self, robot: Robot, q_sim: ArrayLike, qd_sim: ArrayLike | None = None, hold: bool = False
    ) -> FollowerStep:
        """Read the robot, record its tracking error against q_sim, then step and command it."""
        self.record(robot.read().q, q_sim)
        out = self.step(q_sim, qd_sim, hold)
        robot.command(out.q)
        return out

    def _try_track(self, target: np.ndarray, velocity: np.ndarray) -> tuple[_JointState, ruckig.Result] | None:
        """The tracking plan's next state, or None where it would leave no room to brake inside the
        position limits, or Ruckig failed (rarely, numerically: pantor/ruckig#90, #160)."""
        try:
            planned = self._track(target, self._safe_velocity(target, velocity))
            return planned if self._can_stop_inside_limits(planned[0]) else None
        except RuckigFailedError as err:
            logger.warning("Follower braking for one period: %s", err)
            return None

    def _track(self, target: np.ndarray, velocity: np.ndarray) -> tuple[_JointState, ruckig.Result]:
        """Meet the reference r(τ) = target + velocity·(τ − dt) — the twin one period late, moving on at its
        velocity — no sooner than τ = dt: planned in the reference's frame, where it is a fixed point, with
        the velocity limits shifted by its velocity."""
        dt = self.config.dt
        q, qd, qdd = self._state
        inp = self._track_input
        inp.current_position = q - (target - velocity * dt)
        inp.current_velocity = qd - velocity
        inp.current_acceleration = qdd
        inp.max_velocity = self._v_max - velocity
        inp.min_velocity = -self._v_max - velocity
        (p, v, a), result = self._plan(inp)
        return (p + target, v + velocity, a), result

    def _brake(self) -> tuple[_JointState, ruckig.Result]:
        """Brake every joint time-optimally to rest (the remainder of such a brake is the same brake)."""
        q, qd, qdd = self._state
        inp = self._brake_input
        inp.current_position, inp.current_velocity, inp.current_acceleration = q, qd, qdd
        return self._plan(inp)

    def _plan(self, inp: ruckig.InputParameter) -> tuple[_JointState, ruckig.Result]:
        """The state one period along Ruckig's plan from inp, and the `FollowerStep.result` for it."""
        result = self._calculate(inp)
        p, v, a = self._trajectory.at_time(self.config.dt)
        if self._trajectory.duration <= self.config.dt:
            result = ruckig.Result.Finished
        return (np.array(p), np.array(v), np.array(a)), result

    def _calculate(self, inp: ruckig.InputParameter) -> ruckig.Result:
        """Plan from inp into the working trajectory; RuckigFailedError naming Ruckig's error if it fails."""
        try:
            result = self._otg.calculate(inp, self._trajectory)
        except ruckig.RuckigError as err:  # the Python binding raises where C++ returns an error result
            raise RuckigFailedError(f"Ruckig failed with RuckigError: {str(err).strip()}") from err
        if result not in _OK_RESULTS:
            raise RuckigFailedError(f"Ruckig failed with {result.name} from state {self._state}")
        return result

    def _can_stop_inside_limits(self, state: _JointState) -> bool:
        """Whether braking from `state` stays inside the position limits."""
        # Planned relative to the state's position: Ruckig 0.19 counts the unused target position (0) of
        # a velocity-interface profile among its position extrema, which is then the true start.
        q, qd, qdd = state
        inp = self._brake_input
        inp.current_position, inp.current_velocity, inp.current_acceleration = np.zeros(self.dof), qd, qdd
        self._calculate(inp)
        extrema = self._trajectory.position_extrema
        lowest = q + np.array([e.min for e in extrema])
        highest = q + np.array([e.max for e in extrema])
        return bool(np.all(lowest >= self._q_lower - _ROUNDING) and np.all(highest <= self._q_upper + _ROUNDING))

    def _safe_velocity(self, target: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        """Cut twin velocities to `TWIN_SPEED_FRACTION` of the velocity limit, and so that a brake from the
        target stays inside the clipped limits: braking from v at zero acceleration covers at most
        v²/(2A) + v·A/(2J)."""
        a = self._a_max
        b = a / (2 * self._j_max)
        v_up = a * (np.sqrt(b**2 + 2 * (self._q_max - target) / a) - b)
        v_down = a * (np.sqrt(b**2 + 2 * (target - self._q_min) / a) - b)
        v_cap = TWIN_SPEED_FRACTION * self._v_max
        return np.clip(velocity, -np.minimum(v_down, v_cap), np.minimum(v_up, v_cap))

    def _estimate_velocity(self, target: np.ndarray) -> np.ndarray:
        """The target's velocity now (dof,) rad/s from the last three targets (fewer after a reset), exact
        at constant acceleration (a one-sided difference lags half a period, and position and velocity
        then disagree enough to shake the arm). Zero on joints whose targets accelerate faster than the
        published limit: that is a jump, not a motion to match."""
        history = self._history
        history.append(target)
        del history[:-3]
        dt = self.config.dt
        if len(history) < 3:
            return (history[-1] - history[0]) / dt
        velocity = (3 * history[2] - 4 * history[1] + history[0]) / (2 * dt)
        acceleration = (history[2] - 2 * history[1] + history[0]) / dt**2
        return np.where(np.abs(acceleration) > self.description.acceleration, 0.0, velocity)

    def _new_input(self, interface: ruckig.ControlInterface, sync: ruckig.Synchronization) -> ruckig.InputParameter:
        inp = ruckig.InputParameter(self.dof)
        inp.control_interface = interface
        inp.synchronization = sync
        inp.max_velocity = self._v_max
        inp.max_acceleration = self._a_max
        inp.max_jerk = self._j_max
        inp.target_velocity = np.zeros(self.dof)
        inp.target_acceleration = np.zeros(self.dof)
        return inp

    def _update_holding(self, distance: np.ndarray) -> None:
        jumped = bool(np.any(distance > self.config.max_jump))
        if jumped and not self._holding:
            joints = [n for n, d in zip(self.description.joint_names, distance) if d > self.config.max_jump]
            logger.warning(
                "Follower holding: target is %.3f rad from the commanded position (bound %.3f) on %s",
                float(distance.max()),
                self.config.max_jump,
                ", ".join(joints),
            )
        elif not jumped and self._holding:
            logger.info("Follower resuming: target is back within %.3f rad", self.config.max_jump)
        self._holding = jumped

    def _log_clipping(self, clipped: np.ndarray) -> None:
        if clipped.any() and not self._clipping:
            joints = [n for n, c in zip(self.description.joint_names, clipped) if c]
            logger.info("Follower clipping targets to the position limits on %s", ", ".join(joints))
        self._clipping = bool(clipped.any())

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("Follower.reset(q_measured) must be called before stepping")


def _as_joint_vector(x: ArrayLike, name: str, dof: int) -> np.ndarray:
    """x as a finite float64 vector (dof,), or ValueError naming the argument."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.shape != (dof,):
        raise ValueError(f"{name} must have shape ({dof},), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr}")
    return arr


def _check_description(d: RobotDescription) -> None:
    """Raise ValueError unless every limit array is finite, (dof,), ordered and positive."""
    dof = d.dof
    if dof == 0:
        raise ValueError("RobotDescription has no joints")
    arrays = {
        name: _as_joint_vector(getattr(d, name), f"description.{name}", dof)
        for name in ("q_lower", "q_upper", "velocity", "acceleration", "jerk")
    }
    if np.any(arrays["q_lower"] >= arrays["q_upper"]):
        raise ValueError("description.q_lower must be below description.q_upper on every joint")
    for name in ("velocity", "acceleration", "jerk"):
        if np.any(arrays[name] <= 0):
            raise ValueError(f"description.{name} limits must be positive")


def standard_trajectory(t: float, start: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The follower's reference motion at time t s from joints `start` (7,) rad, at rest at t = 0: every
    joint moves by a 0.3 rad-amplitude 0.5 Hz sinusoid, 0.3(1 − cos πt), plus a 0.4 rad minimum-jerk step
    over 3–4 s (6 s in all, top speed 0.94 rad/s). Returns twin joints q (7,) rad and velocities qd (7,) rad/s."""
    s = min(max(t - 3.0, 0.0), 1.0)
    q = 0.3 * (1 - math.cos(math.pi * t)) + 0.4 * (10 * s**3 - 15 * s**4 + 6 * s**5)
    qd = 0.3 * math.pi * math.sin(math.pi * t) + 0.4 * (30 * s**2 - 60 * s**3 + 30 * s**4)
    q0 = np.asarray(start, dtype=np.float64)
    return q0 + q, np.full(q0.shape, qd)
