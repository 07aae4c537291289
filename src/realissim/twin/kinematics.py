"""Inverse kinematics for the pusher tip with the rod held vertical (mink on the robot-only model)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import mink
import mujoco
import numpy as np
from numpy.typing import ArrayLike

from realissim.assets import panda
from realissim.assets.mjcf import scene_to_mjcf
from realissim.spec.scene import SceneSpec


class IKError(RuntimeError):
    """The target could not be reached within tolerance (out of reach or against joint limits)."""


@dataclass(frozen=True)
class IKConfig:
    """Solver settings for `PusherIK`."""

    tolerance: float = 1e-4
    """Largest accepted tip position error, m."""
    max_iterations: int = 200
    posture_cost: float = 1e-3
    """Weight pulling the solution towards the posture target (resolves the arm's redundancy)."""
    posture: str = "home"
    """"home": every solve starts at, and is pulled towards, the robot's home joints, so the joints for a tip point
    do not depend on the path that led there (a path that returns returns the arm to the same joints, and the
    joints are a function of the tip that a policy can learn); the caller's seed is used only if that solve
    fails. "seed": start at and stay near the caller's seed (least motion, but along long paths the null space
    drifts and the arm can end up twisted against its joint limits)."""
    damping: float = 1e-4
    stall: float = 1e-5
    """Non-strict solves stop when the tip error shrank by less than this over `stall_window` iterations, m."""
    stall_window: int = 5


def robot_only_model(scene: SceneSpec) -> mujoco.MjModel:
    """The MuJoCo model of `scene`'s robot alone (no objects, goals or cameras), for kinematics."""
    return mujoco.MjModel.from_xml_string(scene_to_mjcf(dataclasses.replace(scene, objects=(), goals=(), cameras=())))


class PusherIK:
    """Joint configurations that put the pusher tip at a world point with the rod pointing straight down."""

    def __init__(self, scene: SceneSpec, config: IKConfig = IKConfig()) -> None:
        if scene.robot.pusher is None:
            raise ValueError("PusherIK needs a robot with a pusher rod")
        self.model = robot_only_model(scene)
        self._scratch = mujoco.MjData(self.model)
        self.config = config
        self._conf = mink.Configuration(self.model)
        self._tip = mink.FrameTask(panda.TIP_SITE, "site", position_cost=1.0, orientation_cost=0.0, lm_damping=1e-3)
        self._down = mink.AxisAlignTask(panda.TIP_SITE, "site", axis=(0.0, 0.0, 1.0), cost=1.0)
        self._down.set_target(np.array([0.0, 0.0, -1.0]))
        if config.posture not in ("home", "seed"):
            raise ValueError(f"IKConfig.posture must be 'home' or 'seed', got {config.posture!r}")
        self._posture = mink.PostureTask(self.model, cost=config.posture_cost)
        self._home = np.asarray(scene.robot.home, dtype=np.float64)
        self._limits = [mink.ConfigurationLimit(self.model)]
        self._site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, panda.TIP_SITE)

    def tip_position(self, q: ArrayLike) -> np.ndarray:
        """World position (3,) of the tip centre at joints q (J,)."""
        data = self._scratch  # reused: this runs every recorded frame
        data.qpos[:] = q
        mujoco.mj_kinematics(self.model, data)
        return data.site_xpos[self._site].copy()

    def solve(self, tip_W: ArrayLike, seed: ArrayLike, strict: bool = True) -> np.ndarray:
        """Joints (J,) placing the tip centre at `tip_W` (3,) m with the rod vertical: with the home posture
        target, solved from the home joints (falling back to `seed` if that fails); otherwise from `seed`.

        Raises IKError if the tip error stays above the tolerance; with `strict=False` returns the closest
        configuration found instead (within the joint limits), stopping once the error no longer shrinks by
        `stall` m over `stall_window` iterations (an unreachable target otherwise costs every iteration).
        """
        if self.config.posture == "home":
            with contextlib.suppress(IKError):  # unreachable from home: fall back to the caller's seed
                return self._solve(tip_W, self._home, self._home, strict=True)
        seed = np.asarray(seed, dtype=np.float64)
        return self._solve(tip_W, seed, seed, strict)

    def _solve(self, tip_W: ArrayLike, start: np.ndarray, posture: np.ndarray, strict: bool) -> np.ndarray:
        target = np.asarray(tip_W, dtype=np.float64)
        self._conf.update(start)
        self._posture.set_target(posture)
        self._tip.set_target(mink.SE3.from_translation(target))
        tasks = [self._tip, self._down, self._posture]
        err, history = np.inf, []
        cfg = self.config
        for _ in range(cfg.max_iterations):
            err = float(np.linalg.norm(self._conf.data.site_xpos[self._site] - target))
            tilt = 1.0 + float(self._conf.data.site_xmat[self._site][8])  # 1 - cos(angle to straight down)
            if err < cfg.tolerance and tilt < 1e-6:
                break
            history.append(err)
            if not strict and len(history) > cfg.stall_window and history[-cfg.stall_window - 1] - err < cfg.stall:
                break
            vel = mink.solve_ik(self._conf, tasks, 1.0, "daqp", damping=self.config.damping, limits=self._limits)
            self._conf.integrate_inplace(vel, 1.0)
        if err >= self.config.tolerance and strict:
            raise IKError(f"tip target {target.round(4).tolist()} not reached: error {err * 1e3:.2f} mm")
        return self._conf.q.copy()


