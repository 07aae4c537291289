"""Shared fixtures: the PushT scene and its twin (built once per test session)."""

from __future__ import annotations

import os
from collections.abc import Iterator

# Under pytest-xdist (`scripts/test`: one worker per core), OpenMP threads (torch's, numba's) must sleep rather than
# spin while they wait: a worker's spinning threads starved the other worker's lock-step exchanges with its
# surrogate (an online test ran 5-10x slower beside a torch-heavy one). Set before torch loads OpenMP.
if os.environ.get("PYTEST_XDIST_WORKER") is not None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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


HEAVY_FIRST = (
    "test_resync.py",
    "test_runtime.py",
    "test_collect.py",
    "test_flow_policy.py",
    "test_eval_online.py",
    "test_random_pushes.py",
    "test_cli.py",
    "test_shadows.py",
    "test_board_calibration.py",
    "test_policy_images.py",
    "test_reacquire.py",
    "test_correction.py",
)
"""Test files that take the longest (`--durations`), run first: `scripts/test` hands whole files to its two workers
in collection order, so the longest going first leaves the shortest for the end and both workers finish together.
Only the order changes; every file's tests keep theirs."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: within a file, its own order
