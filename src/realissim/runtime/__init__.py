"""The frame loop that couples the twin to the (surrogate) real world: its stages (`loop`), their configuration
(`config`), calibration, supervision (the desync detector and re-acquisition), the lead bound."""

from realissim.runtime.config import (
    ArmConfig,
    CalibrationConfig,
    RuntimeConfig,
    SupervisionConfig,
    ViewsConfig,
)
from realissim.runtime.loop import FrameReport, Runtime

__all__ = [
    "ArmConfig",
    "CalibrationConfig",
    "FrameReport",
    "Runtime",
    "RuntimeConfig",
    "SupervisionConfig",
    "ViewsConfig",
]
