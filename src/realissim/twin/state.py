"""The twin's state as arrays, and where each piece lives in MuJoCo's qpos / qvel / ctrl.

The same reading code serves one twin (arrays without a batch axis) and a batch of twins (a leading
batch axis `B`), so both report identical values for identical simulations.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from realissim.geometry import quat_to_mat
from realissim.spec.state import StartState


@dataclass(frozen=True)
class TwinLayout:
    """Indices of the robot and the objects in a compiled model (see `TwinLayout.from_model`)."""

    joint_names: tuple[str, ...]
    object_names: tuple[str, ...]
    robot_qpos: np.ndarray
    """(J,) qpos addresses of the robot joints, in joint order."""
    robot_dof: np.ndarray
    """(J,) qvel addresses of the robot joints."""
    actuators: np.ndarray
    """(J,) ids of the position servos (targets q′)."""
    dampers: np.ndarray
    """(J,) ids of the velocity servos (targets q̇′)."""
    object_qpos: np.ndarray
    """(K, 7) qpos addresses of each object's free joint: position (3) then quaternion (4)."""
    object_dof: np.ndarray
    """(K, 6) qvel addresses: world linear velocity (3) then body-frame angular velocity (3)."""
    object_bodies: np.ndarray
    """(K,) body ids of the objects."""
    q_lower: np.ndarray
    q_upper: np.ndarray

    @staticmethod
    def from_model(model: mujoco.MjModel, joint_names: tuple[str, ...], object_names: tuple[str, ...]) -> TwinLayout:
        """Look the named joints (with their servos) and free-jointed objects up in `model`."""
        jids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in joint_names]
        missing = [n for n, j in zip(joint_names, jids) if j < 0]
        if missing:
            raise KeyError(f"model has no joints {missing}")
        actuators = [_servo(model, name, j, "position") for name, j in zip(joint_names, jids)]
        dampers = [_servo(model, name, j, "velocity") for name, j in zip(joint_names, jids)]
        bodies = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n) for n in object_names]
        qpos_rows, dof_rows = [], []
        for name, b in zip(object_names, bodies):
            if b < 0 or model.body_jntnum[b] != 1 or model.jnt_type[model.body_jntadr[b]] != mujoco.mjtJoint.mjJNT_FREE:
                raise KeyError(f"object {name!r} is not a free body in the model")
            j = model.body_jntadr[b]
            qpos_rows.append(np.arange(model.jnt_qposadr[j], model.jnt_qposadr[j] + 7))
            dof_rows.append(np.arange(model.jnt_dofadr[j], model.jnt_dofadr[j] + 6))
        return TwinLayout(
            joint_names=tuple(joint_names),
            object_names=tuple(object_names),
            robot_qpos=np.asarray(model.jnt_qposadr[jids], dtype=np.intp),
            robot_dof=np.asarray(model.jnt_dofadr[jids], dtype=np.intp),
            actuators=np.asarray(actuators, dtype=np.intp),
            dampers=np.asarray(dampers, dtype=np.intp),
            object_qpos=np.asarray(qpos_rows, dtype=np.intp).reshape(-1, 7),
            object_dof=np.asarray(dof_rows, dtype=np.intp).reshape(-1, 6),
            object_bodies=np.asarray(bodies, dtype=np.intp),
            q_lower=model.jnt_range[jids, 0].copy(),
            q_upper=model.jnt_range[jids, 1].copy(),
        )

    def object_index(self, obj: str | int) -> int:
        """Index of an object given by name or index; KeyError / IndexError if there is none."""
        if isinstance(obj, str):
            if obj not in self.object_names:
                raise KeyError(f"no object {obj!r}; objects are {list(self.object_names)}")
            return self.object_names.index(obj)
        if not 0 <= obj < len(self.object_names):
            raise IndexError(f"object index {obj} out of range [0, {len(self.object_names)})")
        return int(obj)


def _servo(model: mujoco.MjModel, joint_name: str, joint_id: int, kind: str) -> int:
    """The actuator of `kind` ("position": bias on q, "velocity": bias on q̇ only) driving a joint."""
    for a in range(model.nu):
        if model.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT or model.actuator_trnid[a, 0] != joint_id:
            continue
        on_position = model.actuator_biasprm[a, 1] != 0
        if (kind == "position") == on_position:
            return a
    raise KeyError(f"joint {joint_name!r} has no {kind} actuator")


