"""Torch's CPU thread count and determinism flag, set for a block and restored after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_settings(threads: int, deterministic: bool | None = None) -> Iterator[None]:
    """Torch's CPU thread count and (unless None) determinism flag for the duration, restored after. Only what
    differs is changed: setting the thread count rebuilds torch's thread pool, which cost more than a whole
    chunk's sampling when done on every call."""
    was_threads, was_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    det = was_det if deterministic is None else deterministic
    if threads != was_threads:
        torch.set_num_threads(threads)
    if det != was_det:
        torch.use_deterministic_algorithms(det)
    try:
        yield
    finally:
        if threads != was_threads:
            torch.set_num_threads(was_threads)
        if det != was_det:
            torch.use_deterministic_algorithms(was_det)
