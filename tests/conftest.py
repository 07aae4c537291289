"""Shared fixtures: the PushT scene and its twin (built once per test session)."""

from __future__ import annotations

import pytest

from realissim.assets.pusht import pusht_scene
from realissim.spec.scene import SceneSpec


@pytest.fixture(scope="session")
def scene() -> SceneSpec:
    return pusht_scene()