@dataclass(frozen=True)
class TwinState:
    """One twin's (or a batch's, with a leading axis B) state at a frame boundary.

    Objects (K of them, in scene order): body-frame pose in the world and velocities in the world frame
    (linear velocity of the body origin, m/s; angular velocity, rad/s). Robot (J joints, model order):
    actual positions q (rad) and velocities q̇ (rad/s), and the servo targets q′ (rad) and q̇′ (rad/s).
    """

    time: np.ndarray
    """() or (B,) simulated time, s."""
    object_pos: np.ndarray
    """(..., K, 3) m."""
    object_quat: np.ndarray
    """(..., K, 4) [w, x, y, z]."""
    object_linvel: np.ndarray
    """(..., K, 3) m/s, world frame."""
    object_angvel: np.ndarray
    """(..., K, 3) rad/s, world frame."""
    q: np.ndarray
    """(..., J) rad."""
    qd: np.ndarray
    """(..., J) rad/s."""
    q_des: np.ndarray
    """(..., J) desired positions, rad."""
    qd_des: np.ndarray
    """(..., J) desired velocities, rad/s."""


def read_state(layout: TwinLayout, time: np.ndarray, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> TwinState:
    """Assemble a TwinState (copies) from MuJoCo arrays with any leading batch shape."""
    pose = qpos[..., layout.object_qpos]
    vel = qvel[..., layout.object_dof]
    quat = pose[..., 3:7]
    ang_local = vel[..., 3:6]
    ang_world = np.einsum("...ij,...j->...i", quat_to_mat(quat), ang_local) if quat.size else ang_local.copy()
    return TwinState(
        time=np.array(time, dtype=np.float64),
        object_pos=pose[..., 0:3].copy(),
        object_quat=quat.copy(),
        object_linvel=vel[..., 0:3].copy(),
        object_angvel=ang_world,
        q=qpos[..., layout.robot_qpos].copy(),
        qd=qvel[..., layout.robot_dof].copy(),
        q_des=ctrl[..., layout.actuators].copy(),
        qd_des=ctrl[..., layout.dampers].copy(),
    )


def write_state(layout: TwinLayout, state: TwinState, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> None:
    """Write a TwinState into MuJoCo arrays (in place), the inverse of `read_state`."""
    for name in ("object_pos", "object_quat", "object_linvel", "object_angvel", "q", "qd", "q_des", "qd_des"):
        if not np.all(np.isfinite(getattr(state, name))):
            raise ValueError(f"TwinState.{name} contains NaN or inf")
    quat = state.object_quat / np.linalg.norm(state.object_quat, axis=-1, keepdims=True)
    qpos[..., layout.object_qpos[:, 0:3]] = state.object_pos
    qpos[..., layout.object_qpos[:, 3:7]] = quat
    qvel[..., layout.object_dof[:, 0:3]] = state.object_linvel
    rot = quat_to_mat(quat)
    qvel[..., layout.object_dof[:, 3:6]] = np.einsum("...ji,...j->...i", rot, state.object_angvel)
    qpos[..., layout.robot_qpos] = state.q
    qvel[..., layout.robot_dof] = state.qd
    ctrl[..., layout.actuators] = state.q_des
    ctrl[..., layout.dampers] = state.qd_des


def rest_state(start: StartState | list[StartState]) -> TwinState:
    """The twin state of a start state (or of B of them, stacked on a leading axis): objects and arm at rest,
    the servos holding the start joints, time 0."""
    starts = [start] if isinstance(start, StartState) else list(start)
    pos = np.stack([s.object_pos for s in starts])
    quat = np.stack([s.object_quat for s in starts])
    q = np.stack([s.q_array for s in starts])
    batch = not isinstance(start, StartState)
    pick = (lambda a: a) if batch else (lambda a: a[0])
    return TwinState(
        time=np.zeros(len(starts)) if batch else np.float64(0.0),
        object_pos=pick(pos),
        object_quat=pick(quat),
        object_linvel=pick(np.zeros_like(pos)),
        object_angvel=pick(np.zeros_like(pos)),
        q=pick(q),
        qd=pick(np.zeros_like(q)),
        q_des=pick(q.copy()),
        qd_des=pick(np.zeros_like(q)),
    )
