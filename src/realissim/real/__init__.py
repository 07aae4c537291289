"""The real side: the RealWorld, Robot and Camera interfaces and the follower; the surrogate real world is the
sub-package `realissim.real.surrogate`."""

from realissim.real.follower import (
    Follower,
    FollowerConfig,
    FollowerStep,
    RuckigFailedError,
    TrackingStats,
    standard_trajectory,
)
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
    "Follower",
    "FollowerConfig",
    "FollowerStep",
    "JointState",
    "NotConnectedError",
    "Robot",
    "RobotDescription",
    "RuckigFailedError",
    "TrackingStats",
    "WallClock",
    "standard_trajectory",
]
