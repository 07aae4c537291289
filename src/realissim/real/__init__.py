"""The real side: Robot and Camera interfaces, the follower, and the surrogate real world."""

from realissim.real.gap import (
    DEFAULT_GAP_PATH,
    ArmGap,
    CameraGap,
    Disturbance,
    GapProfile,
    LightingGap,
    ObjectGap,
    gap_from_dict,
    gap_to_dict,
    load_gap,
    save_gap,
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
    "DEFAULT_GAP_PATH",
    "ArmGap",
    "Camera",
    "CameraFrame",
    "CameraGap",
    "CameraStalledError",
    "Clock",
    "Disturbance",
    "GapProfile",
    "JointState",
    "LightingGap",
    "NotConnectedError",
    "ObjectGap",
    "Robot",
    "RobotDescription",
    "WallClock",
    "gap_from_dict",
    "gap_to_dict",
    "load_gap",
    "save_gap",
]
