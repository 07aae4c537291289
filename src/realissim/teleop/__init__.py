"""Browser teleoperation (viser): the operator drags the pusher tip's target; the twin's arm follows it by IK;
Start / Save / Discard record the twin's state into the episode store (source "teleop").

Layers, bottom to top: `policy` (target → joints, pure), `meshes` (the twin's geometry, pure), `session` (the
control thread: Env, episodes, store), `scene` and `panel` (the page), `server` (wires them, serves the page).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Snapshot": "session",
    "TeleopConfig": "config",
    "TeleopPolicy": "policy",
    "TeleopServer": "server",
    "TeleopSession": "session",
    "run_teleop": "server",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """The package's names, imported on first use (viser and the twin load only when teleoperation runs, so
    `realissim --help` stays fast)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