class TipHold:
    """Projects joint configurations onto the pushing posture the demonstrations kept: the rod vertical and
    the tip no lower than a floor height, with the tip's table-plane position unchanged.

    A learned policy's joint waypoints carry errors of a few hundredths of a radian; at the Panda's reach
    that is a centimetre of tip height, enough to drive the tip into the table. This correction is a few
    damped Gauss–Newton steps on the tip position and rod axis (MuJoCo Jacobians of the robot-only model),
    about 20 µs per waypoint and step.
    """

    def __init__(self, scene: SceneSpec, iterations: int = 3, damping: float = 1e-4) -> None:
        if scene.robot.pusher is None:
            raise ValueError("TipHold needs a robot with a pusher rod")
        self.model = robot_only_model(scene)
        self.data = mujoco.MjData(self.model)
        self.iterations, self.damping = iterations, damping
        self._site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, panda.TIP_SITE)
        self._lower = np.array([j.lower for j in scene.robot.joints])
        self._upper = np.array([j.upper for j in scene.robot.joints])
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))

    def _forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tip position (3,) m and the site's z axis (3,) (straight down when the rod is vertical) at joints q
        (J,); fills the position and rotation Jacobians."""
        d = self.data
        d.qpos[:] = q
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_comPos(self.model, d)
        mujoco.mj_jacSite(self.model, d, self._jacp, self._jacr, self._site)
        return d.site_xpos[self._site].copy(), d.site_xmat[self._site].reshape(3, 3)[:, 2].copy()

    def project(self, q: np.ndarray, floor: float) -> np.ndarray:
        """Joints (..., J) rad → joints (..., J) with the same tip x, y (m, world), the tip at max(z, `floor`)
        and the rod vertical, within the joint limits."""
        q = np.asarray(q, dtype=np.float64)
        flat = q.reshape(-1, q.shape[-1]).copy()
        down = np.array([0.0, 0.0, -1.0])
        for row in flat:
            tip, _ = self._forward(row)
            target = np.array([tip[0], tip[1], max(tip[2], floor)])
            for _ in range(self.iterations):
                tip, axis = self._forward(row)
                # d(axis) = (jacr dq) × axis = −[axis]× jacr dq; position: jacp dq.
                skew = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
                a = np.vstack([self._jacp, -skew @ self._jacr])
                b = np.concatenate([target - tip, down - axis])
                step = a.T @ np.linalg.solve(a @ a.T + self.damping * np.eye(6), b)
                row[:] = np.clip(row + step[: row.shape[0]], self._lower, self._upper)
        return flat.reshape(q.shape)
