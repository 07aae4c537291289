"""SIGTERM as an exception, so that a process told to stop cleans up after itself; worker processes ended with
their parent.

Python's default SIGTERM ends the process at once: no `finally` block runs, so worker processes it started keep
running and files it was writing are left as they are. Within `terminate_raises`, SIGTERM raises `Terminated`
instead, which unwinds the stack like Ctrl-C does.
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


@contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread; the previous handler is restored after.
    Outside the main thread (where Python cannot install a handler) the block runs with SIGTERM unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated(128 + signum)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def end_processes(processes: Sequence[Any], wait: bool) -> None:
    """The worker `processes` (`multiprocessing.Process`) that were started join (for up to 5 s each if `wait`, else
    not waiting); any still alive are terminated and joined (10 s each)."""
    for process in (p for p in processes if p.pid is not None):
        process.join(timeout=5.0 if wait else 0.0)
        if process.is_alive():
            process.terminate()
            process.join(timeout=10.0)


@contextmanager
def ending(processes: Sequence[Any], done: Callable[[], bool]) -> Iterator[None]:
    """On leaving the block, however (an error, Ctrl-C, SIGTERM within `terminate_raises`): `end_processes`, waiting
    for them only if `done()`."""
    try:
        yield
    finally:
        end_processes(processes, wait=done())
