"""Objects named by "module:attribute" strings (entry-point style): how a layer names code above it without
importing it."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(spec: str) -> Any:
    """The object `spec` names, "package.module:attr" or "package.module:Class.attr" (imported on call);
    ValueError if `spec` has no ":"; ImportError / AttributeError as Python raises them."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{spec!r}: expected 'module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
