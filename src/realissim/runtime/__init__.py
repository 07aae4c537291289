"""The frame loop that couples the twin to the (surrogate) real world."""

from realissim.runtime.loop import FrameReport, Runtime, RuntimeConfig

__all__ = ["FrameReport", "Runtime", "RuntimeConfig"]
