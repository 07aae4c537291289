"""Report values as JSON: dataclasses, paths, tuples, numpy scalars and infinities."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def jsonable(value: object) -> object:
    """Dataclasses, paths, tuples, numpy scalars and infinities as JSON values."""
    if hasattr(value, "__dataclass_fields__"):
        return {k: jsonable(getattr(value, k)) for k in value.__dataclass_fields__}  # type: ignore[attr-defined]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
