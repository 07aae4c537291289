"""Compute threads when the twin shares a small machine with a real-time world process.

Measured on 2 cores, real-time scenario, 3 cameras at 160×90: with numba's default pool (2 threads) the
loop ran at 26 Hz (correction 31 ms); with `NUMBA_NUM_THREADS=1` at 40 Hz (correction 22 ms), because the
surrogate world's process needs about half a core and a second compute thread only contends with it.
`torch.set_num_threads` alone does not help: numba's pool threads exist from import on. So the pool size
must be set before numba is first imported.
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
