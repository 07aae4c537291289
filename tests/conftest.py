"""Shared fixtures: the PushT scene and its twin (built once per test session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from realissim.assets.pusht import pusht_scene
from realissim.spec.scene import SceneSpec


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
