"""`EpisodeRecorder`: an episode observer that records every frame of one `Env` into a `DatasetWriter`.

Per frame it keeps the twin's state, the commanded joints q′, the pusher tip (forward kinematics of q), the
policy's progress and, online, the desync verdict, the real arm's measured joints and the target sent to it, the
correction's force on each object, the oracle's object poses with the twin's error against them (evaluation
only), and optionally the real cameras' frames. At the episode's end it appends the
episode to the writer in one piece.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from realissim.data.schema import FIELDS, DatasetMeta, EpisodeData, EpisodeInfo, code_version, progress_label
from realissim.data.store import DatasetWriter
from realissim.envs.batch import BatchEnv
from realissim.envs.env import Env, FrameInfo
from realissim.eval.episode import EpisodeObserver, EpisodeResult
from realissim.eval.sync.metrics import pose_errors
from realissim.policy.base import Observation
from realissim.real.interfaces import CameraStalledError
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK

_PER_FRAME = tuple(f.name for f in FIELDS if f.name != "progress")  # the progress label is set at the end
_TWIN = ("time", "object_pos", "object_quat", "object_linvel", "object_angvel", "q", "qd")
"""Fields copied from the twin's state."""


def meta_for_env(env: Env, source: str, gap: str | None = None, record_images: bool = False) -> DatasetMeta:
    """The dataset meta of episodes recorded in `env` by `source` ("expert", "teleop", ...); `gap` names the
    world's gap profile online; with `record_images`, the world's cameras (all of one size)."""
    cameras = tuple(c.name for c in env.world.cameras) if record_images and env.world is not None else ()
    sizes = {(c.width, c.height) for c in env.world.cameras} if cameras and env.world is not None else set()
    if len(sizes) > 1:
        raise ValueError(f"record_images: the cameras differ in size {sorted(sizes)}")
    scene = env.task.scene
    return DatasetMeta(
        task=env.task.name,
        fps=1.0 / env.dt,
        source=source,
        online=env.online,
        gap=gap,
        scene=scene,
        task_config=env.task.as_dict()["config"],
        code_version=code_version(),
        joint_names=scene.robot.joint_names,
        object_names=tuple(o.name for o in scene.objects),
        cameras=cameras,
        image_size=sizes.pop() if sizes else None,
    )


