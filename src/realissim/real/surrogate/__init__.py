"""The surrogate real world: a stand-in for hardware with a hidden reality gap, in its own process.

`Surrogate` (a `RealWorld`) owns the child process; `SurrogateWorld` is the world itself (in-process, for
tests and benchmarks); `GapProfile` describes how reality differs from the scene the twin is given.
"""

from realissim.real.surrogate.gap import (
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
from realissim.real.surrogate.process import (
    CAMERA_SIZE,
    Surrogate,
    SurrogateConfig,
    SurrogateDiedError,
    SurrogateError,
    SurrogateHungError,
)

__all__ = [
    "CAMERA_SIZE",
    "DEFAULT_GAP_PATH",
    "ArmGap",
    "CameraGap",
    "Disturbance",
    "GapProfile",
    "LightingGap",
    "ObjectGap",
    "Surrogate",
    "SurrogateConfig",
    "SurrogateDiedError",
    "SurrogateError",
    "SurrogateHungError",
    "gap_from_dict",
    "gap_to_dict",
    "load_gap",
    "save_gap",
]
