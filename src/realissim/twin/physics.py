"""The twin's physics: one MuJoCo simulation of a scene, stepped in frames of 1/fps s.

`PhysicsConfig.fps` (60 by default) is the one place the system's frame rate is set; the runtime passes it
down to everything that needs the frame period.

Per frame the caller may set the robot's desired joints q′ and a world-frame wrench on each object
(the visual wrench, acting at the object's centre of mass for that frame only), then `step()` runs
`substeps` physics steps. `snapshot()` / `restore()` copy the complete integration state, so a restored
twin continues bit-identically. A guard checks every frame for NaN, a reset by MuJoCo, or runaway
speeds, and raises `PhysicsDivergedError` naming the body and frame, keeping the last good states.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from realissim.assets.mjcf import KEYFRAME_HOME, MjcfOptions, scene_to_mjcf
from realissim.spec.scene import SceneSpec
from realissim.twin.state import TwinLayout, TwinState, read_state, write_state

STATE_SPEC = mujoco.mjtState.mjSTATE_INTEGRATION


FRAME_RATE = 60.0
"""Frames per second of the twin (and so of the loop, the follower and a simulated world), unless configured:
the paper's 60 Hz. Everything else is given the frame period it runs at, or defaults to this."""


@dataclass(frozen=True)
class PhysicsConfig:
    """Frame rate, substeps and servo gains of the twin's physics."""

    fps: float = FRAME_RATE
    """Frames per second; one `step()` advances 1/fps s."""
    substeps: int = 4
    """Physics steps per frame (timestep = 1 / (fps · substeps))."""
    mjcf: MjcfOptions = field(default_factory=MjcfOptions)
    """Model options; its timestep is overridden by fps and substeps."""
    guard_history: int = 30
    """Frames of good states the divergence guard keeps for inspection (0: none)."""
    max_speed: float = 50.0
    """A body moving faster than this (m/s or rad/s) counts as diverged."""
    sleep: bool = False
    """Let a resting object sleep (MuJoCo's island sleeping, `mjENBL_SLEEP`): an object slower than 1 mm/s for 10
    physics steps is frozen where it is and costs no collision or constraint work (40 contacts on the table for
    the T) until something touches it, a force is applied to it or its pose is written (the engine wakes it at
    the next step). An offline twin's physics step then costs about a fifth while the object rests
    (docs/decisions.md, "Offline evaluation: resting objects sleep"). For offline twins only: the online twin's
    object is corrected every frame and sleeping was validated offline (`Env` refuses it online)."""

    def __post_init__(self) -> None:
        if not self.fps > 0 or self.substeps < 1:
            raise ValueError(f"PhysicsConfig: need fps > 0 and substeps ≥ 1, got {self.fps}, {self.substeps}")

    @property
    def timestep(self) -> float:
        """Physics step, s."""
        return 1.0 / (self.fps * self.substeps)

    def mjcf_options(self) -> MjcfOptions:
        """The MJCF options with this config's timestep."""
        return MjcfOptions(
            timestep=self.timestep,
            kp=self.mjcf.kp,
            kv=self.mjcf.kv,
            integrator=self.mjcf.integrator,
            cone=self.mjcf.cone,
            gravity=self.mjcf.gravity,
        )


class PhysicsDivergedError(RuntimeError):
    """The simulation produced NaN/inf or runaway speeds. `history` holds snapshots of the last good
    frames, oldest first, each restorable with `TwinPhysics.restore`; each includes the targets and
    wrenches pending at that frame, so restoring the last one and stepping replays the failure."""

    def __init__(self, body: str, frame: int, reason: str, history: list[Snapshot]) -> None:
        self.body = body
        self.frame = frame
        self.history = history
        super().__init__(
            f"physics diverged at frame {frame} on body {body!r}: {reason}; "
            f"{len(history)} last good states kept in .history"
        )


@dataclass(frozen=True)
class Snapshot:
    """A complete copy of a twin's integration state (mjSTATE_INTEGRATION) at a frame boundary."""

    frame: int
    state: np.ndarray


def build_model(scene: SceneSpec, config: PhysicsConfig) -> mujoco.MjModel:
    """Compile the MuJoCo model of `scene` with `config`'s timestep and gains (and sleeping, `config.sleep`)."""
    model = mujoco.MjModel.from_xml_string(scene_to_mjcf(scene, config.mjcf_options()))
    if config.sleep:
        model.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_SLEEP
    return model


