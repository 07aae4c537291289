"""The only ways the twin touches the real world: a `RealWorld` of a Robot and Cameras (docs/design.md §3, §4).

Units: rad, rad/s, s; images uint8 H×W×3 RGB; cameras in OpenCV axes with K (px) and camera-to-world
X_WC. Every reading carries a timestamp in seconds on the clock the runtime owns (`Clock`), taken
when the measurement was made, not when it was read. Hardware adapters and the surrogate world
implement these classes; nothing else crosses the sim–real boundary. The oracle (ground truth) is an
optional part of a world for evaluation only: nothing the twin or a policy runs may read it.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np
from numpy.typing import ArrayLike

from realissim.spec.board import DotBoard
from realissim.spec.scene import RobotSpec
from realissim.spec.state import StartState


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
    def command(self, q: ArrayLike) -> np.ndarray:
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


@dataclass(frozen=True)
class OracleState:
    """Ground truth at `time` s, for evaluation only: objects (scene order) and the arm's true joints."""

    time: float
    object_names: tuple[str, ...]
    object_pos: np.ndarray
    """(K, 3) body origin in the world, m."""
    object_quat: np.ndarray
    """(K, 4) body orientation [w, x, y, z]."""
    q: np.ndarray
    """(J,) true joint positions, rad (encoders may read them with an offset)."""
    qd: np.ndarray
    """(J,) joint velocities, rad/s."""
    q_command: np.ndarray
    """(J,) the command the arm's controller is acting on now, rad."""


class Oracle(ABC):
    """Ground truth of a world (a simulator's, or a motion-capture system's). Evaluation only."""

    @abstractmethod
    def read(self) -> OracleState:
        """The true state now."""


class RealWorld(ABC):
    """A real world as the runtime sees it: a robot, cameras, a clock, and (evaluation only) an oracle.

    Use as a context manager (started on enter, closed on exit). Lock-step worlds (`lockstep` True: a
    simulator standing in for reality) advance one frame per `step()`; real-time ones run on their own.
    `reset(to)` puts the world in a start state between episodes: hardware would ask an operator or a reset
    routine to do it; a simulated world does it exactly.
    """

    robot: Robot
    cameras: Sequence[Camera]
    clock: Clock
    oracle: Oracle | None = None
    """Ground truth, where the world has it (a surrogate); None on hardware without motion capture."""
    calibration_board: DotBoard | None = None
    """The calibration board this world can lay on the table (`show_board`), as the twin is told it lies;
    None where it has none."""

    @property
    @abstractmethod
    def lockstep(self) -> bool:
        """Whether the caller advances the world (`step`) rather than the wall clock."""

    @property
    @abstractmethod
    def frame_period(self) -> float:
        """s between two camera frames (a lock-step world: one `step()`). The runtime refuses a world whose period
        is not the twin's frame."""

    @abstractmethod
    def start(self) -> RealWorld:
        """Connect (start the world); idempotent. Returns self."""

    @abstractmethod
    def close(self) -> None:
        """Stop and release everything; idempotent, safe after errors."""

    @abstractmethod
    def reset(self, to: StartState) -> None:
        """Put the objects at `to`'s poses, at rest, and the arm at rest at `to.q`; clears live disturbances.
        Returns once the world's published state (robot, cameras, clock) is the new one."""

    def show_board(self, visible: bool) -> None:
        """Lay `calibration_board` on the table at its told pose (or take it away); returns once the cameras'
        frames show it (no longer show it). Hardware would ask an operator; worlds without a board raise."""
        raise RuntimeError(f"{type(self).__name__} has no calibration board")

    def step(self) -> float:
        """Lock-step worlds: advance exactly one frame; returns the world's time, s."""
        raise RuntimeError(f"{type(self).__name__} runs in real time: it has no step()")

    def __enter__(self) -> RealWorld:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
