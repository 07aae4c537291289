"""The only ways the twin touches the real world: a Robot and Cameras (DESIGN.md §3, §4).

Units: rad, rad/s, s; images uint8 H×W×3 RGB; cameras in OpenCV axes with K (px) and camera-to-world
X_WC. Every reading carries a timestamp in seconds on the clock the runtime owns (`Clock`), taken
when the measurement was made, not when it was read. Hardware adapters and the surrogate world
implement these classes; nothing else crosses the sim–real boundary.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType

import numpy as np
from numpy.typing import ArrayLike

from realissim.spec.scene import RobotSpec


class Clock(ABC):
    """The runtime's time base, seconds."""

    @abstractmethod
    def now(self) -> float:
        """Current time, s."""


class WallClock(Clock):
    """Monotonic wall-clock time (time.monotonic), s."""

    def now(self) -> float:
        return time.monotonic()


@dataclass(frozen=True)
class JointState:
    """A robot reading: stamp (s, runtime clock), joint positions q (7,) rad and velocities qd (7,) rad/s."""

    stamp: float
    q: np.ndarray
    qd: np.ndarray


@dataclass(frozen=True)
class CameraFrame:
    """A camera reading: stamp (s, runtime clock, exposure time), index (frames since start, gaps mean
    dropped frames), image uint8 (H, W, 3) RGB."""

    stamp: float
    index: int
    image: np.ndarray


@dataclass(frozen=True)
class RobotDescription:
    """What a robot is, known without connecting: joint names (in command order), position limits (rad),
    and velocity (rad/s), acceleration (rad/s²) and jerk (rad/s³) limits, each (7,)."""

    joint_names: tuple[str, ...]
    q_lower: np.ndarray
    q_upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    jerk: np.ndarray

    @property
    def dof(self) -> int:
        return len(self.joint_names)

    @staticmethod
    def from_spec(robot: RobotSpec) -> RobotDescription:
        """The description of a scene's robot, from its joints' limits."""
        joints = robot.joints
        return RobotDescription(
            joint_names=tuple(j.name for j in joints),
            q_lower=np.array([j.lower for j in joints]),
            q_upper=np.array([j.upper for j in joints]),
            velocity=np.array([j.velocity for j in joints]),
            acceleration=np.array([j.acceleration for j in joints]),
            jerk=np.array([j.jerk for j in joints]),
        )


class NotConnectedError(RuntimeError):
    """A device was used before `connect()` or after `close()`."""


class Robot(ABC):
    """A position-controlled arm. Use as a context manager (connects on enter, closes on exit)."""

    description: RobotDescription

    @abstractmethod
    def connect(self) -> None:
        """Open the connection; idempotent."""

    @abstractmethod
    def close(self) -> None:
        """Stop streaming and release the connection; idempotent, safe after errors."""

    @abstractmethod
    def read(self) -> JointState:
        """The latest measured joint state."""

    @abstractmethod
    def command(self, q_target: ArrayLike) -> np.ndarray:
        """Stream one joint position target (7,) rad; returns the target actually sent (after clipping
        to the joint limits). Targets must be smooth: use the follower, never raw steps."""

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Camera(ABC):
    """An RGB camera with known intrinsics and pose (what the twin is told; reality may differ slightly)."""

    name: str
    width: int
    height: int
    K: np.ndarray
    """(3, 3) intrinsics, px."""
    X_WC: np.ndarray
    """(4, 4) camera-to-world pose, OpenCV axes."""

    @abstractmethod
    def read(self) -> CameraFrame:
        """The latest frame; raises `CameraStalledError` if the camera has stopped delivering frames."""


class CameraStalledError(RuntimeError):
    """A camera delivered no new frame within its timeout."""
