"""Inverse kinematics for the pusher tip with the rod held vertical, on the robot-only model.

Two solvers of the same problem (`IKConfig.solver`): "compiled" (the default) walks the arm's chain and solves each
damped Gauss–Newton step with its joint-limit box in one compiled (numba) call that releases the GIL, ~20 µs a
solve; "mink" is the same iteration built from mink's tasks and its QP, ~0.45 ms a solve of Python holding the GIL.
The difference matters on the wall clock: a planner re-planning in a policy thread with mink kept the correction
thread waiting for the GIL for tenths of a second (docs/decisions.md, "Planning without the GIL").
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Literal

import mink
import mujoco
import numpy as np
from numba import njit
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
    solver: Literal["compiled", "mink"] = "compiled"
    """"compiled": the damped Gauss–Newton iteration in one numba call (GIL released); "mink": the same tasks through
    mink and its QP solver (the reference the compiled one is tested against; Python, ~20× slower)."""
    limit_gain: float = 0.95
    """A step may close at most this fraction of each joint's distance to its limit (mink's `ConfigurationLimit`)."""
    tip_lm_damping: float = 1e-3
    """Levenberg–Marquardt damping of the tip task, times its squared error (mink's `lm_damping`)."""

    def __post_init__(self) -> None:
        if self.solver not in ("compiled", "mink"):
            raise ValueError(f"IKConfig.solver must be 'compiled' or 'mink', got {self.solver!r}")
        if not 0.0 < self.limit_gain <= 1.0:
            raise ValueError(f"IKConfig.limit_gain must be in (0, 1], got {self.limit_gain}")


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
        self._tip = mink.FrameTask(
            panda.TIP_SITE, "site", position_cost=1.0, orientation_cost=0.0, lm_damping=config.tip_lm_damping
        )
        self._down = mink.AxisAlignTask(panda.TIP_SITE, "site", axis=(0.0, 0.0, 1.0), cost=1.0)
        self._down.set_target(np.array([0.0, 0.0, -1.0]))
        if config.posture not in ("home", "seed"):
            raise ValueError(f"IKConfig.posture must be 'home' or 'seed', got {config.posture!r}")
        self._posture = mink.PostureTask(self.model, cost=config.posture_cost)
        self._home = np.asarray(scene.robot.home, dtype=np.float64)
        self._limits = [mink.ConfigurationLimit(self.model)]
        self._site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, panda.TIP_SITE)
        self._chain = ChainKinematics(self.model, panda.TIP_SITE)
        if self._chain.nq != self.model.nq or self.model.nq != self.model.nv:
            raise ValueError("PusherIK: the robot-only model must be the tip's chain of hinges alone")
        limited = self.model.jnt_limited.astype(bool)
        self._lower = np.where(limited, self.model.jnt_range[:, 0], -np.inf)
        self._upper = np.where(limited, self.model.jnt_range[:, 1], np.inf)

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
        if self.config.solver == "compiled":
            return self._solve_compiled(target, start, posture, strict)
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

    def _solve_compiled(self, target: np.ndarray, start: np.ndarray, posture: np.ndarray, strict: bool) -> np.ndarray:
        """`_solve` in one compiled call: per iteration the tip's position and rod axis with their Jacobians
        (`ChainKinematics`), and the step minimising |Jp dq + ep|² + |Ja dq + ea|² + c²|q + dq − posture|² +
        (damping + lm |ep|²)|dq|² within `limit_gain` of each joint's limits (c the posture cost; ep, ea the tip's
        position and axis errors in the world frame) — mink's objective, its errors taken in the world frame. Once
        the error stops shrinking above the tolerance (`stall` over `stall_window` iterations), the posture's pull
        is dropped: far from the posture it alone can hold the tip 0.1 mm off (a joint at its limit, measured)."""
        cfg = self.config
        q = np.array(start, dtype=np.float64)
        if q.shape != (self.model.nq,) or target.shape != (3,):
            raise ValueError(f"PusherIK: joints must be ({self.model.nq},) and the target (3,), got {q.shape}, "
                             f"{target.shape}")  # fmt: skip
        if not (np.isfinite(q).all() and np.isfinite(target).all()):
            raise ValueError(f"PusherIK: non-finite joints {q.tolist()} or target {target.tolist()}")
        err = _ik_kernel(
            q, target, np.asarray(posture, dtype=np.float64), self._lower, self._upper, *self._chain._chain,
            cfg.tolerance, cfg.max_iterations, strict, cfg.stall, cfg.stall_window, cfg.posture_cost ** 2,
            cfg.damping, cfg.tip_lm_damping, cfg.limit_gain,
        )  # fmt: skip
        if err >= cfg.tolerance and strict:
            raise IKError(f"tip target {target.round(4).tolist()} not reached: error {err * 1e3:.2f} mm")
        return q


