"""The desync detector fires on a sustained residual rise and re-arms when it recovers."""

from __future__ import annotations

import numpy as np

from realissim.runtime.desync import DesyncConfig, DesyncDetector


def test_fires_on_a_sustained_rise_and_rearms() -> None:
    rng = np.random.default_rng(0)
    det = DesyncDetector(DesyncConfig(warmup=30, frames=10, rise=1.6, recover=1.2))
    residual = 1e-3 * (1 + 0.1 * rng.standard_normal(300))
    residual[100:103] *= 3  # a short spike: no alarm
    residual[150:200] *= 3  # a sustained rise: alarm, then recovery
    states = [det.update(float(r)) for r in residual]
    assert not any(states[:150])
    assert all(states[165:200])
    assert not states[-1]
    assert [kind for _, kind in det.events] == ["fired", "re-armed"]
    assert 159 <= det.events[0][0] <= 160 and 209 <= det.events[1][0] <= 210


def test_saturated_force_fires_and_warmup_never_does() -> None:
    det = DesyncDetector(DesyncConfig(warmup=5, frames=3))
    assert not any(det.update(1.0, force_saturated=False) for _ in range(5))
    assert [det.update(1.0, force_saturated=True) for _ in range(3)] == [False, False, True]
    fresh = DesyncDetector(DesyncConfig(warmup=50, frames=3))
    assert not any(fresh.update(100.0) for _ in range(20))  # no baseline yet
