"""The surrogate real world in its own OS process, seen only through Robot and Camera handles.

`Surrogate` starts the world (`realissim.real.surrogate.world.SurrogateWorld`) in a child process
(multiprocessing "spawn"), exchanges joint states, commands, frames and ground truth through one
shared-memory segment (`realissim.real.shm`, seqlocked blocks, no per-frame pickling), and sends only
small control messages (step, reset, disturb, close) over a pipe. Two clocks, same handles:

* lock-step: `surrogate.step()` advances the world by exactly one frame and returns when it is
  published; timestamps are the world's simulated time; deterministic for a seed.
* real-time: the child runs on the wall clock at its frame rate; readers get the latest state and
  frame; timestamps are `time.monotonic()` (system-wide, shared by both processes).

A child that dies or stops answering raises `SurrogateDiedError` / `SurrogateHungError` in the parent
within the configured timeout. `close()` (also on exceptions, and at interpreter exit) stops the
child, kills it if it does not stop, and unlinks the segment. Nothing listens on any network address.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing as mp
import os
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from realissim.real.interfaces import (
    Camera,
    CameraFrame,
    CameraStalledError,
    Clock,
    JointState,
    NotConnectedError,
    Oracle,
    OracleState,
    RealWorld,
    Robot,
    RobotDescription,
)
from realissim.real.shm import ArraySpec, BlockSpec, SharedSegment, ShmLayout
from realissim.spec.board import DotBoard
from realissim.spec.io import scene_from_dict, scene_to_dict
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.twin.physics import FRAME_RATE
from realissim.util.threads import one_thread_per_pool

log = logging.getLogger(__name__)

CAMERA_SIZE = (160, 90)
"""px (width, height): the size the surrogate's cameras render at wherever the loop runs against it (the demos,
collection, evaluation, the sync scenarios, teleoperation): the correction's cost grows with the pixels."""


class SurrogateError(RuntimeError):
    """The surrogate process failed."""


class SurrogateDiedError(SurrogateError):
    """The surrogate process exited unexpectedly."""


class SurrogateHungError(SurrogateError):
    """The surrogate process did not answer within the timeout."""


@dataclass(frozen=True)
class SurrogateConfig:
    """How to run the surrogate real world."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default profile)."""
    seed: int = 0
    """Seed of everything random in the world (noise, disturbances)."""
    mode: Literal["lockstep", "realtime"] = "lockstep"
    """Lock-step (caller advances frames) or real-time (wall clock)."""
    fps: float = FRAME_RATE
    """Camera frame rate, Hz: one lock-step `step()` is 1/fps s (default: the twin's, so frames pair up)."""
    camera_size: tuple[int, int] | None = None
    """Render every camera at (width, height) px instead of the scene's size."""
    render: bool = True
    """Render camera frames (False: physics only, cameras unavailable)."""
    start_timeout: float = 60.0
    """s allowed for the child to import, build its model and publish the first frame."""
    timeout: float = 5.0
    """s allowed for any later answer (a lock-step frame, a close); also how long real-time readers
    accept no news before they check the child."""
    stall_frames: int = 30
    """A camera whose frame index has not advanced for this many frames is reported stalled."""
    board: DotBoard | None = field(default_factory=DotBoard)
    """The calibration board the world can lay on the table (`Surrogate.show_board`), as the twin is told it
    lies (it truly lies at this pose + the gap's `board_error`); None: the world has none."""

    def __post_init__(self) -> None:
        if not (self.fps > 0 and math.isfinite(self.fps)):
            raise ValueError(f"fps: must be a positive number of frames per second, got {self.fps}")