@njit(cache=True, nogil=True)
def _ik_kernel(  # pragma: no cover - numba
    q, target, posture, lower, upper, body_pos, body_rot, first, qadr, dofadr, qpos0, jnt_pos, jnt_axis, k, kk,
    site_pos, site_rot, tolerance, max_iterations, strict, stall, stall_window, posture_weight, damping, lm, gain,
):  # fmt: skip
    """`PusherIK._solve_compiled`'s iteration, q (nq,) updated in place; returns the last tip error, m."""
    n = q.shape[0]
    qs = q.reshape(1, n)
    pos, rot = np.empty((1, 3)), np.empty((1, 3, 3))
    jacp, jacr = np.zeros((1, 3, n)), np.zeros((1, 3, n))
    ja = np.empty((3, n))
    ep, ea = np.empty(3), np.empty(3)
    h, g = np.empty((n, n)), np.empty(n)
    lo, hi = np.empty(n), np.empty(n)
    history = np.empty(max_iterations)
    err, since = np.inf, 0
    for it in range(max_iterations):
        _chain_kernel(qs, body_pos, body_rot, first, qadr, dofadr, qpos0, jnt_pos, jnt_axis, k, kk, site_pos,
                      site_rot, pos, rot, jacp, jacr)  # fmt: skip
        for i in range(3):
            ep[i] = pos[0, i] - target[i]
        err = np.sqrt(ep[0] ** 2 + ep[1] ** 2 + ep[2] ** 2)
        a0, a1, a2 = rot[0, 0, 2], rot[0, 1, 2], rot[0, 2, 2]  # the rod's axis (the site's z), straight down: -z
        if err < tolerance and 1.0 + a2 < 1e-6:
            break
        history[it] = err
        if it - since > stall_window and history[it - stall_window - 1] - err < stall:
            if posture_weight > 0.0:  # the posture's pull alone holds the tip off the target (far from the
                posture_weight, since = 0.0, it  # posture, against a joint limit): the last iterations go without it
            elif not strict:
                break
        ea[0], ea[1], ea[2] = a0, a1, a2 + 1.0
        for j in range(n):  # d(axis) = ω × axis = −[axis]× jacr dq
            w0, w1, w2 = jacr[0, 0, j], jacr[0, 1, j], jacr[0, 2, j]
            ja[0, j] = w1 * a2 - w2 * a1
            ja[1, j] = w2 * a0 - w0 * a2
            ja[2, j] = w0 * a1 - w1 * a0
        mu = damping + lm * err * err
        for r in range(n):
            g[r] = posture_weight * (q[r] - posture[r])
            for i in range(3):
                g[r] += jacp[0, i, r] * ep[i] + ja[i, r] * ea[i]
            for c in range(n):
                s = 0.0
                for i in range(3):
                    s += jacp[0, i, r] * jacp[0, i, c] + ja[i, r] * ja[i, c]
                h[r, c] = s
            h[r, r] += posture_weight + mu
            lo[r] = gain * (lower[r] - q[r]) if np.isfinite(lower[r]) else -np.inf
            hi[r] = gain * (upper[r] - q[r]) if np.isfinite(upper[r]) else np.inf
        step = _box_qp(h, g, lo, hi)
        for r in range(n):
            q[r] += step[r]
    return err


