"""SIGTERM as an exception, so that a process told to stop cleans up after itself.

Python's default SIGTERM ends the process at once: no `finally` block runs, so worker processes it started keep
running and files it was writing are left as they are. Within `terminate_raises`, SIGTERM raises `Terminated`
instead, which unwinds the stack like Ctrl-C does.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


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
