"""SIGTERM as an exception, so that a process told to stop cleans up after itself; worker processes ended with
their parent.

Python's default SIGTERM ends the process at once: no `finally` block runs, so worker processes it started keep
running and files it was writing are left as they are. Within `terminate_raises`, SIGTERM raises `Terminated`
instead, which unwinds the stack like Ctrl-C does; within `terminate_deferred` (a step that must not be cut in two,
or the cleanup itself) it waits until the block ends.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any


class Terminated(SystemExit):
    """Raised by SIGTERM within `terminate_raises`; its exit code is 128 + SIGTERM (143), a shell's for it."""


class _Held:
    """`terminate_deferred`'s nesting depth, and a SIGTERM that arrived meanwhile (Python runs handlers in the main
    thread only, so this is touched by one thread)."""

    depth = 0
    signal: int | None = None


@contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread; the previous handler is restored after.
    Outside the main thread (where Python cannot install a handler) the block runs with SIGTERM unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if _Held.depth:
            _Held.signal = signum  # raised when the deferring block ends
            return
        raise Terminated(128 + signum)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextmanager
def terminate_deferred() -> Iterator[None]:
    """Within the block (itself within `terminate_raises`), a SIGTERM is held and raises `Terminated` when the
    outermost such block ends without an error of its own (one that does goes on instead). For steps that must not be
    cut in two — moving an episode into a dataset — and for cleanup that a second SIGTERM must not interrupt."""
    _Held.depth += 1
    failed = True
    try:
        yield
        failed = False
    finally:
        _Held.depth -= 1
        if not _Held.depth:
            signum, _Held.signal = _Held.signal, None
            if signum is not None and not failed:
                raise Terminated(128 + signum)


def end_processes(processes: Sequence[Any], wait: bool) -> None:
    """The worker `processes` (`multiprocessing.Process`) that were started join (for up to 5 s each if `wait`, else
    not waiting); any still alive are terminated (SIGTERM) and joined for up to 10 s, and any still alive then are
    killed (SIGKILL)."""
    started = [p for p in processes if p.pid is not None]
    for process in started:
        process.join(timeout=5.0 if wait else 0.0)
        if process.is_alive():
            process.terminate()
    for process in started:
        process.join(timeout=10.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=5.0)


@contextmanager
def ending(processes: Sequence[Any], done: Callable[[], bool]) -> Iterator[None]:
    """On leaving the block, however (an error, Ctrl-C, SIGTERM within `terminate_raises`): `end_processes`, waiting
    for them only if `done()`; a second SIGTERM waits until they are ended (`terminate_deferred`)."""
    try:
        yield
    finally:
        with terminate_deferred():
            end_processes(processes, wait=done())
