"""Environments: one twin (`Env`, online over a RealWorld or offline) or N twins (`BatchEnv`, offline), with
one API — `reset(start) → Observation`, `step(ActionChunk) → (Observation, StepInfo)` (docs/design.md §7)."""

from realissim.envs.batch import BatchEnv
from realissim.envs.env import Env, EnvConfig, FrameInfo, StepInfo

__all__ = ["BatchEnv", "Env", "EnvConfig", "FrameInfo", "StepInfo"]