def check_targets(layout: TwinLayout, q_des: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validate desired joints (..., J): finite, right shape. Returns (clipped to limits, clipped mask)."""
    q = np.asarray(q_des, dtype=np.float64)
    if q.shape[-1:] != (len(layout.joint_names),):
        raise ValueError(f"joint targets must have last axis {len(layout.joint_names)}, got shape {q.shape}")
    bad = ~np.isfinite(q)
    if bad.any():
        j = int(np.argwhere(bad)[0][-1])
        raise ValueError(f"joint target for {layout.joint_names[j]!r} is not finite ({q[np.nonzero(bad)][0]})")
    clipped = np.clip(q, layout.q_lower, layout.q_upper)
    return clipped, clipped != q


def target_velocity(
    model: mujoco.MjModel, layout: TwinLayout, q_new: np.ndarray, q_old: np.ndarray, dt: float, qd_des: ArrayLike | None
) -> np.ndarray:
    """Desired joint velocities (..., J): `qd_des` if given (checked finite), else the finite difference
    (q_new − q_old) / dt; either way clipped to the joints' velocity limits."""
    if qd_des is None:
        qd = (q_new - q_old) / dt
    else:
        qd = np.asarray(qd_des, dtype=np.float64)
        if qd.shape[-1:] != q_new.shape[-1:] or not np.all(np.isfinite(qd)):
            raise ValueError(f"joint velocity targets must be finite with last axis {q_new.shape[-1]}")
    vmax = model.actuator_ctrlrange[layout.dampers, 1]
    return np.clip(qd, -vmax, vmax)


def check_wrench(force_W: ArrayLike, torque_W: ArrayLike) -> np.ndarray:
    """Validate a world-frame force (..., 3) N and torque (..., 3) N·m; returns them stacked (..., 6)."""
    f = np.asarray(force_W, dtype=np.float64)
    t = np.asarray(torque_W, dtype=np.float64)
    if f.shape[-1:] != (3,) or t.shape[-1:] != (3,):
        raise ValueError(f"force and torque need a last axis of 3, got {f.shape} and {t.shape}")
    w = np.concatenate(np.broadcast_arrays(f, t), axis=-1)
    if not np.all(np.isfinite(w)):
        raise ValueError("wrench contains NaN or inf")
    return w


def diverged_body(
    model: mujoco.MjModel, layout: TwinLayout, qpos: np.ndarray, qvel: np.ndarray, max_speed: float
) -> tuple[str, str] | None:
    """(body name, reason) of the first object or robot found non-finite or too fast, else None."""
    for k, name in enumerate(layout.object_names):
        p, v = qpos[layout.object_qpos[k]], qvel[layout.object_dof[k]]
        if not (np.all(np.isfinite(p)) and np.all(np.isfinite(v))):
            return name, "non-finite pose or velocity"
        if np.max(np.abs(v)) > max_speed:
            return name, f"speed {np.max(np.abs(v)):.3g} exceeds {max_speed}"
    if not (np.all(np.isfinite(qpos)) and np.all(np.isfinite(qvel))):
        return "robot", "non-finite joint state"
    if np.max(np.abs(qvel[layout.robot_dof]), initial=0.0) > max_speed:
        j = int(np.argmax(np.abs(qvel[layout.robot_dof])))
        body = mujoco.mj_id2name(
            model, mujoco.mjtObj.mjOBJ_BODY, model.jnt_bodyid[model.dof_jntid[layout.robot_dof[j]]]
        )
        return body or "robot", f"joint speed {abs(qvel[layout.robot_dof[j]]):.3g} rad/s exceeds {max_speed}"
    return None


class TwinPhysics:
    """One twin: the scene's MuJoCo model and data, stepped frame by frame (see module docstring)."""

    def __init__(self, scene: SceneSpec, config: PhysicsConfig = PhysicsConfig()) -> None:
        self.scene = scene
        self.config = config
        self.model = build_model(scene, config)
        self.data = mujoco.MjData(self.model)
        self.layout = TwinLayout.from_model(self.model, scene.robot.joint_names, tuple(o.name for o in scene.objects))
        self.frame = 0
        self._home = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, KEYFRAME_HOME)
        self._nstate = mujoco.mj_stateSize(self.model, STATE_SPEC)
        self._history: collections.deque[Snapshot] = collections.deque(maxlen=config.guard_history)
        self.reset()

    @property
    def dt(self) -> float:
        """Frame duration, s."""
        return 1.0 / self.config.fps

    def reset(self, state: TwinState | None = None) -> None:
        """Reset to the scene's initial state (robot at home, objects at their poses, at rest) or to
        `state`; clears pending wrenches, the frame counter and the guard's history."""
        mujoco.mj_resetDataKeyframe(self.model, self.data, self._home)
        if state is not None:
            write_state(self.layout, state, self.data.qpos, self.data.qvel, self.data.ctrl)
            self.data.time = float(state.time)
        mujoco.mj_forward(self.model, self.data)
        self.frame = 0
        self._history.clear()

    def set_joint_targets(self, q_des: ArrayLike, qd_des: ArrayLike | None = None) -> np.ndarray:
        """Set the robot's desired joints q′ (J,) rad and velocities q̇′ (J,) rad/s.

        Without `qd_des`, q̇′ is the change of q′ since the last call over one frame. Values beyond the
        joint position and velocity limits are clipped; returns the q′ actually set. Raises ValueError
        for NaN/inf or a wrong shape.
        """
        clipped, _ = check_targets(self.layout, q_des)
        ctrl = self.data.ctrl
        ctrl[self.layout.dampers] = target_velocity(
            self.model, self.layout, clipped, ctrl[self.layout.actuators], self.dt, qd_des
        )
        ctrl[self.layout.actuators] = clipped
        return clipped

    def set_robot(self, q: ArrayLike) -> np.ndarray:
        """Put the robot's joints at q (J,) rad (clipped to their limits), at rest, with q′ = q and q̇′ = 0 (it
        holds there), then `mj_forward`; returns the q set. For re-acquisition: the twin arm moved to the real
        arm's measured joints. Raises ValueError for NaN/inf or a wrong shape."""
        clipped, _ = check_targets(self.layout, q)
        d = self.data
        d.qpos[self.layout.robot_qpos] = clipped
        d.qvel[self.layout.robot_dof] = 0.0
        d.qacc_warmstart[self.layout.robot_dof] = 0.0
        self.set_joint_targets(clipped, np.zeros_like(clipped))
        mujoco.mj_forward(self.model, d)
        return clipped

    def apply_wrench(self, obj: str | int, force_W: ArrayLike, torque_W: ArrayLike) -> None:
        """Apply force (3,) N and torque (3,) N·m, world frame, at the object's centre of mass during
        the next frame only; replaces any wrench already pending on that object."""
        k = self.layout.object_index(obj)
        self.data.xfrc_applied[self.layout.object_bodies[k]] = check_wrench(force_W, torque_W)

    def apply_wrenches(self, wrenches: ArrayLike) -> None:
        """Apply world-frame wrenches (K, 6) = [force N, torque N·m] to all objects for the next frame."""
        w = np.asarray(wrenches, dtype=np.float64)
        if w.shape != (len(self.layout.object_names), 6):
            raise ValueError(f"wrenches must have shape ({len(self.layout.object_names)}, 6), got {w.shape}")
        self.data.xfrc_applied[self.layout.object_bodies] = check_wrench(w[:, :3], w[:, 3:])

    def step(self) -> None:
        """Advance one frame (`substeps` physics steps); raises PhysicsDivergedError on divergence."""
        if self.config.guard_history:
            self._history.append(self.snapshot())
        t_end = self.data.time + self.config.substeps * self.model.opt.timestep
        mujoco.mj_step(self.model, self.data, nstep=self.config.substeps)
        self.data.xfrc_applied[self.layout.object_bodies] = 0.0
        self.frame += 1
        problem = diverged_body(self.model, self.layout, self.data.qpos, self.data.qvel, self.config.max_speed)
        if problem is None and abs(self.data.time - t_end) > 1e-9:
            problem = ("world", "MuJoCo reset the simulation (bad accelerations)")
        if problem is not None:
            raise PhysicsDivergedError(problem[0], self.frame, problem[1], list(self._history))

    def state(self) -> TwinState:
        """The current state (copies)."""
        d = self.data
        return read_state(self.layout, np.float64(d.time), d.qpos, d.qvel, d.ctrl)

    def snapshot(self) -> Snapshot:
        """A complete copy of the integration state, for `restore`."""
        buf = np.empty(self._nstate)
        mujoco.mj_getState(self.model, self.data, buf, STATE_SPEC)
        return Snapshot(self.frame, buf)

    def restore(self, snap: Snapshot) -> None:
        """Return exactly to a snapshot; continuing from it reproduces the original run bit for bit. With
        `config.sleep`, every object is awake after it (a snapshot does not hold the sleep state), so a run in which
        an object slept continues differently, by the object's creep at rest."""
        if snap.state.shape != (self._nstate,):
            raise ValueError(f"snapshot has {snap.state.shape} values, this model needs ({self._nstate},)")
        if self.config.sleep:
            mujoco.mj_resetData(self.model, self.data)  # every tree awake: the same start however the run slept
        mujoco.mj_setState(self.model, self.data, snap.state, STATE_SPEC)
        mujoco.mj_kinematics(self.model, self.data)
        self.frame = snap.frame

    def replica(self) -> TwinPhysics:
        """A second twin over the same model with data of its own, a copy of this one's now: what a reader in
        another thread works on (the correction beside the loop) while this twin steps on. `copy_from` brings it up
        to date; stepping it does not touch this twin."""
        other = object.__new__(TwinPhysics)
        other.__dict__.update(self.__dict__)
        other.data = mujoco.MjData(self.model)
        other._history = collections.deque(maxlen=self.config.guard_history)
        other.copy_from(self)
        return other

    def copy_from(self, other: TwinPhysics) -> None:
        """Make this twin's data an exact copy of `other`'s (same model): state, contacts, pending wrenches."""
        if other.model is not self.model:
            raise ValueError("copy_from: the twins must share one model (see `replica`)")
        mujoco.mj_copyData(self.data, self.model, other.data)
        self.frame = other.frame

    def site_pose(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """World position (3,) and rotation matrix (3, 3) of a site at the current state."""
        sid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, name)
        if sid < 0:
            raise KeyError(f"model has no site {name!r}")
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[sid].copy(), self.data.site_xmat[sid].reshape(3, 3).copy()
