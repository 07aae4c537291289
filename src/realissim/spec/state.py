"""A state of a scene to start an episode from: every object's pose and the arm's joints.

It is what `RealWorld.reset(to=...)`, the twin's reset and a task's start sets share. Velocities are zero
(everything at rest) and the arm holds its joints. Serialised with the scene codec (strict JSON).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from realissim.spec.errors import SpecError
from realissim.spec.scene import Pose, SceneSpec


@dataclass(frozen=True)
class StartState:
    """Objects at rest at `objects` (one pose each, the scene's object order) and the arm at rest holding
    joints `q` (rad, the robot's joint order)."""

    objects: tuple[Pose, ...]
    q: tuple[float, ...]

    def __post_init__(self) -> None:
        if not all(np.isfinite(self.q)):
            raise SpecError("q", f"joint positions must be finite, got {self.q}")
        for k, pose in enumerate(self.objects):
            if not all(np.isfinite(pose.pos)):
                raise SpecError(f"objects[{k}].pos", f"must be finite, got {pose.pos}")

    @staticmethod
    def of_scene(scene: SceneSpec) -> StartState:
        """The scene's own initial state: objects at their poses, the arm at `robot.home`."""
        return StartState(tuple(o.pose for o in scene.objects), tuple(float(v) for v in scene.robot.home))

    @staticmethod
    def from_arrays(object_pos: np.ndarray, object_quat: np.ndarray, q: np.ndarray) -> StartState:
        """From object positions (K,3) m, quaternions (K,4) wxyz (normalised here) and joints (J,) rad."""
        pos = np.asarray(object_pos, dtype=np.float64).reshape(-1, 3)
        quat = np.asarray(object_quat, dtype=np.float64).reshape(-1, 4)
        quat = quat / np.linalg.norm(quat, axis=1, keepdims=True)
        poses = tuple(
            Pose(tuple(float(v) for v in p), tuple(float(v) for v in r))  # type: ignore[arg-type]
            for p, r in zip(pos, quat, strict=True)
        )
        return StartState(poses, tuple(float(v) for v in np.asarray(q, dtype=np.float64)))

    @property
    def object_pos(self) -> np.ndarray:
        """(K, 3) object positions, m."""
        return np.array([p.pos for p in self.objects], dtype=np.float64).reshape(-1, 3)

    @property
    def object_quat(self) -> np.ndarray:
        """(K, 4) object orientations [w, x, y, z]."""
        return np.array([p.quat for p in self.objects], dtype=np.float64).reshape(-1, 4)

    @property
    def q_array(self) -> np.ndarray:
        """(J,) joint positions, rad."""
        return np.asarray(self.q, dtype=np.float64)

    def check(self, scene: SceneSpec) -> None:
        """Raise `SpecError` unless this state fits `scene` (one pose per object, one value per joint, joints
        within their limits)."""
        if len(self.objects) != len(scene.objects):
            raise SpecError(
                "objects", f"scene {scene.name!r} has {len(scene.objects)} objects, got {len(self.objects)}"
            )
        joints = scene.robot.joints
        if len(self.q) != len(joints):
            raise SpecError("q", f"robot has {len(joints)} joints, got {len(self.q)} values")
        for i, (value, joint) in enumerate(zip(self.q, joints, strict=True)):
            if not joint.lower <= value <= joint.upper:
                raise SpecError(f"q[{i}]", f"{joint.name} = {value:.4f} rad is outside [{joint.lower}, {joint.upper}]")
