"""The expert's model of pushing: the scene's objects and table as the twin simulates them, with the arm replaced
by a free-floating vertical rod driven in the table plane, rolled out in parallel (`mujoco.rollout`).

The objects, the table and their contact parameters come from the same MJCF generator as the twin
(`scene_to_mjcf`), so a push judged here behaves as it would in the twin; only the arm is left out (its rod is
driven by stiff planar servos instead of the joint servos, so a tip path is followed without inverse kinematics).
The rod touches objects only (not the table), at a fixed height.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import mujoco
import mujoco.rollout
import numpy as np
from numpy.typing import ArrayLike

from realissim.assets import panda
from realissim.assets.mjcf import scene_to_mjcf
from realissim.spec.scene import SceneSpec
from realissim.twin.physics import PhysicsConfig

ROD_BODY = "planner_rod"


@dataclass(frozen=True)
class PushModelConfig:
    """The planar rod of the push model."""

    height: float = 0.015
    """Height of the rod's tip centre above the table, m (the pushing height)."""
    mass: float = 2.0
    """Mass of the rod body, kg."""
    stiffness: float = 10000.0
    """Planar servo stiffness, N/m (natural frequency √(k/m) = 71 rad/s with the default mass)."""
    nthread: int = 0
    """Rollout threads (0: one per CPU)."""


def _planning_mjcf(scene: SceneSpec, physics: PhysicsConfig, config: PushModelConfig) -> str:
    """The twin's MJCF without the arm (its bodies, actuators and keyframe), plus a planar rod."""
    root = ET.fromstring(scene_to_mjcf(scene, physics.mjcf_options()))
    world = root.find("worldbody")
    assert world is not None
    for body in list(world.findall("body")):
        if body.get("name") == panda.LINK_NAMES[0]:
            world.remove(body)
    for tag in ("actuator", "keyframe"):
        for el in root.findall(tag):
            root.remove(el)
    radius = scene.robot.pusher.radius if scene.robot.pusher else 0.01
    length = scene.robot.pusher.length if scene.robot.pusher else 0.2
    rod = ET.SubElement(world, "body", name=ROD_BODY, pos=f"0 0 {config.height!r}")
    damping = 2.0 * math.sqrt(config.stiffness * config.mass)
    for axis, name in (("1 0 0", "rod_x"), ("0 1 0", "rod_y")):
        ET.SubElement(rod, "joint", name=name, type="slide", axis=axis, damping=repr(damping))
    ET.SubElement(rod, "inertial", pos="0 0 0", mass=repr(config.mass), diaginertia="0.01 0.01 0.01")
    # contype 2 against the objects' conaffinity 3; conaffinity 0: never touches the table.
    ET.SubElement(rod, "geom", name="planner_rod_geom", type="capsule", fromto=f"0 0 0 0 0 {length!r}",
                  size=repr(radius), contype="2", conaffinity="0", mass="0")  # fmt: skip
    act = ET.SubElement(root, "actuator")
    for name in ("rod_x", "rod_y"):
        ET.SubElement(act, "position", name=name, joint=name, kp=repr(config.stiffness))
    return ET.tostring(root, encoding="unicode")


class PushModel:
    """Roll out planar rod paths against the scene's objects, many at once.

    State layout: the objects' free joints as in the twin (position (3), quaternion (4) wxyz each, world frame),
    then the rod's x, y (m, world frame).
    """

    def __init__(
        self, scene: SceneSpec, physics: PhysicsConfig = PhysicsConfig(), config: PushModelConfig = PushModelConfig()
    ) -> None:
        self.scene, self.physics, self.config = scene, physics, config
        self.model = mujoco.MjModel.from_xml_string(_planning_mjcf(scene, physics, config))
        self.substeps = physics.substeps
        self.dt = 1.0 / physics.fps
        """Time between the rows of a path, s (one twin frame)."""
        nthread = config.nthread or max(1, os.cpu_count() or 1)
        self._datas = [mujoco.MjData(self.model) for _ in range(nthread)]
        self._spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self._nstate = mujoco.mj_stateSize(self.model, self._spec)
        rod_x = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, "rod_x")
        self._rod_qpos = int(self.model.jnt_qposadr[rod_x])
        self._obj_qpos = []
        for obj in scene.objects:
            body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, obj.name)
            self._obj_qpos.append(int(self.model.jnt_qposadr[self.model.body_jntadr[body]]))

    def initial_state(self, object_pos: ArrayLike, object_quat: ArrayLike, rod_xy: ArrayLike) -> np.ndarray:
        """The full physics state (nstate,) with objects at rest at `object_pos` (K, 3) m, `object_quat` (K, 4)
        and the rod at rest at `rod_xy` (2,) m."""
        data = self._datas[0]
        mujoco.mj_resetData(self.model, data)
        pos, quat = np.asarray(object_pos, dtype=np.float64), np.asarray(object_quat, dtype=np.float64)
        for k, adr in enumerate(self._obj_qpos):
            data.qpos[adr : adr + 3] = pos[k]
            data.qpos[adr + 3 : adr + 7] = quat[k] / np.linalg.norm(quat[k])
        data.qpos[self._rod_qpos : self._rod_qpos + 2] = np.asarray(rod_xy, dtype=np.float64)[:2]
        data.ctrl[:] = data.qpos[self._rod_qpos : self._rod_qpos + 2]
        state = np.empty(self._nstate)
        mujoco.mj_getState(self.model, data, state, self._spec)
        return state

    def rollout(self, state: ArrayLike, paths: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Final object poses after following each rod path from `state` ((nstate,) shared, or (N, nstate) one per
        path; see `initial_state`).

        `paths` (N, T, 2) m: the rod's planar target at each of T frames of `dt` s (held for the frame's
        substeps). Returns object positions (N, K, 3) m and quaternions (N, K, 4) after the last frame, and the
        rod's final positions (N, 2) m.
        """
        p = np.asarray(paths, dtype=np.float64)
        if p.ndim != 3 or p.shape[2] != 2:
            raise ValueError(f"paths must have shape (N, T, 2), got {p.shape}")
        states = np.asarray(state, dtype=np.float64)
        if states.shape not in ((self._nstate,), (len(p), self._nstate)):
            raise ValueError(f"state must be ({self._nstate},) or ({len(p)}, {self._nstate}), got {states.shape}")
        control = np.repeat(p, self.substeps, axis=1)  # (N, T·substeps, 2)
        initial = np.broadcast_to(states, (len(p), self._nstate))
        out, _ = mujoco.rollout.rollout(self.model, self._datas, initial, control)
        final = out[:, -1, 1 : 1 + self.model.nq]  # state row: time, qpos, qvel, ...
        pos = np.stack([final[:, a : a + 3] for a in self._obj_qpos], axis=1)
        quat = np.stack([final[:, a + 3 : a + 7] for a in self._obj_qpos], axis=1)
        return pos, quat, final[:, self._rod_qpos : self._rod_qpos + 2]
