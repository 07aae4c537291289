"""The episode store's schema: what a dataset holds (`DatasetMeta`, `EpisodeData`, `EpisodeInfo`, the per-frame
`FIELDS`) and the checks of it, without touching a dataset's files (`store` writes them, `reader` reads them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

import realissim
from realissim.spec.codec import UNDESCRIBED_OK, first_difference, from_dict, to_dict
from realissim.spec.errors import SpecError
from realissim.spec.io import scene_from_dict, scene_to_dict
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState

FORMAT = 1
"""On-disk format version, in the root group's attributes."""
ATTR = "realissim"
"""The attribute key under which this package keeps its metadata in a zarr group."""
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class DatasetError(Exception):
    """Any problem with a dataset (missing, malformed, incompatible, locked, disk full); names path and problem."""


@dataclass(frozen=True)
class Field:
    """One per-frame array: its shape after the frame axis ("K": objects, "J": joints), stored dtype, unit,
    dimension names, and when it is present ("always", "online", "oracle": online with an oracle, "labelled": in an
    episode an expert relabelled, `RELABEL_KEY`; "M" is then the label chunk's waypoints; "measured": online, the
    real arm's readings and commands and the correction's force, recorded since identification needed them
    (`realissim.sysid`) — online episodes written before have none)."""

    name: str
    tail: tuple[str | int, ...]
    dtype: str
    unit: str
    dims: tuple[str, ...]
    kind: Literal["always", "online", "oracle", "labelled", "measured"] = "always"
    stored: str | None = None
    """The array's name in the store when it differs from `name` (kept for the datasets already written)."""

    @property
    def key(self) -> str:
        """The array's name in the store."""
        return self.stored or self.name

    @property
    def evaluation_only(self) -> bool:
        """Ground truth (or derived from it): never an input to a policy."""
        return self.kind == "oracle"


FIELDS: tuple[Field, ...] = (
    Field("time", (), "float64", "s", ("frame",)),
    Field("object_pos", ("K", 3), "float64", "m", ("frame", "object", "xyz")),
    Field("object_quat", ("K", 4), "float64", "wxyz", ("frame", "object", "wxyz")),
    Field("object_linvel", ("K", 3), "float64", "m/s", ("frame", "object", "xyz")),
    Field("object_angvel", ("K", 3), "float64", "rad/s", ("frame", "object", "xyz")),
    Field("q", ("J",), "float64", "rad", ("frame", "joint")),
    Field("qd", ("J",), "float64", "rad/s", ("frame", "joint")),
    Field("q_des", ("J",), "float64", "rad", ("frame", "joint"), stored="q_cmd"),
    Field("tip", (3,), "float64", "m", ("frame", "xyz")),
    Field("progress", (), "float32", "1", ("frame",)),
    Field("policy_progress", (), "float32", "1", ("frame",)),
    Field("sync_pos_err", ("K",), "float64", "m", ("frame", "object"), "oracle"),
    Field("sync_yaw_err", ("K",), "float64", "rad", ("frame", "object"), "oracle"),
    Field("desynced", (), "bool", "", ("frame",), "online"),
    Field("oracle_object_pos", ("K", 3), "float64", "m", ("frame", "object", "xyz"), "oracle"),
    Field("oracle_object_quat", ("K", 4), "float64", "wxyz", ("frame", "object", "wxyz"), "oracle"),
    Field("label_mask", (), "bool", "", ("frame",), "labelled"),
    Field("label_q", ("M", "J"), "float32", "rad", ("frame", "waypoint", "joint"), "labelled"),
    Field("q_real", ("J",), "float64", "rad", ("frame", "joint"), "measured"),
    Field("q_sent", ("J",), "float64", "rad", ("frame", "joint"), "measured"),
    Field("correction_force", ("K", 3), "float64", "N", ("frame", "object", "xyz"), "measured"),
)
"""Every per-frame field of `EpisodeData`, in its order (SI units, world frame)."""


