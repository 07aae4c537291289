"""`Dataset`: reads an episode store (layout: see `realissim.data.store`) at random, and the helpers that find
its way around the layout, shared with the writer.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from pathlib import Path

import numpy as np
import zarr
from zarr.storage import LocalStore

from realissim.assets.gaussians import GaussianArrays
from realissim.data.schema import ATTR, FIELDS, FORMAT, DatasetError, DatasetMeta, EpisodeData, EpisodeInfo

_INDEX = re.compile(r"\d{6,}")


def probe(path: Path) -> bool:
    """Whether `path` is a dataset (False: absent or an empty directory); DatasetError for anything else."""
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return False
    try:
        attrs = json.loads((path / "zarr.json").read_text())["attributes"][ATTR]
    except (OSError, ValueError, KeyError, TypeError):
        raise DatasetError(f"{path}: not a realissim dataset (no zarr group with '{ATTR}' attributes)") from None
    if attrs.get("format") != FORMAT:
        raise DatasetError(f"{path}: unsupported dataset format {attrs.get('format')!r} (this code reads {FORMAT})")
    return True


def read_meta(path: Path) -> DatasetMeta:
    """The meta stored in the dataset at `path`; DatasetError if it is malformed."""
    try:
        data = json.loads((path / "zarr.json").read_text())["attributes"][ATTR]["meta"]
        return DatasetMeta.from_json(data)
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise DatasetError(f"{path}: malformed meta: {err}") from None


def episode_indices(path: Path) -> list[int]:
    """Indices of the episodes in `path/episodes`, ascending."""
    try:
        return sorted(int(e.name) for e in os.scandir(path / "episodes") if _INDEX.fullmatch(e.name))
    except OSError as err:
        raise DatasetError(f"{path}: cannot list episodes: {err}") from None


def episode_path(path: Path, index: int) -> Path:
    """The directory of episode `index` of the dataset at `path`."""
    return path / "episodes" / f"{index:06d}"


def read_info(path: Path, index: int, fps: float) -> EpisodeInfo:
    """The stored info of episode `index` of the dataset at `path` (frame rate `fps`); DatasetError if it is
    missing or malformed."""
    try:
        attrs = json.loads((episode_path(path, index) / "zarr.json").read_text())["attributes"][ATTR]
        return EpisodeInfo.from_json(index, attrs, fps)
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise DatasetError(f"{episode_path(path, index)}: malformed episode info: {err!r}") from None


class Dataset:
    """Reads a dataset: its meta, episode infos, whole episodes, and single frames at random.

    The episodes are those present when it was opened (a writer may append meanwhile). Without
    `include_failed`, failed episodes are left out of `episodes`, `num_frames` and `frame`. The arrays of the
    last `cache` episodes read stay open.
    """

    def __init__(self, path: str | Path, include_failed: bool = False, cache: int = 8) -> None:
        self.path = Path(path)
        if not probe(self.path):
            raise DatasetError(f"{self.path}: no dataset here")
        self.meta = read_meta(self.path)
        self.all_episodes = tuple(self._info(i) for i in episode_indices(self.path))
        """Every stored episode's info, by index."""
        self.episodes = tuple(e for e in self.all_episodes if include_failed or not e.failed)
        """The included episodes' infos, by index."""
        self._by_index = {e.index: e for e in self.all_episodes}
        self._offsets = np.cumsum([0, *(e.length for e in self.episodes)])
        self._open: OrderedDict[int, dict[str, zarr.Array]] = OrderedDict()
        self._cache = cache

    def _info(self, index: int) -> EpisodeInfo:
        return read_info(self.path, index, self.meta.fps)

    @property
    def num_frames(self) -> int:
        """Frames over the included episodes."""
        return int(self._offsets[-1])

    def __len__(self) -> int:
        return self.num_frames

    def arrays(self, index: int) -> dict[str, zarr.Array]:
        """The stored arrays of episode `index` by field name ("images/<camera>" for frames; a field stored under
        another name, `Field.key`, by its own name), opened lazily."""
        if index not in self._by_index:
            raise IndexError(f"{self.path}: no episode {index} (episodes: {len(self.all_episodes)})")
        if index in self._open:
            self._open.move_to_end(index)
            return self._open[index]
        group = zarr.open_group(LocalStore(episode_path(self.path, index), read_only=True), mode="r")
        keys = {f.name: f.key for f in FIELDS if f.key in group} | {
            f"images/{c}": f"images/{c}" for c in self.meta.cameras
        }
        self._open[index] = {name: group[key] for name, key in keys.items()}  # type: ignore[misc]
        if len(self._open) > self._cache:
            self._open.popitem(last=False)
        return self._open[index]

    def episode(self, index: int) -> EpisodeData:
        """Stored episode `index` (any stored one, failed included) in full."""
        arrays = {name: arr[...] for name, arr in self.arrays(index).items()}
        images = {name.removeprefix("images/"): arrays.pop(name) for name in list(arrays) if name.startswith("images/")}
        return EpisodeData(**arrays, images=images)

    def frame(self, i: int, fields: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """Global frame `i` (negative: from the end) over the included episodes: one row of every stored
        array, the evaluation-only ones included (or of `fields` only), plus "episode_index" and "frame_index"
        (0-d int64)."""
        n = self.num_frames
        if not -n <= i < n:
            raise IndexError(f"frame {i} out of range for {n} frames")
        i %= n
        e = int(np.searchsorted(self._offsets, i, side="right")) - 1
        index, row = self.episodes[e].index, i - int(self._offsets[e])
        arrays = self.arrays(index)
        out = {name: np.asarray(arrays[name][row]) for name in (fields or arrays)}
        return out | {"episode_index": np.asarray(index, np.int64), "frame_index": np.asarray(row, np.int64)}

    def gaussians(self) -> dict[str, GaussianArrays]:
        """The scene's Gaussians stored at creation: body name → Gaussians in that body's frame."""
        group = zarr.open_group(LocalStore(self.path / "gaussians", read_only=True), mode="r")
        body = group["body"][...]
        data = {k: group[k][...] for k in ("means", "quats", "scales", "colors", "opacities")}
        names = list(group.attrs["bodies"])  # type: ignore[arg-type]
        return {name: GaussianArrays(**{k: v[body == b] for k, v in data.items()}) for b, name in enumerate(names)}