@njit(cache=True, nogil=True)
def _box_qp(h, g, lo, hi):  # pragma: no cover - numba
    """argmin ½ xᵀ h x + gᵀ x subject to lo ≤ x ≤ hi, h (n, n) positive definite: an active set (variables held at
    a bound), grown by the worst violation and shrunk by a bound whose multiplier has the wrong sign."""
    n = g.shape[0]
    state = np.zeros(n, dtype=np.int64)  # 0 free, -1 held at lo, +1 held at hi
    x = np.zeros(n)
    for _ in range(4 * n + 4):
        free = np.where(state == 0)[0]
        for r in range(n):
            if state[r] < 0:
                x[r] = lo[r]
            elif state[r] > 0:
                x[r] = hi[r]
        if free.size:
            rhs = -g[free].copy()
            for a in range(free.size):
                for r in range(n):
                    if state[r] != 0:
                        rhs[a] -= h[free[a], r] * x[r]
            sub = np.empty((free.size, free.size))
            for a in range(free.size):
                for b in range(free.size):
                    sub[a, b] = h[free[a], free[b]]
            xf = np.linalg.solve(sub, rhs)
            for a in range(free.size):
                x[free[a]] = xf[a]
        worst, at = 0.0, -1
        for r in range(n):
            if state[r] == 0:
                over = max(lo[r] - x[r], x[r] - hi[r])
                if over > worst:
                    worst, at = over, r
        if at >= 0:
            state[at] = -1 if x[at] < lo[at] else 1
            continue
        worst, at = 0.0, -1
        for r in range(n):  # a held bound whose gradient pushes the variable back inside is released
            if state[r] != 0:
                grad = g[r]
                for c in range(n):
                    grad += h[r, c] * x[c]
                wrong = grad * state[r]  # at lo (−1) the gradient must be ≥ 0; at hi (+1) ≤ 0
                if wrong > worst:
                    worst, at = wrong, r
        if at < 0:
            break
        state[at] = 0
    return np.minimum(np.maximum(x, lo), hi)


