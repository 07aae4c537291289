"""Compute threads when the twin shares a small machine with a real-time world process, and in the child
processes the twin's side spawns (the surrogate, parallel workers).

A real-time world's process needs about half a core, and a compute thread more only contends with it (26 vs
40 Hz on 2 cores, docs/decisions.md). numba's pool exists from import on, so its size must be set before numba
is first imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

log = logging.getLogger(__name__)


def reserve_core_for_world() -> bool:
    """Give numba's pool all cores but one (at least 1), leaving one to a real-time world process. Effective
    only before numba is imported and if `NUMBA_NUM_THREADS` is not set; returns whether it took effect."""
    if "NUMBA_NUM_THREADS" in os.environ:
        return False
    if "numba" in sys.modules:
        log.warning("numba is already imported: set NUMBA_NUM_THREADS=%d before starting for real-time runs",
                    max(1, (os.cpu_count() or 2) - 1))  # fmt: skip
        return False
    os.environ["NUMBA_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) - 1))
    return True


CHILD_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
"""Thread pools limited to one thread in a spawned child process (unless set by the user): the surrogate's arrays
are small, and it should leave the other cores to the twin (a precaution; the measured cost on 2 cores came from
the twin's own numba pool, `reserve_core_for_world`); parallel workers share the cores between them."""


@contextlib.contextmanager
def one_thread_per_pool() -> Iterator[None]:
    """Environment for spawning a child process (the surrogate; parallel workers): one thread per pool
    (`CHILD_THREAD_VARIABLES`, unless set by the user), restored after."""
    saved = {name: os.environ.get(name) for name in CHILD_THREAD_VARIABLES}
    for name in CHILD_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
