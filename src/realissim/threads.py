"""Compute threads when the twin shares a small machine with a real-time world process.

A real-time world's process needs about half a core, and a compute thread more only contends with it (26 vs
40 Hz on 2 cores, docs/decisions.md). numba's pool exists from import on, so its size must be set before numba
is first imported.
"""

from __future__ import annotations

import logging
import os
import sys

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
