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


class ChainKinematics:
    """Forward kinematics and Jacobians of one site of a MuJoCo model whose site hangs from a serial chain of
    hinge joints (a robot arm), vectorised over any number of configurations at once — the same numbers as
    `mj_kinematics` and `mj_jacSite` (to float rounding; tested), without a Python loop per configuration.

    Shapes: q (N, nq) rad (the model's qpos); positions (N, 3) m and rotations (N, 3, 3) in the world frame;
    Jacobians (N, 3, nv) (linear, m/rad; angular, rad/rad)."""

    def __init__(self, model: mujoco.MjModel, site: str) -> None:
        sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if sid < 0:
            raise ValueError(f"ChainKinematics: no site {site!r} in the model")
        chain, body = [], int(model.site_bodyid[sid])
        while body != 0:
            chain.append(body)
            body = int(model.body_parentid[body])
        self.nq, self.nv = model.nq, model.nv
        self._qpos0 = model.qpos0.copy()
        self._bodies: list[tuple[np.ndarray, np.ndarray, list[tuple[int, int, np.ndarray, np.ndarray, _Axis]]]] = []
        for b in reversed(chain):
            joints = []
            for j in range(model.body_jntadr[b], model.body_jntadr[b] + model.body_jntnum[b]):
                if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
                    raise ValueError(f"ChainKinematics: joint {j} of the chain to {site!r} is not a hinge")
                axis = model.jnt_axis[j].copy()
                joints.append((int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j]), model.jnt_pos[j].copy(), axis,
                               _Axis(axis)))  # fmt: skip
            self._bodies.append((model.body_pos[b].copy(), _quat_mat(model.body_quat[b]), joints))
        self._site_pos = model.site_pos[sid].copy()
        self._site_rot = _quat_mat(model.site_quat[sid])

    def forward(self, q: np.ndarray, jacobians: bool = False) -> tuple[np.ndarray, ...]:
        """(position (N, 3), rotation (N, 3, 3)) of the site at joints q (N, nq); with `jacobians`, also its
        linear and angular Jacobians (N, 3, nv)."""
        q = np.asarray(q, dtype=np.float64)
        if q.ndim != 2 or q.shape[1] != self.nq:
            raise ValueError(f"ChainKinematics: q must be (N, {self.nq}), got {q.shape}")
        n = len(q)
        rot = np.broadcast_to(np.eye(3), (n, 3, 3)).copy()
        pos = np.zeros((n, 3))
        axes = []
        for body_pos, body_rot, joints in self._bodies:
            pos = pos + rot @ body_pos
            rot = rot @ body_rot
            for qadr, dof, jpos, jaxis, rodrigues in joints:
                anchor = pos + rot @ jpos
                axes.append((dof, anchor, rot @ jaxis))
                rot = rot @ rodrigues(q[:, qadr] - self._qpos0[qadr])
                pos = anchor - rot @ jpos
        site = pos + rot @ self._site_pos
        site_rot = rot @ self._site_rot
        if not jacobians:
            return site, site_rot
        jacp, jacr = np.zeros((n, 3, self.nv)), np.zeros((n, 3, self.nv))
        for dof, anchor, axis in axes:
            jacp[:, :, dof] = np.cross(axis, site - anchor)
            jacr[:, :, dof] = axis
        return site, site_rot, jacp, jacr


def _quat_mat(quat: np.ndarray) -> np.ndarray:
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(quat, dtype=np.float64))
    return out.reshape(3, 3)


class _Axis:
    """Rotations about one fixed unit axis (3,): its cross-product matrix K and K² computed once."""

    def __init__(self, axis: np.ndarray) -> None:
        self.k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
        self.kk = self.k @ self.k
        self.eye = np.eye(3)

    def __call__(self, angle: np.ndarray) -> np.ndarray:
        """Rotation matrices (N, 3, 3) by `angle` (N,) rad (Rodrigues: I + sin·K + (1 − cos)·K²)."""
        s, c = np.sin(angle)[:, None, None], np.cos(angle)[:, None, None]
        return self.eye + s * self.k + (1.0 - c) * self.kk


def _skew(v: np.ndarray) -> np.ndarray:
    """Cross-product matrices (N, 3, 3) of vectors v (N, 3)."""
    z = np.zeros(len(v))
    return np.stack(
        [np.stack([z, -v[:, 2], v[:, 1]], -1), np.stack([v[:, 2], z, -v[:, 0]], -1),
         np.stack([-v[:, 1], v[:, 0], z], -1)], axis=1,
    )  # fmt: skip


class TipHold:
    """Projects joint configurations onto the pushing posture the demonstrations kept: the rod vertical and
    the tip no lower than a floor height, with the tip's table-plane position unchanged.

    A learned policy's joint waypoints carry errors of a few hundredths of a radian; at the Panda's reach
    that is a centimetre of tip height, enough to drive the tip into the table. This correction is a few
    damped Gauss–Newton steps on the tip position and rod axis (`ChainKinematics` on the robot-only model),
    all waypoints of a batch of chunks at once.
    """

    def __init__(self, scene: SceneSpec, iterations: int = 3, damping: float = 1e-4) -> None:
        if scene.robot.pusher is None:
            raise ValueError("TipHold needs a robot with a pusher rod")
        self.model = robot_only_model(scene)
        self.chain = ChainKinematics(self.model, panda.TIP_SITE)
        self.iterations, self.damping = iterations, damping
        self._lower = np.array([j.lower for j in scene.robot.joints])
        self._upper = np.array([j.upper for j in scene.robot.joints])

    def project(self, q: np.ndarray, floor: float) -> np.ndarray:
        """Joints (..., J) rad → joints (..., J) with the same tip x, y (m, world), the tip at max(z, `floor`)
        and the rod vertical, within the joint limits."""
        q = np.asarray(q, dtype=np.float64)
        flat = q.reshape(-1, q.shape[-1]).copy()
        down = np.array([0.0, 0.0, -1.0])
        target, _ = self.chain.forward(flat)
        target[:, 2] = np.maximum(target[:, 2], floor)
        for _ in range(self.iterations):
            tip, rot, jacp, jacr = self.chain.forward(flat, jacobians=True)
            axis = rot[:, :, 2]  # the site's z axis: straight down when the rod is vertical
            # d(axis) = (jacr dq) × axis = −[axis]× jacr dq; position: jacp dq.
            a = np.concatenate([jacp, -_skew(axis) @ jacr], axis=1)  # (N, 6, nv)
            b = np.concatenate([target - tip, down - axis], axis=1)  # (N, 6)
            gram = a @ a.transpose(0, 2, 1) + self.damping * np.eye(6)
            step = (a.transpose(0, 2, 1) @ np.linalg.solve(gram, b[..., None]))[..., 0]
            flat = np.clip(flat + step[:, : flat.shape[1]], self._lower, self._upper)
        return flat.reshape(q.shape)