class EpisodeRecorder(EpisodeObserver):
    """Records each episode of one `Env` into `writer` (the dataset's fps must be the env's frame rate).

    `on_reset` starts an episode, `on_frame` adds a frame, `on_end` appends it (`finish` does so without an
    `EpisodeResult`, `discard` drops it); `last` is the info of the last episode written. `seed` is stored
    with each episode (set it before each run when the starts are drawn per seed).
    """

    def __init__(
        self,
        writer: DatasetWriter,
        record_images: bool = False,
        seed: int | None = None,
        extra: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.writer, self.record_images, self.seed = writer, record_images, seed
        self.extra = extra
        """Called at each episode's end (`on_end`) for more JSON attributes of its `extra`."""
        self.last: EpisodeInfo | None = None
        self._env: Env | None = None
        self._ik: PusherIK | None = None
        self._scene: SceneSpec | None = None
        self._frames: dict[str, list[Any]] = {}
        self._images: list[np.ndarray] = []
        self._reacquisitions = 0

    def on_reset(self, env: Env | BatchEnv, observation: Observation) -> None:
        """Check `env` against the dataset's meta and start an empty episode."""
        if not isinstance(env, Env):
            raise TypeError(f"EpisodeRecorder records one Env, got {type(env).__name__} (batches are not recorded)")
        self._check(env)
        if self._ik is None or self._scene != env.task.scene:
            self._ik, self._scene = PusherIK(env.task.scene), env.task.scene
        self._env = env
        self.discard()

    def _check(self, env: Env) -> None:
        meta = self.writer.meta
        if env.task.name != meta.task or env.online != meta.online:
            raise ValueError(
                f"env: task {env.task.name!r} online={env.online}, the dataset holds task "
                f"{meta.task!r} online={meta.online}"
            )
        if not math.isclose(meta.fps * env.dt, 1.0, rel_tol=1e-9):
            raise ValueError(f"env: frame rate {1 / env.dt:g} Hz differs from the dataset's {meta.fps:g} fps")
        names = tuple(c.name for c in env.world.cameras) if self.record_images and env.world is not None else ()
        if names != meta.cameras:
            raise ValueError(f"record_images: recording cameras {list(names)}, the dataset holds {list(meta.cameras)}")

    def on_frame(self, frame: FrameInfo) -> None:
        """Append one frame (the twin's state after it, q′ = frame.q_des, the policy's progress, online the
        oracle now, the desync verdict, the real arm's reading and command and the correction's force (with a
        follower), the real frames with `record_images`)."""
        env = self._require()
        s, add = frame.state, self._add
        add(**{name: getattr(s, name) for name in _TWIN}, q_des=frame.q_des, policy_progress=frame.progress)
        assert self._ik is not None
        add(tip=self._ik.tip_position(s.q))
        if env.world is None:
            return
        report = frame.report
        add(desynced=bool(report is not None and report.desynced))
        if report is not None and report.q_real is not None and report.q_sent is not None:
            force = np.zeros((len(s.object_pos), 3)) if report.applied_wrench is None else report.applied_wrench[:, :3]
            add(q_real=report.q_real, q_sent=report.q_sent, correction_force=force)
        self._reacquisitions += sum(a.placed for a in report.reacquisitions) if report is not None else 0
        if env.world.oracle is not None:
            truth = env.world.oracle.read()
            twin_vs_truth = zip(s.object_pos, s.object_quat, truth.object_pos, truth.object_quat)
            errors = np.array([pose_errors(*poses) for poses in twin_vs_truth]).reshape(-1, 2)
            add(oracle_object_pos=truth.object_pos, oracle_object_quat=truth.object_quat,
                sync_pos_err=errors[:, 0], sync_yaw_err=errors[:, 1])  # fmt: skip
        if self.record_images:
            self._images.append(self._real_images(env, None if report is None else report.images))

    def _add(self, **values: Any) -> None:
        for name, value in values.items():
            self._frames[name].append(np.array(value))

    def _real_images(self, env: Env, images: np.ndarray | None) -> np.ndarray:
        """(C, H, W, 3) uint8: the frames the runtime read this frame, else the cameras' latest (like
        `Env.observe`); a stalled camera repeats the previous frame."""
        if images is not None:
            return images
        assert env.world is not None
        try:
            return np.stack([cam.read().image for cam in env.world.cameras])
        except CameraStalledError:
            if not self._images:
                raise
            return self._images[-1]

    def on_end(self, result: EpisodeResult | list[EpisodeResult]) -> None:
        """Append the episode with the result's success, success time, final coverage, start, desync time and
        re-acquisitions (and its final metrics in `extra["final"]`)."""
        if isinstance(result, list):
            raise TypeError("EpisodeRecorder records one Env, got the results of a batch")
        self.last = self._write(
            result.success,
            result.success_time,
            float(result.final.get("coverage", math.nan)),
            desynced_s=result.desynced_s,
            reacquisitions=result.reacquisitions,
            extra={"final": {k: _plain(v) for k, v in result.final.items()}} | (self.extra() if self.extra else {}),
            start=result.start,
        )

    def finish(self, success: bool, success_time: float = math.inf, final_coverage: float = math.nan) -> EpisodeInfo:
        """Append the episode recorded since the reset with the given outcome (e.g. a teleoperator's Save)."""
        env = self._require()
        assert env.start is not None
        desynced = self._frames["desynced"]
        self.last = self._write(
            success,
            success_time,
            final_coverage,
            desynced_s=float(sum(desynced)) * env.dt,
            reacquisitions=self._reacquisitions,
            extra={},
            start=env.start,
        )
        return self.last

    def discard(self) -> None:
        """Drop the frames recorded since the reset."""
        self._frames = {name: [] for name in _PER_FRAME}
        self._images, self._reacquisitions = [], 0

    def episode(self) -> EpisodeData:
        """The frames recorded since the reset as an episode (progress labelled by elapsed fraction)."""
        f = {name: np.stack(v) if v else None for name, v in self._frames.items()}
        if f["time"] is None:
            raise ValueError("EpisodeRecorder: no frames recorded since the reset")
        cameras = self.writer.meta.cameras
        images = {cam: np.stack([im[c] for im in self._images]) for c, cam in enumerate(cameras)}
        return EpisodeData(**f, progress=progress_label(len(f["time"])), images=images)

    def _write(self, success: bool, success_time: float, final_coverage: float, **info: Any) -> EpisodeInfo:
        """Append the buffered episode; the buffers are kept if that fails (e.g. to retry after freeing disk)."""
        written = self.writer.append(self.episode(), success=success, success_time=success_time,
                                     final_coverage=final_coverage, seed=self.seed, **info)  # fmt: skip
        self.discard()
        return written

    def _require(self) -> Env:
        if self._env is None:
            raise RuntimeError("EpisodeRecorder: on_reset was not called")
        return self._env


def _plain(value: Any) -> bool | float | None:
    """A metric as a strict JSON value: bool, finite float, or None (not finite)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    return float(value) if math.isfinite(value) else None
