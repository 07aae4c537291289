"""Strict conversion between JSON-like dicts and frozen spec dataclasses.

The type hints of a dataclass are its schema: every field is converted and checked against its
declared type, unknown and missing keys are rejected, and any `SpecError` raised by a dataclass's own
semantic checks (its `__post_init__`) is re-raised with the full field path, so the caller sees one
error that names the field and the reason. A dataclass may list keys of an older format it no longer reads in
a class attribute `RETIRED_KEYS` (key → what replaced it); such a key is an error that says so.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

from realissim.spec.errors import SpecError

T = TypeVar("T")


def join_path(path: str, name: str) -> str:
    """The path of field `name` inside the field at `path` ("" is the document's root)."""
    return f"{path}.{name}" if path else name


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _to_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(path, f"must be a number, got {type(value).__name__} {_describe(value)}")
    try:
        result = float(value)
    except OverflowError:
        raise SpecError(path, f"number too large: {_describe(value)}") from None
    if not math.isfinite(result):
        raise SpecError(path, f"must be finite, got {result}")
    return result


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is float:
        return _to_float(value, path)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(path, f"must be an integer, got {type(value).__name__} {_describe(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(path, f"must be true or false, got {_describe(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(path, f"must be a string, got {type(value).__name__} {_describe(value)}")
        return value
    if origin is Literal:
        allowed = typing.get_args(tp)
        if isinstance(value, bool) or value not in allowed:
            raise SpecError(path, f"must be one of {list(allowed)}, got {_describe(value)}")
        return value
    if origin is tuple:
        return _convert_tuple(tp, value, path)
    if origin in (Union, types.UnionType):
        return _convert_union(tp, value, path)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    raise TypeError(f"spec codec does not support type {tp!r} at {path}")


def _convert_tuple(tp: Any, value: Any, path: str) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(path, f"must be a list, got {type(value).__name__} {_describe(value)}")
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(args[0], item, f"{path}[{i}]") for i, item in enumerate(value))
    if len(value) != len(args):
        raise SpecError(path, f"must have exactly {len(args)} elements, got {len(value)}")
    return tuple(_convert(arg, item, f"{path}[{i}]") for i, (arg, item) in enumerate(zip(args, value)))


def _convert_union(tp: Any, value: Any, path: str) -> Any:
    args = typing.get_args(tp)
    if value is None:
        if type(None) in args:
            return None
        raise SpecError(path, "must not be null")
    # Pick the alternative by the JSON kind of the value, so the error names the real mismatch.
    for arg in args:
        if arg is type(None):
            continue
        if dataclasses.is_dataclass(arg) and isinstance(value, dict):
            return _convert(arg, value, path)
        if arg is str and isinstance(value, str):
            return value
        if arg is bool and isinstance(value, bool):
            return value
        if arg is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if arg is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return _to_float(value, path)
        if typing.get_origin(arg) is tuple and isinstance(value, (list, tuple)):
            return _convert(arg, value, path)
    kinds = [a.__name__ if a is not type(None) else "null" for a in args]
    kinds = ["object" if dataclasses.is_dataclass(a) else k for a, k in zip(args, kinds)]
    raise SpecError(path, f"must be one of {kinds}, got {type(value).__name__} {_describe(value)}")


def from_dict(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass `cls` from a JSON-like dict, strictly; raises `SpecError` naming the field."""
    if not isinstance(data, dict):
        raise SpecError(path or "<root>", f"must be an object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    retired: Mapping[str, str] = getattr(cls, "RETIRED_KEYS", {})
    for key in data:
        if key in retired and key not in fields:
            raise SpecError(join_path(path, str(key)), f"key of an older format, no longer read: {retired[key]}")
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(join_path(path, str(key)), f"unknown key{hint}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in data:
            has_default = field.default is not dataclasses.MISSING
            if has_default or field.default_factory is not dataclasses.MISSING:
                continue
            raise SpecError(join_path(path, name), "missing required key")
        kwargs[name] = _convert(hints[name], data[name], join_path(path, name))
    try:
        return cls(**kwargs)
    except SpecError as err:
        raise err.under(path) from None


def to_dict(spec: Any) -> Any:
    """Turn a spec dataclass (or a value inside one) into plain JSON types: dicts, lists, numbers."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        return {f.name: to_dict(getattr(spec, f.name)) for f in dataclasses.fields(spec)}
    if isinstance(spec, (tuple, list)):
        return [to_dict(item) for item in spec]
    return spec


UNDESCRIBED_OK = frozenset({"boxes"})
"""Keys a description may lack (or hold null for) and still match one that has them: what older descriptions did
not describe. An object's `boxes` (its exact shape) are descriptive: the twin's physics collides on its spheres, and
datasets and checkpoints written before objects carried their shape remain usable."""


def first_difference(
    a: Any,
    b: Any,
    path: str,
    labels: tuple[str, str] = ("old", "new"),
    undescribed_ok: frozenset[str] = frozenset(),
) -> str | None:
    """The first place (dotted path from `path`, e.g. "scene.objects[0].mass") where JSON values `a` and `b`
    differ, with both values under `labels`; None if they are equal (a bool never equals a number). A key in
    `undescribed_ok` that either side lacks or holds null for matches whatever the other holds (`UNDESCRIBED_OK`)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key in undescribed_ok and (a.get(key) is None or b.get(key) is None):
                continue
            where = first_difference(a.get(key), b.get(key), f"{path}.{key}", labels, undescribed_ok)
            if where is not None:
                return where
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            where = first_difference(x, y, f"{path}[{i}]", labels, undescribed_ok)
            if where is not None:
                return where
        return None
    if a == b and isinstance(a, bool) == isinstance(b, bool):
        return None
    return f"{path} ({labels[0]} {_short_json(a)}, {labels[1]} {_short_json(b)})"


def _short_json(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
