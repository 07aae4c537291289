"""`BatchEnv`: N offline twins of one task stepped together (`TwinBatch`), with `Env`'s API and a leading
batch axis B on every observation, chunk and frame. Twin b of a BatchEnv runs exactly as an offline `Env`
given the same starts and chunks would, bit for bit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from realissim.envs.env import EnvConfig, FrameInfo, FrameObserver, StepInfo, frames_for, offline_runtime
from realissim.policy.base import ActionChunk, Observation
from realissim.spec.state import StartState
from realissim.twin.batch import TwinBatch
from realissim.twin.state import rest_state

if TYPE_CHECKING:
    from realissim.tasks import Task


class BatchEnv:
    """`size` offline twins of `task`'s scene on `nthread` worker threads (0: one per CPU)."""

    def __init__(self, task: Task, size: int, config: EnvConfig = EnvConfig(), nthread: int = 0) -> None:
        if config.real_images:
            raise ValueError("real_images: a BatchEnv is offline and has no real cameras")
        self.task, self.config = task, config
        self.twins = TwinBatch(task.scene, size, offline_runtime(config).physics, nthread)
        self.cameras = None
        if config.cameras:
            from realissim.views.virtual import VirtualCameras

            self.cameras = VirtualCameras(task.scene, self.twins.model, config.cameras, config.image_size)
        self.starts: list[StartState] = []
        """The start states of the current episodes."""
        self._rng = np.random.default_rng()
        self._command = np.tile(np.asarray(task.scene.robot.home, dtype=np.float64), (size, 1))
        self._frame = 0

    @property
    def size(self) -> int:
        """B."""
        return self.twins.size

    @property
    def dt(self) -> float:
        """The frame period, s (the physics config's)."""
        return self.twins.dt

    def reset(self, starts: Sequence[StartState] | None = None, seed: int | None = None) -> Observation:
        """Twin b to starts[b] (None: B starts drawn from the task's sampler, seeded by `seed` if given)."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if starts is None:
            starts = [self.task.sample_start(self._rng) for _ in range(self.size)]
        if len(starts) != self.size:
            raise ValueError(f"BatchEnv.reset: {self.size} twins, got {len(starts)} starts")
        for s in starts:
            s.check(self.task.scene)
        self.twins.reset(rest_state(list(starts)))
        self.starts = list(starts)
        self._command = np.stack([s.q_array for s in starts])
        self._frame = 0
        return self.observe()

    def step(
        self, chunk: ActionChunk, observer: FrameObserver | None = None, max_frames: int | None = None
    ) -> tuple[Observation, StepInfo]:
        """Follow a batched chunk ((B, m, J) waypoints) for its horizon or the re-plan period (at most
        `max_frames`)."""
        if chunk.q_des.shape[:1] != (self.size,) or chunk.q_des.ndim != 3:
            raise ValueError(f"BatchEnv.step: expected a chunk of shape ({self.size}, m, J), got {chunk.q_des.shape}")
        n = frames_for(chunk, self.dt, self.config.replan_every, max_frames)
        targets, progress = chunk.targets(self._command, self.dt, n)
        commands, velocities = self.twins.plan_targets(targets)  # checked once for the chunk's frames
        for k in range(n):
            self.twins.set_planned(commands[k], velocities[k])
            self.twins.step()
            self._frame += 1
            if observer is not None:
                observer(FrameInfo(self, self._frame, self.twins.time, self.twins.state, targets[k], progress[k]))
        self._command = targets[-1]
        info = StepInfo(n, self.twins.state().time, progress, np.zeros(self.size, dtype=bool))
        return self.observe(), info

    def observe(self) -> Observation:
        """The current batched observation (virtual images of every twin rendered now)."""
        s = self.twins.state()
        images = {}
        if self.cameras is not None:
            from realissim.views.virtual import body_poses

            xpos, xquat = body_poses(self.twins.model, self.twins.qpos)
            images = self.cameras.render_batch(xpos, xquat)
        return Observation(s.time, s.q, s.qd, s.q_des, s.object_pos, s.object_quat, images)