class ChainKinematics:
    """Forward kinematics and Jacobians of one site of a MuJoCo model whose site hangs from a serial chain of
    hinge joints (a robot arm), for any number of configurations at once — the same numbers as `mj_kinematics`
    and `mj_jacSite` (to float rounding; tested). The chain is walked in one compiled (numba) loop per
    configuration: a call costs microseconds, so callers may call it once per waypoint.

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
        body_pos, body_rot, first, joints = [], [], [0], []
        for b in reversed(chain):
            body_pos.append(model.body_pos[b])
            body_rot.append(_quat_mat(model.body_quat[b]))
            for j in range(model.body_jntadr[b], model.body_jntadr[b] + model.body_jntnum[b]):
                if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
                    raise ValueError(f"ChainKinematics: joint {j} of the chain to {site!r} is not a hinge")
                joints.append(j)
            first.append(len(joints))
        j = np.array(joints, dtype=np.int64)
        axis = model.jnt_axis[j].reshape(-1, 3)
        k = _skew(axis)
        self._chain = (
            np.array(body_pos, dtype=np.float64).reshape(-1, 3),  # per body: offset (3,) and rotation (3, 3) ...
            np.array(body_rot, dtype=np.float64).reshape(-1, 3, 3),
            np.array(first, dtype=np.int64),  # ... and its joints first[b]:first[b + 1]
            model.jnt_qposadr[j].astype(np.int64),
            model.jnt_dofadr[j].astype(np.int64),
            model.qpos0[model.jnt_qposadr[j]].astype(np.float64),
            model.jnt_pos[j].reshape(-1, 3).astype(np.float64),
            axis.astype(np.float64),
            k,  # Rodrigues: R(θ) = I + sin θ K + (1 − cos θ) K²
            k @ k,
            model.site_pos[sid].astype(np.float64),
            _quat_mat(model.site_quat[sid]),
        )

    def forward(self, q: np.ndarray, jacobians: bool = False) -> tuple[np.ndarray, ...]:
        """(position (N, 3), rotation (N, 3, 3)) of the site at joints q (N, nq); with `jacobians`, also its
        linear and angular Jacobians (N, 3, nv)."""
        q = np.ascontiguousarray(q, dtype=np.float64)
        if q.ndim != 2 or q.shape[1] != self.nq:
            raise ValueError(f"ChainKinematics: q must be (N, {self.nq}), got {q.shape}")
        n = len(q)
        site, rot = np.empty((n, 3)), np.empty((n, 3, 3))
        jacp = np.zeros((n, 3, self.nv) if jacobians else (0, 3, self.nv))
        jacr = np.zeros_like(jacp)
        _chain_kernel(q, *self._chain, site, rot, jacp, jacr)
        return (site, rot, jacp, jacr) if jacobians else (site, rot)


@njit(cache=True)
def _chain_kernel(  # pragma: no cover - numba
    q, body_pos, body_rot, first, qadr, dofadr, qpos0, jnt_pos, jnt_axis, k, kk, site_pos, site_rot,
    out_pos, out_rot, jacp, jacr,
):  # fmt: skip
    """Walks the chain for each row of q: the site's position and rotation into out_pos, out_rot, and (when
    jacp has rows) the Jacobian columns of each hinge: linear axis × (site − anchor), angular the axis."""
    nj = len(qadr)
    anchors, axes = np.empty((nj, 3)), np.empty((nj, 3))
    r, r2, rj = np.empty((3, 3)), np.empty((3, 3)), np.empty((3, 3))
    p, v = np.empty(3), np.empty(3)
    for n in range(q.shape[0]):
        r[:] = 0.0
        r[0, 0] = r[1, 1] = r[2, 2] = 1.0
        p[:] = 0.0
        for b in range(len(first) - 1):
            _matvec3(r, body_pos[b], v)
            p += v
            _matmul3(r, body_rot[b], r2)
            r[:] = r2
            for j in range(first[b], first[b + 1]):
                _matvec3(r, jnt_pos[j], v)
                anchors[j] = p + v
                _matvec3(r, jnt_axis[j], axes[j])
                angle = q[n, qadr[j]] - qpos0[j]
                s, c = np.sin(angle), 1.0 - np.cos(angle)
                for a in range(3):
                    for e in range(3):
                        rj[a, e] = (1.0 if a == e else 0.0) + s * k[j, a, e] + c * kk[j, a, e]
                _matmul3(r, rj, r2)
                r[:] = r2
                _matvec3(r, jnt_pos[j], v)
                p[:] = anchors[j] - v
        _matvec3(r, site_pos, v)
        out_pos[n] = p + v
        _matmul3(r, site_rot, out_rot[n])
        if jacp.shape[0] > 0:
            for j in range(nj):
                d0 = out_pos[n, 0] - anchors[j, 0]
                d1 = out_pos[n, 1] - anchors[j, 1]
                d2 = out_pos[n, 2] - anchors[j, 2]
                a0, a1, a2 = axes[j, 0], axes[j, 1], axes[j, 2]
                dof = dofadr[j]
                jacp[n, 0, dof] = a1 * d2 - a2 * d1
                jacp[n, 1, dof] = a2 * d0 - a0 * d2
                jacp[n, 2, dof] = a0 * d1 - a1 * d0
                jacr[n, 0, dof], jacr[n, 1, dof], jacr[n, 2, dof] = a0, a1, a2


@njit(cache=True, inline="always")
def _matvec3(a, x, out):  # pragma: no cover - numba
    """out = a @ x for a 3 × 3 matrix and a 3-vector (out must not alias x)."""
    for i in range(3):
        out[i] = a[i, 0] * x[0] + a[i, 1] * x[1] + a[i, 2] * x[2]


@njit(cache=True, inline="always")
def _matmul3(a, b, out):  # pragma: no cover - numba
    """out = a @ b for 3 × 3 matrices (out must not alias a or b)."""
    for i in range(3):
        for e in range(3):
            out[i, e] = a[i, 0] * b[0, e] + a[i, 1] * b[1, e] + a[i, 2] * b[2, e]


def _quat_mat(quat: np.ndarray) -> np.ndarray:
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(quat, dtype=np.float64))
    return out.reshape(3, 3)


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
