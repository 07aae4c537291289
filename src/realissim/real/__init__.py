"""The real side: Robot and Camera interfaces, the follower, and the surrogate real world."""

from realissim.real.interfaces import (
    Camera,
    CameraFrame,
    CameraStalledError,
    Clock,
    JointState,
    NotConnectedError,
    Robot,
    RobotDescription,
    WallClock,
)

__all__ = [
    "Camera",
    "CameraFrame",
    "CameraStalledError",
    "Clock",
    "JointState",
    "NotConnectedError",
    "Robot",
    "RobotDescription",
    "WallClock",
]
