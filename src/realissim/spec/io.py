"""Strict JSON load/save of spec dataclasses (scenes, gap profiles, start states), written once.

`from_json(cls, text)` parses and validates with the strict codec (`realissim.spec.codec`); `load_json`
adds the file's name to any error; `save_json` writes atomically. Every problem is one `SpecError` naming
the field, including the JSON constants NaN and ±Infinity, which Python's `json` accepts but a spec never
holds (values must be finite). The scene functions below are these at `SceneSpec`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from realissim.spec.codec import from_dict, join_path, to_dict
from realissim.spec.errors import SpecError
from realissim.spec.scene import _GAUSSIAN_FIELDS, GaussianSetSpec, SceneSpec

T = TypeVar("T")


class _Constant:
    """A NaN / Infinity / -Infinity token in a JSON text, kept so that the error can name its field."""

    def __init__(self, token: str) -> None:
        self.token = token


def _reject_constants(data: Any, path: str = "") -> None:
    """Raise `SpecError` at the first `_Constant` in parsed JSON `data` (document order)."""
    if isinstance(data, _Constant):
        raise SpecError(path, f"JSON constant {data.token} is not allowed (values must be finite)")
    if isinstance(data, dict):
        for key, value in data.items():
            _reject_constants(value, join_path(path, str(key)))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _reject_constants(value, f"{path}[{i}]")


def from_json(cls: type[T], text: str | bytes) -> T:
    """Parse JSON text (bytes: UTF-8) into a validated `cls`; any problem is a `SpecError` naming the field."""
    constants: list[_Constant] = []

    def constant(token: str) -> _Constant:
        constants.append(_Constant(token))
        return constants[-1]

    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        data = json.loads(text, parse_constant=constant)
        if constants:
            _reject_constants(data)
    except UnicodeDecodeError as err:
        raise SpecError("", f"file is not UTF-8 text: {err}") from None
    except json.JSONDecodeError as err:
        raise SpecError("", f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise SpecError("", "JSON nested too deeply") from None
    return from_dict(cls, data)


def to_json(spec: Any) -> str:
    """A spec dataclass as indented JSON text; floats are written so that they read back bit-exactly."""
    return json.dumps(to_dict(spec), indent=2, allow_nan=False) + "\n"


def load_json(cls: type[T], path: str | Path, what: str = "scene") -> T:
    """Read and validate a `cls` JSON file (`what` names its kind in errors); errors name the file and field."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as err:
        raise SpecError("", f"cannot read {what} file {path}: {err.strerror}") from None
    try:
        return from_json(cls, text)
    except SpecError as err:
        raise SpecError(err.field, f"{err.reason} (in {path})") from None


def save_json(spec: Any, path: str | Path) -> None:
    """Write a spec dataclass as JSON, atomically: a temporary file beside the target, renamed over it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(to_json(spec), encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def scene_from_dict(data: Any) -> SceneSpec:
    """Validate a JSON-like dict and build the scene; raises `SpecError` naming the bad field."""
    return from_dict(SceneSpec, data)


def scene_to_dict(scene: SceneSpec) -> dict[str, Any]:
    """The scene as plain JSON types; `scene_from_dict(scene_to_dict(s)) == s`."""
    return to_dict(scene)


def scene_from_json(text: str | bytes) -> SceneSpec:
    """Parse JSON text into a validated scene; any problem is a `SpecError`."""
    return from_json(SceneSpec, text)


def scene_to_json(scene: SceneSpec) -> str:
    """Serialise to indented JSON text; floats are written so that they read back bit-exactly."""
    return to_json(scene)


def load_scene(path: str | Path) -> SceneSpec:
    """Read and validate a scene JSON file; errors name the file and the field."""
    return load_json(SceneSpec, path, what="scene")


def save_scene(scene: SceneSpec, path: str | Path) -> None:
    """Write the scene as JSON, atomically (a temporary file renamed over the target)."""
    save_json(scene, path)


def load_gaussians(
    ref: GaussianSetSpec | str, base_dir: str | Path = ".", field: str = "gaussians"
) -> dict[str, np.ndarray]:
    """Resolve inline or referenced Gaussians into validated float64 arrays keyed by field name.

    A reference is a path to an `.npz` with keys means (N,3), quats (N,4), scales (N,3), colors (N,3)
    and opacities (N,), relative to `base_dir` (normally the scene file's folder).
    """
    if isinstance(ref, GaussianSetSpec):
        return ref.arrays()
    path = Path(base_dir) / ref
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: np.asarray(npz[name], dtype=np.float64) for name in _GAUSSIAN_FIELDS}
    except (OSError, ValueError) as err:
        raise SpecError(field, f"cannot read Gaussians from {path}: {err}") from None
    except KeyError as err:
        raise SpecError(field, f"{path} lacks array {err}") from None
    expected = {"means": (3,), "quats": (4,), "scales": (3,), "colors": (3,), "opacities": ()}
    for name, tail in expected.items():
        if arrays[name].shape[1:] != tail or not np.all(np.isfinite(arrays[name])):
            raise SpecError(f"{field}.{name}", f"must be finite with shape (N, {', '.join(map(str, tail))})")
    try:
        GaussianSetSpec(**{k: tuple(map(tuple, v)) if v.ndim == 2 else tuple(v) for k, v in arrays.items()})
    except SpecError as err:
        raise err.under(field) from None
    return arrays


__all__ = [
    "from_json",
    "load_gaussians",
    "load_json",
    "load_scene",
    "save_json",
    "save_scene",
    "scene_from_dict",
    "scene_from_json",
    "scene_to_dict",
    "scene_to_json",
    "to_json",
]
