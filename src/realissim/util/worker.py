"""`WorkerThread`: the skeleton the loop's helper threads share (the correction beside the loop, the policy beside it).

A daemon thread and a condition shared with its owner; the owner's torch pool size carried into the thread (a
thread's own setting); the interpreter's switch interval lowered while the thread lives, so the owner's Python is
not kept waiting up to the default 5 ms behind the worker's; closed once, after the work in hand.
"""

from __future__ import annotations

import sys
import threading
from abc import ABC, abstractmethod

import torch

SWITCH_INTERVAL = 0.0005
"""s: the interpreter's thread switch interval while a worker lives (the default is 0.005)."""


class WorkerThread(ABC):
    """Subclasses set their state, then call `_start(name)`, and implement `_serve()`: their loop, waiting on
    `self._cond` and returning once `self._closed` (set by `close`) is seen."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._closed = False
        self._threads = torch.get_num_threads()
        self._switch = sys.getswitchinterval()
        self._thread: threading.Thread | None = None

    def _start(self, name: str) -> None:
        sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL))
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        torch.set_num_threads(self._threads)  # (a thread's own setting: the owner's pool size)
        self._serve()

    @abstractmethod
    def _serve(self) -> None:
        """The thread's loop (see the class)."""

    def close(self, timeout: float = 60.0) -> None:
        """Stop the thread (after the work in hand, waiting at most `timeout` s) and restore the interpreter's
        switch interval. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        sys.setswitchinterval(self._switch)
