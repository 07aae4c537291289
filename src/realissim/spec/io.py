"""Loading and saving scene descriptions as JSON, strictly validated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from realissim.spec.codec import from_dict, to_dict
from realissim.spec.errors import SpecError
from realissim.spec.scene import _GAUSSIAN_FIELDS, GaussianSetSpec, SceneSpec


def _reject_constant(token: str) -> float:
    raise SpecError("", f"JSON constant {token} is not allowed (values must be finite)")


def scene_from_dict(data: Any) -> SceneSpec:
    """Validate a JSON-like dict and build the scene; raises `SpecError` naming the bad field."""
    return from_dict(SceneSpec, data)


def scene_to_dict(scene: SceneSpec) -> dict[str, Any]:
    """The scene as plain JSON types; `scene_from_dict(scene_to_dict(s)) == s`."""
    return to_dict(scene)


def scene_from_json(text: str | bytes) -> SceneSpec:
    """Parse JSON text into a validated scene; any problem is a `SpecError`."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        data = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError as err:
        raise SpecError("", f"file is not UTF-8 text: {err}") from None
    except json.JSONDecodeError as err:
        raise SpecError("", f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise SpecError("", "JSON nested too deeply") from None
    return scene_from_dict(data)


def scene_to_json(scene: SceneSpec) -> str:
    """Serialise to indented JSON text; floats are written so that they read back bit-exactly."""
    return json.dumps(scene_to_dict(scene), indent=2, allow_nan=False) + "\n"


def load_scene(path: str | Path) -> SceneSpec:
    """Read and validate a scene JSON file; errors name the file and the field."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as err:
        raise SpecError("", f"cannot read scene file {path}: {err.strerror}") from None
    try:
        return scene_from_json(text)
    except SpecError as err:
        raise SpecError(err.field, f"{err.reason} (in {path})") from None


def save_scene(scene: SceneSpec, path: str | Path) -> None:
    """Write the scene as JSON, atomically (a temporary file renamed over the target)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(scene_to_json(scene))
    tmp.replace(path)


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
    "load_gaussians",
    "load_scene",
    "save_scene",
    "scene_from_dict",
    "scene_from_json",
    "scene_to_dict",
    "scene_to_json",
]