def _layout(n_cams: int, width: int, height: int, n_objects: int, dof: int) -> ShmLayout:
    f8, i8 = "float64", "int64"
    blocks = [
        BlockSpec("robot", (ArraySpec("q", (dof,), f8), ArraySpec("qd", (dof,), f8), ArraySpec("stamp", (), f8))),
        BlockSpec("command", (ArraySpec("q", (dof,), f8), ArraySpec("count", (), i8))),
        BlockSpec(
            "oracle",
            (
                ArraySpec("time", (), f8),
                ArraySpec("object_pos", (n_objects, 3), f8),
                ArraySpec("object_quat", (n_objects, 4), f8),
                ArraySpec("q", (dof,), f8),
                ArraySpec("qd", (dof,), f8),
                ArraySpec("q_command", (dof,), f8),
            ),
        ),
        BlockSpec("clock", (ArraySpec("time", (), f8), ArraySpec("frame", (), i8))),
    ]
    for c in range(n_cams):
        arrays = (
            ArraySpec("image", (height, width, 3), "uint8"),
            ArraySpec("stamp", (), f8),
            ArraySpec("index", (), i8),
        )
        blocks.append(BlockSpec(f"camera{c}", arrays))
    return ShmLayout(tuple(blocks))


class Surrogate(RealWorld):
    """Owner of the surrogate process and its handles: `robot`, `cameras`, `oracle`, `clock` (a `RealWorld`)."""

    def __init__(self, scene: SceneSpec, config: SurrogateConfig = SurrogateConfig()) -> None:
        self.scene = scene
        self.config = config
        self.description = RobotDescription.from_spec(scene.robot)
        width, height = config.camera_size or (scene.cameras[0].width, scene.cameras[0].height)
        self.size = (int(width), int(height))
        n_cams = len(scene.cameras) if config.render else 0
        self.layout = _layout(n_cams, *self.size, len(scene.objects), self.description.dof)
        self._process: Any = None
        self._conn: Any = None
        self._segment: SharedSegment | None = None
        self._finalizer: weakref.finalize | None = None
        self.robot = SurrogateRobot(self)
        self.cameras = tuple(SurrogateCamera(self, c) for c in range(n_cams))
        self.oracle = SurrogateOracle(self)
        self.clock: Clock = _SharedClock(self)
        self.calibration_board = config.board if config.render and scene.cameras else None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> Surrogate:
        """Start the child and wait for its first published frame; idempotent."""
        if self._process is not None:
            return self
        os.environ.setdefault("MUJOCO_GL", "egl")  # inherited by the spawned child
        ctx = mp.get_context("spawn")
        segment = SharedSegment(self.layout)
        parent_conn, child_conn = ctx.Pipe()
        cfg = asdict(self.config) | {"gap": str(self.config.gap) if self.config.gap else None}
        args = (scene_to_dict(self.scene), cfg, segment.name, self.layout, child_conn, self.size)
        process = ctx.Process(target=_child_main, args=args, name="realissim-surrogate", daemon=True)
        with one_thread_per_pool():
            process.start()
        child_conn.close()
        self._process, self._conn, self._segment = process, parent_conn, segment
        self._finalizer = weakref.finalize(self, _shutdown, process, parent_conn, segment, self.config.timeout)
        try:
            self._expect("ready", self.config.start_timeout)
        except BaseException:
            self.close()
            raise
        log.info("surrogate started (pid %d, %s)", process.pid, self.config.mode)
        return self

    def close(self) -> None:
        """Stop the child (kill it if needed) and remove the shared memory; idempotent."""
        if self._finalizer is not None:
            self._finalizer()
        self._process = self._conn = self._segment = self._finalizer = None

    def __enter__(self) -> Surrogate:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def lockstep(self) -> bool:
        """Whether the caller advances frames (`step`)."""
        return self.config.mode == "lockstep"

    @property
    def frame_period(self) -> float:
        """1 / `SurrogateConfig.fps`, s."""
        return 1.0 / self.config.fps

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def segment_name(self) -> str | None:
        """The shared-memory segment's name (in /dev/shm) while it runs."""
        return None if self._segment is None else self._segment.name

    # -- control ---------------------------------------------------------------------------------
    def step(self, frames: int = 1) -> float:
        """Lock-step only: advance the world by exactly `frames` frames; returns its time, s."""
        if self.config.mode != "lockstep":
            raise RuntimeError("step() is for lock-step mode; in real-time mode the world runs on its own")
        if frames < 1:
            raise ValueError(f"frames: must be ≥ 1, got {frames}")
        self._send(("step", int(frames)))
        return float(self._expect("stepped", self.config.timeout * frames))

    def reset(self, to: StartState) -> None:
        """Start an episode over at `to` inside the running process (no respawn); returns once the new state and
        camera frames are published.

        Lock-step: the oracle then reads exactly `to` at time 0 and the robot `to.q` + the gap's encoder
        offset; real time: the world runs on from there at once. Commands sent before the reset are
        dropped (the arm holds `to.q` until the next `robot.command`); live disturbances are cleared; the
        gap profile's scheduled disturbances count from the reset, so they recur in every episode (see
        `SurrogateWorld.reset`). Camera frame indices keep counting up; stamps restart with the clock.
        Raises `SpecError` naming the field, before anything is sent, if `to` does not fit the scene."""
        to.check(self.scene)
        self._send(("reset", to))
        self._expect("reset", self.config.timeout)
        for camera in self.cameras:
            camera.forget()

    def show_board(self, visible: bool) -> None:
        """Lay the calibration board on the table (or take it away); returns once every camera has published a
        frame with (without) it. The board has no physics: the objects stay where they are. Raises
        `RuntimeError` if this world has no board (`SurrogateConfig.board` None, or no cameras)."""
        if self.calibration_board is None:
            raise RuntimeError("this surrogate has no calibration board (SurrogateConfig.board is None or render off)")
        self._send(("board", bool(visible)))
        self._expect("board", self.config.timeout)

    def disturb(self, disturbance: object) -> None:
        """Inject a disturbance (a `realissim.real.surrogate.gap.Disturbance`) at the next frame."""
        self._send(("disturb", disturbance))
        self._expect("ok", self.config.timeout)

    def segment(self) -> SharedSegment:
        """The live shared segment; raises if the surrogate is not running or has failed."""
        if self._segment is None or self._process is None:
            raise NotConnectedError("the surrogate is not running: use it as a context manager or call start()")
        if not self._process.is_alive():
            raise SurrogateDiedError(f"surrogate process exited with code {self._process.exitcode}")
        return self._segment

    def _send(self, message: tuple) -> None:
        self.segment()
        try:
            self._conn.send(message)
        except (BrokenPipeError, OSError) as err:
            raise SurrogateDiedError(f"surrogate process is gone ({err})") from err

    def _expect(self, kind: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            if self._conn.poll(min(0.05, max(0.0, deadline - time.monotonic()))):
                try:
                    got, payload = self._conn.recv()
                except (EOFError, OSError) as err:
                    raise SurrogateDiedError(f"surrogate process closed its pipe ({err})") from err
                if got == "error":
                    raise SurrogateError(f"surrogate process failed:\n{payload}")
                if got != kind:
                    raise SurrogateError(f"surrogate protocol: expected {kind!r}, got {got!r}")
                return payload
            if not self._process.is_alive():
                raise SurrogateDiedError(f"surrogate process exited with code {self._process.exitcode}")
            if time.monotonic() > deadline:
                raise SurrogateHungError(
                    f"surrogate process (pid {self._process.pid}) gave no {kind!r} in {timeout:.1f} s"
                )

    def read_block(self, name: str) -> dict[str, np.ndarray]:
        """A consistent copy of one shared block."""
        return self.segment().blocks[name].read(timeout=self.config.timeout)

    def write_block(self, name: str, **values: np.ndarray | float | int) -> None:
        self.segment().blocks[name].write(**values)


class _SharedClock(Clock):
    """The surrogate's published time: simulated time in lock-step, time.monotonic() in real time."""

    def __init__(self, owner: Surrogate) -> None:
        self._owner = owner

    def now(self) -> float:
        if self._owner.config.mode == "realtime":
            return time.monotonic()
        return float(self._owner.read_block("clock")["time"])


class SurrogateRobot(Robot):
    """The surrogate arm: reads encoder state, streams position targets (clipped to the joint limits)."""

    def __init__(self, owner: Surrogate) -> None:
        self._owner = owner
        self.description = owner.description
        self._count = 0
        self.clipped = np.zeros(owner.description.dof, dtype=bool)
        """Joints clipped by the last `command`."""

    def connect(self) -> None:
        self._owner.start()

    def close(self) -> None:
        self._owner.close()

    def read(self) -> JointState:
        block = self._owner.read_block("robot")
        return JointState(stamp=float(block["stamp"]), q=block["q"], qd=block["qd"])

    def command(self, q: ArrayLike) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (self.description.dof,) or not np.all(np.isfinite(q)):
            raise ValueError(f"command: expected {self.description.dof} finite values, got {q!r}")
        sent = np.clip(q, self.description.q_lower, self.description.q_upper)
        self.clipped = sent != q
        self._count += 1
        self._owner.write_block("command", q=sent, count=self._count)
        return sent


class SurrogateCamera(Camera):
    """One surrogate camera; intrinsics and pose are what the twin is told (the scene's)."""

    def __init__(self, owner: Surrogate, index: int) -> None:
        spec = owner.scene.cameras[index]
        width, height = owner.size
        K = np.asarray(spec.K_array, dtype=np.float64).copy()
        K[0] *= width / spec.width
        K[1] *= height / spec.height
        self._owner, self._index = owner, index
        self.name, self.width, self.height = spec.name, width, height
        self.K, self.X_WC = K, np.asarray(spec.X_WC_array, dtype=np.float64)
        self._last_index, self._last_change = -1, 0.0

    def forget(self) -> None:
        """Forget the frame history the stall check uses (after a reset restarts the world's clock)."""
        self._last_index, self._last_change = -1, 0.0

    def read(self) -> CameraFrame:
        block = self._owner.read_block(f"camera{self._index}")
        frame = CameraFrame(stamp=float(block["stamp"]), index=int(block["index"]), image=block["image"])
        now = self._owner.clock.now()
        if frame.index != self._last_index:
            self._last_index, self._last_change = frame.index, now
        elif now - self._last_change > self._owner.config.stall_frames / self._owner.config.fps:
            raise CameraStalledError(f"camera {self.name!r}: no new frame since t = {self._last_change:.3f} s")
        return frame


class SurrogateOracle(Oracle):
    """Ground truth of the surrogate world; for evaluation only (never wire it into the twin)."""

    def __init__(self, owner: Surrogate) -> None:
        self._owner = owner

    def read(self) -> OracleState:
        b = self._owner.read_block("oracle")
        names = tuple(o.name for o in self._owner.scene.objects)
        return OracleState(float(b["time"]), names, b["object_pos"], b["object_quat"], b["q"], b["qd"], b["q_command"])


def _shutdown(process: Any, conn: Any, segment: SharedSegment, timeout: float) -> None:
    """Ask the child to stop, then terminate/kill it, and unlink the segment (never raises)."""
    try:
        if process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("close", None))
            process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(timeout)
    finally:
        conn.close()
        segment.close()


# -- the child ------------------------------------------------------------------------------------
def _child_main(scene_doc: dict, cfg: dict, shm_name: str, layout: ShmLayout, conn: Any, size: tuple[int, int]) -> None:
    """Entry point of the surrogate process."""
    from realissim.real.surrogate.loop import run_child

    run_child(scene_from_dict(scene_doc), cfg, SharedSegment(layout, name=shm_name), conn, size)