def code_version() -> str:
    """`realissim.__version__`, plus "+g<commit>" when the package runs from a git checkout."""
    here = Path(realissim.__file__).resolve().parent
    if "site-packages" in here.parts:
        return realissim.__version__
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return realissim.__version__
    return f"{realissim.__version__}+g{out.stdout.strip()}"


def progress_label(length: int) -> np.ndarray:
    """The progress label of an episode of `length` frames: (T,) float32 elapsed fraction k / (T − 1)."""
    return (np.arange(length) / max(length - 1, 1)).astype(np.float32)


@dataclass(frozen=True)
class DatasetMeta:
    """What is stored once per dataset (every episode shares it)."""

    task: str
    """Registry name of the task, e.g. "pusht"."""
    fps: float
    """Frames per second of every per-frame array (the twin's frame rate)."""
    source: str
    """Who acted: "expert", "teleop", or another policy's name."""
    online: bool
    """Collected over a real (or surrogate) world, with sync errors and the desync flag."""
    gap: str | None
    """Online: the gap profile's name ("default" for the default); offline: None."""
    scene: SceneSpec
    task_config: dict[str, Any]
    """The task's resolved config (JSON types)."""
    code_version: str
    """`code_version()` of the writer that created the dataset."""
    joint_names: tuple[str, ...]
    object_names: tuple[str, ...]
    cameras: tuple[str, ...] = ()
    """Real cameras recorded in every episode (images/<camera>)."""
    image_size: tuple[int, int] | None = None
    """(width, height) px of the recorded real frames; None without cameras."""
    created: str = ""
    """ISO-8601 UTC time of creation (filled by the writer that created the dataset)."""

    def __post_init__(self) -> None:
        for name in ("joint_names", "object_names", "cameras"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.image_size is not None:
            object.__setattr__(self, "image_size", tuple(int(v) for v in self.image_size))
        _require(bool(self.task), "task", "must be non-empty")
        _require(bool(self.source), "source", "must be non-empty")
        _require(math.isfinite(self.fps) and self.fps > 0, "fps", f"must be a positive number, got {self.fps}")
        _require(isinstance(self.online, bool), "online", "must be a bool")
        _require((self.gap is not None) == self.online, "gap", "must name the gap profile online and be None offline")
        _require(self.joint_names == self.scene.robot.joint_names, "joint_names", "must be the scene's joints")
        _require(
            self.object_names == tuple(o.name for o in self.scene.objects),
            "object_names",
            "must be the scene's objects",
        )
        _require(len(set(self.cameras)) == len(self.cameras), "cameras", "names must be unique")
        for c in self.cameras:
            _require(bool(_NAME.fullmatch(c)), "cameras", f"{c!r} is not a valid name ([A-Za-z0-9_.-])")
        _require(bool(self.cameras) == (self.image_size is not None), "image_size", "is required iff cameras")
        _require(self.image_size is None or min(self.image_size) > 0, "image_size", "must be positive")
        try:
            json.dumps(self.task_config, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"DatasetMeta.task_config: not JSON-able: {err}") from None

    def to_json(self) -> dict[str, Any]:
        """As plain JSON types (the scene as `scene_to_dict`)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["scene"] = scene_to_dict(self.scene)
        for name in ("joint_names", "object_names", "cameras", "image_size"):
            out[name] = None if out[name] is None else list(out[name])
        return out

    @staticmethod
    def from_json(data: Any) -> DatasetMeta:
        """Inverse of `to_json`; ValueError naming the missing or invalid field."""
        if not isinstance(data, dict):
            raise ValueError("meta: must be a JSON object")
        names = [f.name for f in dataclasses.fields(DatasetMeta)]
        missing = [n for n in names if n not in data]
        if missing:
            raise ValueError(f"meta.{missing[0]}: missing")
        values = {n: data[n] for n in names}
        try:
            values["scene"] = scene_from_dict(values["scene"])
        except SpecError as err:
            raise ValueError(f"meta.scene.{err}") from None
        if values["image_size"] is not None:
            values["image_size"] = tuple(values["image_size"])
        return DatasetMeta(**values)


def _require(ok: bool, name: str, reason: str) -> None:
    if not ok:
        raise ValueError(f"DatasetMeta.{name}: {reason}")


_PROVENANCE = ("code_version", "created")
"""Meta fields that may differ when appending to an existing dataset (all others must agree)."""


def meta_mismatch(stored: DatasetMeta, new: DatasetMeta) -> str | None:
    """The first field (dotted path, e.g. "scene.objects[0].mass") where `new` is incompatible, or None."""
    a, b = stored.to_json(), new.to_json()
    for name in (f.name for f in dataclasses.fields(DatasetMeta) if f.name not in _PROVENANCE):
        if name == "fps":
            if not math.isclose(a[name], b[name], rel_tol=1e-9):
                return f"fps (dataset {a[name]!r}, new {b[name]!r})"
            continue
        where = first_difference(a[name], b[name], name, ("dataset", "new"), UNDESCRIBED_OK)
        if where is not None:
            return where
    return None


@dataclass
class EpisodeData:
    """One episode of T frames at the dataset's fps (K objects, J joints; SI units, world frame, wxyz)."""

    time: np.ndarray
    """(T,) float64 s, strictly increasing."""
    object_pos: np.ndarray
    """(T, K, 3) m."""
    object_quat: np.ndarray
    """(T, K, 4) [w, x, y, z]."""
    object_linvel: np.ndarray
    """(T, K, 3) m/s."""
    object_angvel: np.ndarray
    """(T, K, 3) rad/s, world frame."""
    q: np.ndarray
    """(T, J) rad."""
    qd: np.ndarray
    """(T, J) rad/s."""
    q_des: np.ndarray
    """(T, J) rad: the desired joints q′ commanded at each frame (stored as "q_cmd")."""
    tip: np.ndarray
    """(T, 3) m: the pusher tip's centre."""
    progress: np.ndarray
    """(T,) float32: the label, elapsed fraction k / (T − 1) (`progress_label`)."""
    policy_progress: np.ndarray
    """(T,) float32: the progress the policy reported."""
    sync_pos_err: np.ndarray | None = None
    """Online with an oracle: (T, K) m, twin vs oracle position error (evaluation only)."""
    sync_yaw_err: np.ndarray | None = None
    """Online with an oracle: (T, K) rad, twin vs oracle yaw error (evaluation only)."""
    desynced: np.ndarray | None = None
    """Online: (T,) bool, the desync detector's verdict."""
    oracle_object_pos: np.ndarray | None = None
    """Online with an oracle: (T, K, 3) m, true object positions (EVALUATION ONLY)."""
    oracle_object_quat: np.ndarray | None = None
    """Online with an oracle: (T, K, 4) true object orientations (EVALUATION ONLY)."""
    label_mask: np.ndarray | None = None
    """Relabelled episodes (`RELABEL_KEY`): (T,) bool, the frames an expert labelled."""
    label_q: np.ndarray | None = None
    """Relabelled episodes: (T, M, J) float32 rad, the expert's chunk at each labelled frame — the joints q′ it
    commands at time[k] + (i + 1)·H/M (H and M in the episode's `extra[RELABEL_KEY]`); zeros where not labelled."""
    q_real: np.ndarray | None = None
    """Online (measured): (T, J) rad, the real arm's joints as its encoders read them at the frame's start."""
    q_sent: np.ndarray | None = None
    """Online (measured): (T, J) rad, the joint target the follower sent the real arm at the frame (the twin arm's q
    after the frame, through the follower; while held, where it holds)."""
    correction_force: np.ndarray | None = None
    """Online (measured): (T, K, 3) N, world frame: the correction's force on each object during the frame (zero where
    none was applied)."""
    images: dict[str, np.ndarray] = field(default_factory=dict)
    """Camera name → (T, H, W, 3) uint8 real frames (the dataset's cameras, or none)."""

    def __len__(self) -> int:
        return len(self.time)


def check_episode(episode: EpisodeData, meta: DatasetMeta) -> dict[str, np.ndarray]:
    """The episode's arrays by name ("images/<camera>" for frames) in their stored dtypes, after checking
    shapes, dtypes and finite values against `meta`; ValueError naming the field otherwise."""
    t = np.asarray(episode.time)
    if t.ndim != 1 or len(t) == 0:
        raise ValueError(f"EpisodeData.time: must have shape (T,) with T ≥ 1, got {t.shape}")
    sizes = {"K": len(meta.object_names), "J": len(meta.joint_names)}
    out = {}
    if episode.label_q is not None:
        label = np.asarray(episode.label_q)
        if label.ndim != 3 or label.shape[1] < 1:
            raise ValueError(f"EpisodeData.label_q: expected shape (T, M, J) with M ≥ 1, got {label.shape}")
        sizes["M"] = label.shape[1]
    for f in FIELDS:
        value = getattr(episode, f.name)
        if value is None:
            if f.kind == "always" or (f.kind == "online" and meta.online):
                raise ValueError(f"EpisodeData.{f.name}: missing")
            continue
        if not meta.online and f.kind in ("online", "oracle", "measured"):
            raise ValueError(f"EpisodeData.{f.name}: must be None in an offline dataset")
        out[f.name] = _checked(f, np.asarray(value), (len(t), *(sizes.get(d, d) for d in f.tail)))
    groups = (("oracle", "the oracle fields"), ("labelled", "an expert's labels"), ("measured", "the measured fields"))
    for kind, what in groups:
        group = [f.name for f in FIELDS if f.kind == kind]
        given = [name for name in group if name in out]
        if 0 < len(given) < len(group):
            absent = next(name for name in group if name not in out)
            raise ValueError(f"EpisodeData.{absent}: missing while {given[0]} is given ({what} go together)")
    if np.any(np.diff(out["time"]) <= 0):
        raise ValueError("EpisodeData.time: must be strictly increasing")
    if not np.allclose(out["progress"], progress_label(len(t)), rtol=0, atol=1e-6):
        raise ValueError("EpisodeData.progress: must be the elapsed fraction k / (T - 1) (see progress_label)")
    out |= _checked_images(episode.images, meta, len(t))
    return out


def _checked(f: Field, arr: np.ndarray, shape: tuple[Any, ...]) -> np.ndarray:
    if arr.shape != shape:
        raise ValueError(f"EpisodeData.{f.name}: expected shape {shape} (T, *{f.tail}), got {arr.shape}")
    if f.dtype == "bool":
        if arr.dtype != np.bool_:
            raise ValueError(f"EpisodeData.{f.name}: dtype must be bool, got {arr.dtype}")
        return arr
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"EpisodeData.{f.name}: must hold real numbers, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"EpisodeData.{f.name}: contains NaN or inf")
    return np.ascontiguousarray(arr, dtype=f.dtype)


def _checked_images(images: Mapping[str, np.ndarray], meta: DatasetMeta, length: int) -> dict[str, np.ndarray]:
    if set(images) != set(meta.cameras):
        raise ValueError(f"EpisodeData.images: cameras {sorted(images)} differ from the dataset's {list(meta.cameras)}")
    out = {}
    for cam in meta.cameras:
        arr = np.asarray(images[cam])
        assert meta.image_size is not None
        shape = (length, meta.image_size[1], meta.image_size[0], 3)
        if arr.shape != shape or arr.dtype != np.uint8:
            raise ValueError(f"EpisodeData.images[{cam!r}]: expected uint8 {shape}, got {arr.dtype} {arr.shape}")
        out[f"images/{cam}"] = np.ascontiguousarray(arr)
    return out


DISTURBANCES_KEY = "disturbances"
"""Key of an episode's `extra` holding the simulated times (s) at which the collector moved its objects
(disturbed demonstrations, `expert.disturb`)."""
DYNAMICS_KEY = "dynamics"
"""Key of an episode's `extra` holding each randomised object's drawn dynamics (`twin.randomize.ObjectDraw`
as a dict, by object name) when the collector randomised them."""
START_SET_KEY = "start_set"
"""Key of an episode's `extra` naming the start-set file it started from (`CollectConfig.starts`: targeted
collection): {"file": path, "version": the set's version (a mined set: its mining run), "seed": its header's seed,
"index": the start's place in the file}."""
RELABEL_KEY = "relabel"
"""Key of an episode's `extra` marking it relabelled (`learn.dagger`: a policy's rollout whose frames an expert
labelled, `EpisodeData.label_q` / `label_mask`): {"horizon": H s, "waypoints": M of the label chunks, "round": the
DAgger round, "policy": the checkpoint that acted, "expert": who labelled}. Such an episode trains on its labelled
frames whether or not the rollout succeeded (`learn.dataset.training_episodes`)."""


@dataclass(frozen=True)
class EpisodeInfo:
    """What is known of a stored episode without reading its frames."""

    index: int
    length: int
    """Frames T."""
    success: bool
    failed: bool
    """Not successful (excluded from a `Dataset` by default)."""
    success_time: float
    """Simulated s at the first success (inf: never)."""
    final_coverage: float
    """The task's coverage at the end (nan: unknown)."""
    duration: float
    """T / fps, s."""
    seed: int | None
    start: StartState
    desynced_s: float
    """Online: s during which the twin was flagged out of sync."""
    reacquisitions: int
    extra: dict[str, Any]
    """Anything else the collector recorded (JSON types); `DISTURBANCES_KEY` the times of a disturbed
    demonstration's moves (`expert.disturb`)."""

    def to_json(self) -> dict[str, Any]:
        """The stored attributes (index, failed and duration are derived on reading)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _DERIVED}
        return out | {"success_time": _jfloat(self.success_time), "final_coverage": _jfloat(self.final_coverage),
                      "start": to_dict(self.start)}  # fmt: skip

    @staticmethod
    def from_json(index: int, data: dict[str, Any], fps: float) -> EpisodeInfo:
        """Inverse of `to_json`; KeyError / TypeError / ValueError (SpecError) on malformed attributes."""
        values = data | {"success_time": _pyfloat(data["success_time"]), "start": from_dict(StartState, data["start"]),
                         "final_coverage": _pyfloat(data["final_coverage"])}  # fmt: skip
        return EpisodeInfo(index=index, failed=not data["success"], duration=data["length"] / fps, **values)


_DERIVED = ("index", "failed", "duration")


def _jfloat(x: float) -> float | str:
    """A float as strict JSON: non-finite values as the zarr v3 strings "NaN", "Infinity", "-Infinity"."""
    return float(x) if math.isfinite(x) else ("NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity"))


def _pyfloat(x: float | str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[x] if isinstance(x, str) else float(x)


def check_info(info: EpisodeInfo, meta: DatasetMeta) -> dict[str, Any]:
    """The info's stored attributes, after checking the values append was given (ValueError naming them)."""
    if len(info.start.objects) != len(meta.object_names) or len(info.start.q) != len(meta.joint_names):
        raise ValueError(f"start: needs {len(meta.object_names)} objects and {len(meta.joint_names)} joints")
    if not (info.success_time >= 0):
        raise ValueError(f"success_time: must be ≥ 0 s or inf, got {info.success_time}")
    if not (math.isfinite(info.desynced_s) and info.desynced_s >= 0) or info.reacquisitions < 0:
        raise ValueError("desynced_s / reacquisitions: must be ≥ 0")
    attrs = info.to_json()
    try:
        json.dumps(attrs, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"extra: not JSON-able: {err}") from None
    return attrs
