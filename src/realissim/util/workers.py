"""A pool of spawned worker processes: work items go out through one queue, messages come back through another.

Parallel collection (`realissim.apps.collect`) and parallel online evaluation (`realissim.eval.online`) share this
seam. The parent puts work items on the pool's inbox, then one `None` per worker (`WorkerPool.close_inbox`). Each
worker runs `serve`, which hands every item to its session until the `None`, and reports through the outbox as
`(kind, worker number, payload)`. A worker that raises sends `("crash", number, traceback)`. The parent's
`WorkerPool.receive` turns that, or a worker that died without a word (killed, out of memory), into
`WorkerError`.

The workers are spawned, not forked: the parent may hold torch's and numba's thread pools, which a fork copies
in a broken state. Each worker gets one thread per pool (`realissim.util.threads.one_thread_per_pool`). A worker
whose parent is gone (killed, so its `finally` never ran) takes no further item. SIGTERM ends a worker cleanly:
`terminate_raises` unwinds its session, closing what it opened.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from realissim.util.signals import Terminated, end_processes, terminate_raises
from realissim.util.threads import one_thread_per_pool

Send = Callable[[str, Any], None]
"""A worker's way to report: `send(kind, payload)` puts `(kind, its number, payload)` on the outbox."""

Session = Callable[[Send], AbstractContextManager[Callable[[Any], None]]]
"""What a worker does: given `send`, a context manager that sets the worker up (opens its world, its dataset)
and yields the handler of one work item; leaving it closes what it opened, on any exit."""


class WorkerError(RuntimeError):
    """A worker raised (the message holds its traceback) or ended without a word (the message holds its exit
    code)."""


class WorkerPool:
    """`count` spawned processes running `target(number, *args, inbox, outbox)`, `number` in 0..count-1; `target`
    is a module-level function (spawn pickles it by name) that calls `serve`."""

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], count: int, name: str) -> None:
        if count < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {count}")
        ctx = mp.get_context("spawn")
        self.inbox: Any = ctx.Queue()
        self.outbox: Any = ctx.Queue()
        self.processes = [ctx.Process(target=target, args=(w, *args, self.inbox, self.outbox), name=f"{name}-{w}")
                          for w in range(count)]  # fmt: skip
        self._closed = False

    def start(self) -> None:
        """Start the workers (one thread per pool in each)."""
        with one_thread_per_pool():
            for process in self.processes:
                process.start()

    def put(self, items: Iterator[Any] | list[Any]) -> None:
        """Queue work items (picklable, not None) for the workers, in order."""
        if self._closed:
            raise RuntimeError("the pool's inbox is closed: no work can be added")
        for item in items:
            self.inbox.put(item)

    def close_inbox(self) -> None:
        """No more work: one `None` per worker, so each ends after the items queued before it. Idempotent."""
        if not self._closed:
            self._closed = True
            for _ in self.processes:
                self.inbox.put(None)

    def receive(self, timeout: float = 1.0) -> tuple[str, int, Any] | None:
        """The next message `(kind, worker number, payload)`, or None if none came within `timeout` s.

        Raises WorkerError for a "crash" message, or when none came and a worker has died (a non-zero exit code)
        or all have ended — no worker is left to send what the caller waits for."""
        try:
            kind, number, payload = self.outbox.get(timeout=timeout)
        except queue.Empty:
            dead = [p for p in self.processes if p.exitcode not in (None, 0)]
            if dead or all(p.exitcode is not None for p in self.processes):
                who = dead[0] if dead else self.processes[0]
                raise WorkerError(f"worker {who.name} ended (exit code {who.exitcode})") from None
            return None
        if kind == "crash":
            raise WorkerError(f"worker {self.processes[number].name} failed:\n{payload}")
        return kind, number, payload

    def end(self, wait: bool) -> None:
        """End the workers: joined (for up to 5 s each if `wait`), then terminated and, if need be, killed
        (`signals.end_processes`). Any that never started are skipped."""
        end_processes(self.processes, wait)


def serve(number: int, inbox: Any, outbox: Any, session: Session) -> None:
    """The loop of worker `number`, run in its process: enter `session(send)` and hand it every item from `inbox`
    until None. Returns early, taking no further item, if the parent process is gone; returns quietly on SIGTERM
    (the session closed first); sends ("crash", number, traceback) if anything raises."""
    parent = os.getppid()

    def send(kind: str, payload: Any) -> None:
        outbox.put((kind, number, payload))

    try:
        with terminate_raises(), session(send) as handle:
            while (item := inbox.get()) is not None:
                if os.getppid() != parent:
                    return  # orphaned: the parent was killed
                handle(item)
    except Terminated:
        pass  # ended by the parent
    except BaseException:
        send("crash", traceback.format_exc())
