"""A policy asked beside a real-time loop: its `act` runs in a thread while the loop follows the last chunk.

On the wall clock the world does not wait while a policy thinks: asked inline, a policy that takes 30 ms to answer
makes the loop two frames late every time it is asked, and the loop then runs the missed frames back to back.
Asked beside it, the loop hands the observation over and goes on following the current chunk at the frame rate;
when the answer comes, the new chunk is followed from the time that has passed since its observation
(`ActionChunk.targets`'s `offset`), as a real robot executes a chunk that arrives late.

One request at a time. The thread only calls the policy, which between `submit` and `collect` belongs to it: the
loop must not call the policy meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import replace

from realissim.policy.base import ActionChunk, Observation, Policy
from realissim.util.worker import WorkerThread


class PolicyThread(WorkerThread):
    """`policy.act` in a worker thread: `submit(observation)`, then `done()` (poll) and `collect()` (its chunk and the
    seconds the call took); `close()` (`WorkerThread`) at the end. An exception raised by the policy is raised again
    by `collect`."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy
        self._request: Observation | None = None
        self._answer: tuple[ActionChunk, float] | None = None
        self._error: BaseException | None = None
        self._pending = False
        self._start("realissim-policy")

    @property
    def pending(self) -> bool:
        """Whether a request was submitted and its answer not yet collected."""
        return self._pending

    def submit(self, observation: Observation) -> None:
        """Ask the policy for the chunk following `observation` (its images are copied: the loop's buffers move
        on). Raises RuntimeError while a request is pending or after `close`."""
        observation = replace(
            observation,
            images={k: v.copy() for k, v in observation.images.items()},
            real_images={k: v.copy() for k, v in observation.real_images.items()},
        )
        with self._cond:
            if self._pending or self._closed:
                raise RuntimeError("PolicyThread.submit: a request is pending (collect it first) or it is closed")
            self._request, self._pending = observation, True
            self._cond.notify_all()

    def done(self) -> bool:
        """Whether the pending request has been answered (or failed); False when none is pending."""
        with self._cond:
            return self._pending and (self._answer is not None or self._error is not None)

    def collect(self, timeout: float | None = None) -> tuple[ActionChunk, float]:
        """The pending request's chunk and the wall-clock seconds `act` took, waiting for it if need be (at most
        `timeout` s: TimeoutError). Raises RuntimeError when nothing is pending or the policy failed."""
        with self._cond:
            if not self._pending:
                raise RuntimeError("PolicyThread.collect: nothing was submitted")
            if not self._cond.wait_for(lambda: self._answer is not None or self._error is not None, timeout):
                raise TimeoutError(f"the policy did not answer within {timeout} s")
            self._pending = False
            if self._error is not None:
                error, self._error = self._error, None
                raise RuntimeError(f"the policy failed: {error!r}") from error
            answer, self._answer = self._answer, None
            assert answer is not None
            return answer

    def __enter__(self) -> PolicyThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._request is not None or self._closed)
                if self._request is None:
                    return
                observation = self._request
            t0 = time.perf_counter()
            try:
                chunk = self.policy.act(observation)
            except BaseException as err:  # raised again in the loop's thread by `collect`
                with self._cond:
                    self._request, self._error = None, err
                    self._cond.notify_all()
                continue
            seconds = time.perf_counter() - t0
            with self._cond:
                self._request, self._answer = None, (chunk, seconds)
                self._cond.notify_all()
