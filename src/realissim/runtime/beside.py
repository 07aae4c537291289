"""The visual correction beside the frame loop: its own thread, on a replica of the twin (docs/design.md §4).

On the wall clock a correction costs more than a frame. Run inline it would make the loop late by its cost every
frame it runs; here the loop hands a job (the twin as it is now, the real arm's joints, the camera frames) to a
thread and steps on at the frame rate. The thread copies nothing back while it works: it corrects and supervises
a replica of the twin (`TwinPhysics.replica`), taken when the job was handed over, and leaves an outcome — the
wrench, the supervision, and where a placement put an object — for the loop to collect and apply on a later frame,
with the outcome's age known. One job at a time: the loop hands over the next once it has collected the last.

The torch and numba kernels the correction spends its time in release the GIL, so the loop's own Python (a frame
is ~2 ms of it) runs while they do; `sys.setswitchinterval` is lowered while a thread runs, so the loop is not kept
waiting behind the thread's Python for the interpreter's default 5 ms.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from realissim.estimate.correction import CorrectionResult, VisualCorrection
from realissim.runtime.supervision import Supervision, Supervisor
from realissim.twin.physics import TwinPhysics
from realissim.util.worker import WorkerThread

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorrectionJob:
    """What the loop hands over: the frame it was taken at and the wall-clock time, the real arm's measured joints
    (J,) rad and every camera's frame (C,H,W,3) uint8, and the period (in physics frames) the wrench will be held."""

    frame: int
    """The loop's frames since the reset, the frame the job was taken in included."""
    wall: float
    """`time.monotonic()` when the job was taken, s."""
    q_real: np.ndarray
    images: np.ndarray
    held_frames: int
    """Frames the wrench is to act for: the loop's measured frames between two jobs (rounded, ≥ 1)."""


@dataclass(frozen=True)
class CorrectionOutcome:
    """What the thread leaves: the job, its correction (wrench without damping: the loop damps with the objects'
    velocity when it applies it), its supervision, whether the wrench is withheld (supervision had lost the objects),
    the objects a placement moved with their new state (index → (qpos (7,), qvel (6,))), the stages' times, s, and
    when it finished (`time.monotonic()`)."""

    job: CorrectionJob
    result: CorrectionResult
    supervision: Supervision
    withheld: bool
    placed: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    finished: float = 0.0


class CorrectionThread(WorkerThread):
    """One worker thread running `VisualCorrection` and `Supervisor` on `replica`, one job at a time.

    Main thread: `submit(twin, job)` when not `busy`; `poll()` every frame (an outcome once, or None); `wait()`
    before anything that needs the worker idle (a reset); `close()` at the end. An exception in the worker is
    raised again by the next `poll` or `wait`; `close` (`WorkerThread`) stops it after its pending job."""

    def __init__(self, correction: VisualCorrection, supervisor: Supervisor, replica: TwinPhysics) -> None:
        if supervisor.twin is not replica:
            raise ValueError("CorrectionThread: the supervisor must watch the replica the thread works on")
        correction.damp_in_wrench = False
        super().__init__()
        self.correction, self.supervisor, self.replica = correction, supervisor, replica
        self._job: CorrectionJob | None = None
        self._outcome: CorrectionOutcome | None = None
        self._error: BaseException | None = None
        self._busy = False
        self._start("realissim-correction")

    @property
    def busy(self) -> bool:
        """Whether a job was handed over and its outcome not yet collected."""
        return self._busy

    def submit(self, twin: TwinPhysics, job: CorrectionJob) -> None:
        """Hand over `job` on `twin` as it is now (copied into the replica). Raises RuntimeError while busy."""
        with self._cond:
            if self._busy or self._closed:
                raise RuntimeError("CorrectionThread.submit: a job is still pending (poll first) or it is closed")
            self.replica.copy_from(twin)
            self._job, self._busy = job, True
            self._cond.notify_all()

    def poll(self) -> CorrectionOutcome | None:
        """The finished job's outcome (once; the thread is then free for the next), or None."""
        with self._cond:
            self._raise()
            outcome, self._outcome = self._outcome, None
            if outcome is not None:
                self._busy = False
            return outcome

    def wait(self, timeout: float | None = None, timeout_raises: bool = True) -> CorrectionOutcome | None:
        """Block until the pending job (if any) is done; its outcome (collected), or None if there was none. After
        `timeout` s: TimeoutError, or with `timeout_raises=False` None (the job still pending)."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._busy or self._outcome is not None or self._error, timeout):
                if not timeout_raises:
                    return None
                raise TimeoutError(f"the correction thread did not finish its job within {timeout} s")
            self._raise()
            outcome, self._outcome = self._outcome, None
            self._busy = False
            return outcome

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._busy = False
            raise RuntimeError(f"the correction thread failed: {error!r}") from error

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._job is not None or self._closed)
                if self._job is None:
                    return
                job = self._job
            try:
                outcome = self._work(job)
            except BaseException as err:  # raised again in the loop's thread
                log.exception("correction thread: job of frame %d failed", job.frame)
                with self._cond:
                    self._job, self._error = None, err
                    self._cond.notify_all()
                continue
            with self._cond:
                self._job, self._outcome = None, outcome
                self._cond.notify_all()

    def _work(self, job: CorrectionJob) -> CorrectionOutcome:
        correction, supervisor, replica = self.correction, self.supervisor, self.replica
        if job.held_frames != correction.held_frames:
            correction.set_held_frames(job.held_frames)
            supervisor.detector.set_period(job.held_frames * replica.dt)
        timing: dict[str, float] = {}
        t0 = time.perf_counter()
        result = correction.correct(replica, job.q_real, torch.from_numpy(job.images))
        withheld = supervisor.withholding
        if withheld:
            correction.reset()  # nothing it finds while the twin is lost may build up for later
        timing["correct"] = time.perf_counter() - t0
        timing.update({f"correct.{key}": value for key, value in result.stages.items()})
        supervision = supervisor.update(job.frame, result, job.q_real, job.images, timing)
        placed: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if supervision.placed:
            correction.reset()  # its accumulated state belonged to the lost pose
            layout = replica.layout
            for attempt in supervision.attempts:
                if attempt.placed:
                    k = attempt.object
                    placed[k] = (replica.data.qpos[layout.object_qpos[k]].copy(),
                                 replica.data.qvel[layout.object_dof[k]].copy())  # fmt: skip
        return CorrectionOutcome(job, result, supervision, withheld, placed, timing, time.monotonic())
