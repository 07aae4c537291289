"""Shared fixtures: the PushT scene and its twin (built once per test session)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import settings

from realissim.assets.pusht import pusht_scene
from realissim.spec.scene import SceneSpec

# Property tests draw the same examples on every run (the suite is deterministic): a failure found once is found
# again, and CI cannot fail on a draw no earlier run made.
settings.register_profile("deterministic", derandomize=True)
settings.load_profile("deterministic")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (one worker per core, `scripts/test`), one torch thread per worker: torch's spinning
    OpenMP threads, two per worker beside each worker's surrogate, made the online tests up to 5× slower. Tests
    that need more threads set them (and restore them)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def scene() -> SceneSpec:
    return pusht_scene()


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One torch thread for the test: on a busy 2-core machine a second OpenMP thread makes small kernels far
    slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
