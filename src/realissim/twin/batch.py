"""N independent twins of one scene, stepped together on a thread pool (`mujoco.batch.Batch`).

Same API as `TwinPhysics` with a leading batch axis B. Each simulation runs exactly as a lone
`TwinPhysics` would: MuJoCo's batch loads each simulation's integration state into an MjData, steps it
and saves it back, bit-identically to a loop over separate simulations at any thread count.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import mujoco
import mujoco.batch
import numpy as np
from numpy.typing import ArrayLike

from realissim.assets.mjcf import KEYFRAME_HOME
from realissim.spec.scene import SceneSpec
from realissim.twin.physics import (
    PhysicsConfig,
    PhysicsDivergedError,
    build_model,
    check_targets,
    check_wrench,
    diverged_body,
    target_velocity,
)
from realissim.twin.state import TwinLayout, TwinState, read_state, write_state


@dataclass(frozen=True)
class BatchSnapshot:
    """Copies of every simulation's integration state (B, nstate) at a frame boundary."""

    frame: int
    states: np.ndarray


class TwinBatch:
    """B twins of `scene`; `nthread` worker threads (0: one per CPU)."""

    def __init__(self, scene: SceneSpec, size: int, config: PhysicsConfig = PhysicsConfig(), nthread: int = 0) -> None:
        if size < 1:
            raise ValueError(f"batch size must be ≥ 1, got {size}")
        self.scene = scene
        self.config = config
        self.model = build_model(scene, config)
        self.layout = TwinLayout.from_model(self.model, scene.robot.joint_names, tuple(o.name for o in scene.objects))
        # Sleeping needs one MjData per simulation (its sleep state is not in the state rows).
        self.batch = mujoco.batch.Batch(self.model, nsim=size, nthread=nthread, persistent=config.sleep)
        self._time = self.batch.bind("time")
        self._qpos = self.batch.bind("qpos")
        self._qvel = self.batch.bind("qvel")
        self._ctrl = self.batch.bind("ctrl")
        self._xfrc = self.batch.bind("xfrc_applied")
        self._home = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, KEYFRAME_HOME)
        self.frame = 0
        self._history: collections.deque[BatchSnapshot] = collections.deque(maxlen=config.guard_history)
        self.reset()

    @property
    def size(self) -> int:
        """Number of twins B."""
        return self.batch.nsim

    @property
    def dt(self) -> float:
        """Frame duration, s."""
        return 1.0 / self.config.fps

    def reset(self, state: TwinState | None = None) -> None:
        """Reset every twin to the scene's initial state, or to `state` (fields with a leading axis B)."""
        self.batch.reset(keyframe=np.full(self.size, self._home, dtype=np.int32))
        if state is not None:
            write_state(self.layout, state, self._qpos, self._qvel, self._ctrl)
            self._time[:] = np.broadcast_to(state.time, (self.size,))
            self.batch.forward()
        self.frame = 0
        self._history.clear()

    def set_joint_targets(self, q_des: ArrayLike, qd_des: ArrayLike | None = None) -> np.ndarray:
        """Set desired joints (B, J) (or (J,) for all) and optionally velocities, as
        `TwinPhysics.set_joint_targets`; returns the q′ actually set (B, J). A plan of one frame."""
        velocity = None if qd_des is None else np.asarray(qd_des, dtype=np.float64)[None]
        commands, velocities = self.plan_targets(np.asarray(q_des, dtype=np.float64)[None], velocity)
        self.set_planned(commands[0], velocities[0])
        return commands[0].copy()

    def plan_targets(self, q_des: np.ndarray, qd_des: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Servo commands for n frames of desired joints (n, B, J) (or (n, J) for all twins), checked at once:
        (q′ clipped to the joint limits (n, B, J) rad, q̇′ rad/s), q̇′ `qd_des` if given (checked finite, clipped to
        the velocity limits), else each frame's finite difference from the frame before (from the current q′ for
        the first); give frame k's to `set_planned`. ValueError naming a non-finite target."""
        clipped, _ = check_targets(self.layout, q_des)
        clipped = np.broadcast_to(clipped, (*q_des.shape[:1], self.size, len(self.layout.actuators)))
        before = np.concatenate([self._ctrl[None, :, self.layout.actuators], clipped[:-1]])
        return clipped, target_velocity(self.model, self.layout, clipped, before, self.dt, qd_des)

    def set_planned(self, q_des: np.ndarray, qd_des: np.ndarray) -> None:
        """Set one frame of a `plan_targets` plan, (B, J) each, without checking it again."""
        self._ctrl[:, self.layout.dampers] = qd_des
        self._ctrl[:, self.layout.actuators] = q_des

    def object_poses(self) -> tuple[np.ndarray, np.ndarray]:
        """Every twin's object poses, (B, K, 3) m and (B, K, 4) wxyz (copies; the fields of `state()` alone)."""
        pose = self._qpos[:, self.layout.object_qpos]
        return pose[..., 0:3], pose[..., 3:7]

    def apply_wrenches(self, wrenches: ArrayLike) -> None:
        """World-frame wrenches (B, K, 6) = [force N, torque N·m] at each object's COM, next frame only."""
        w = np.asarray(wrenches, dtype=np.float64)
        shape = (self.size, len(self.layout.object_names), 6)
        if w.shape != shape:
            raise ValueError(f"wrenches must have shape {shape}, got {w.shape}")
        self._xfrc[:, self.layout.object_bodies] = check_wrench(w[..., :3], w[..., 3:])

    def step(self) -> None:
        """Advance every twin one frame; raises PhysicsDivergedError naming the first diverged twin."""
        if self.config.guard_history:
            self._history.append(self.snapshot())
        t_end = self._time + self.config.substeps * self.model.opt.timestep
        try:
            self.batch.step(nstep=self.config.substeps)
        except mujoco.batch.SimulationError as err:
            twin = int(err.ids[0])
            raise PhysicsDivergedError("world", self.frame + 1, f"twin {twin}: {err}", list(self._history)) from err
        self._xfrc[:, self.layout.object_bodies] = 0.0
        self.frame += 1
        # One test for the whole batch on the common path (NaN fails every comparison); per twin only on failure.
        speed, late = np.abs(self._qvel).max(), np.abs(self._time - t_end).max()
        if np.isfinite(self._qpos).all() and speed <= self.config.max_speed and late <= 1e-9:
            return
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(self._qpos).all(axis=1) & (np.abs(self._qvel).max(axis=1) <= self.config.max_speed)
        ok &= np.abs(self._time - t_end) <= 1e-9
        if not ok.all():
            b = int(np.argmin(ok))
            problem = diverged_body(self.model, self.layout, self._qpos[b], self._qvel[b], self.config.max_speed)
            body, reason = problem or ("world", "MuJoCo reset the simulation (bad accelerations)")
            raise PhysicsDivergedError(body, self.frame, f"twin {b}: {reason}", list(self._history))

    @property
    def time(self) -> np.ndarray:
        """(B,) every twin's time, s (a copy)."""
        return self._time.copy()

    @property
    def qpos(self) -> np.ndarray:
        """(B, nq) every twin's MuJoCo positions (a copy), e.g. for body poses by kinematics."""
        return self._qpos.copy()

    def state(self) -> TwinState:
        """The current state of every twin, fields with a leading axis B (copies)."""
        return read_state(self.layout, self._time, self._qpos, self._qvel, self._ctrl)

    def snapshot(self) -> BatchSnapshot:
        """Copies of all twins' integration states."""
        return BatchSnapshot(self.frame, self.batch.state.copy())

    def restore(self, snap: BatchSnapshot) -> None:
        """Return exactly to a snapshot."""
        if snap.states.shape != self.batch.state.shape:
            raise ValueError(f"snapshot shape {snap.states.shape} != batch state {self.batch.state.shape}")
        if self.config.sleep:
            self.batch.reset(stage=mujoco.mjtStage.mjSTAGE_NONE)  # every tree awake, as `TwinPhysics.restore`
        self.batch.state[:] = snap.states
        self.frame = snap.frame
