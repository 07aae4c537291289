"""The episode store's writer, `DatasetWriter`: a zarr v3 directory of episodes, written crash-safely by one
writer (what it holds: `schema`; reading it at random: `reader`, whose public names this module re-exports).

Layout (DATASET/):
    zarr.json           root group; attributes["realissim"] = {"format": 1, "meta": DatasetMeta as JSON}
    gaussians/          the scene's Gaussians, body frame, concatenated: means, quats, scales, colors,
                        opacities, body (index into the attribute "bodies")
    episodes/NNNNNN/    one group per episode: attributes["realissim"] = the episode's info; one array per
                        per-frame field (`FIELDS`: chunks of CHUNK_SECONDS along time) and images/<camera>
                        (one chunk per frame), each array one zarr shard (one file), blosc-zstd compressed
    .staging/           episodes being written (only while a writer appends, or after it was killed)

Crash safety: an episode is written whole into `.staging/`, fsynced, and moved into `episodes/` with one
`os.rename`, so after a `kill -9` (or power loss) it is either entirely there or not at all; a new writer
removes what a dead one left in `.staging/`. One writer at a time: it holds `flock` on the dataset directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import logging
import math
import os
import shutil
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec
from zarr.storage import LocalStore

from realissim.assets.gaussians import GaussianArrays
from realissim.data.reader import Dataset, episode_indices, episode_path, probe, read_info, read_meta
from realissim.data.schema import (
    ATTR,
    FIELDS,
    FORMAT,
    DatasetError,
    DatasetMeta,
    EpisodeData,
    EpisodeInfo,
    Field,
    check_episode,
    check_info,
    code_version,
    meta_mismatch,
    progress_label,
)
from realissim.spec.state import StartState

__all__ = [
    "ATTR",
    "CHUNK_SECONDS",
    "FIELDS",
    "FORMAT",
    "Dataset",
    "DatasetError",
    "DatasetMeta",
    "DatasetWriter",
    "EpisodeData",
    "EpisodeInfo",
    "Field",
    "check_episode",
    "code_version",
    "meta_mismatch",
    "progress_label",
]

log = logging.getLogger(__name__)

CHUNK_SECONDS = 2.0
"""Per-frame arrays are chunked along time in chunks of this many seconds (images: one frame a chunk)."""
_CODEC: dict[str, Any] = {
    "compressors": BloscCodec(cname="zstd", clevel=5, shuffle="shuffle"),
    "chunk_key_encoding": {"name": "default", "separator": "."},  # flat chunk files: fewer directories to fsync
}
_STAGING = ".staging"


def _fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (deepest first), then `root`'s parent."""

    def fail(err: OSError) -> None:
        raise err

    for dirpath, _dirs, files in os.walk(root, topdown=False, onerror=fail):
        for name in files:
            _fsync(os.path.join(dirpath, name), os.O_RDONLY)
        _fsync(dirpath, os.O_RDONLY | os.O_DIRECTORY)
    _fsync(root.parent, os.O_RDONLY | os.O_DIRECTORY)


def _fsync(path: str | Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_arrays(group: zarr.Group, arrays: Mapping[str, np.ndarray], fps: float) -> None:
    """Arrays (T, ...) into `group`: chunks of CHUNK_SECONDS along time (images: one frame), each array one
    shard (one file), so an episode is a few dozen files to fsync however long it is."""
    specs = {f.name: f for f in FIELDS}  # (stored under `Field.key`)
    frames = max(1, round(CHUNK_SECONDS * fps))
    for name, arr in arrays.items():
        span = min(frames, len(arr))
        shard = (-(-len(arr) // span) * span, *arr.shape[1:])
        if name.startswith("images/"):
            dims: tuple[str, ...] = ("frame", "height", "width", "rgb")
            chunks, attrs = (1, *arr.shape[1:]), {"unit": "rgb8", "evaluation_only": False}
        else:
            f = specs[name]
            dims, chunks, attrs = f.dims, (span, *arr.shape[1:]), {"unit": f.unit, "evaluation_only": f.evaluation_only}
        group.create_array(
            name if name.startswith("images/") else specs[name].key,
            data=arr,
            chunks=chunks,
            shards=shard,
            dimension_names=dims,
            attributes=attrs,
            **_CODEC,
        )


class DatasetWriter:
    """Appends episodes to a dataset at `path`, creating it with `meta` or resuming an existing one.

    Resuming checks that `meta` is compatible with the stored one (`meta_mismatch`); `self.meta` is the
    stored one. `gaussians` (body name → Gaussians in the body frame) are stored at creation; None: the
    scene's (`realissim.assets.appearance.scene_gaussians`, default config, paths relative to the working
    directory). One writer at a time per dataset; use as a context manager or call `close()`.
    """

    def __init__(
        self, path: str | Path, meta: DatasetMeta, *, gaussians: Mapping[str, GaussianArrays] | None = None
    ) -> None:
        self.path = Path(path)
        if not probe(self.path):
            self._create(meta, gaussians)
        self._lock = self._acquire()
        try:
            self.meta = read_meta(self.path)
            mismatch = meta_mismatch(self.meta, meta)
            if mismatch is not None:
                raise DatasetError(f"{self.path}: incompatible with this dataset: {mismatch}")
            self._clean_staging()
            indices = episode_indices(self.path)
        except BaseException:
            self.close()
            raise
        self.next_index = indices[-1] + 1 if indices else 0
        """The index the next appended episode gets."""

    def _create(self, meta: DatasetMeta, gaussians: Mapping[str, GaussianArrays] | None) -> None:
        """Build the empty dataset beside `path` and rename it into place (a crash leaves no half dataset)."""
        if gaussians is None:
            from realissim.assets.appearance import scene_gaussians

            gaussians = scene_gaussians(meta.scene)
        if not meta.created:
            meta = dataclasses.replace(meta, created=datetime.now(UTC).isoformat(timespec="seconds"))
        tmp = self.path.parent / f".{self.path.name}.creating-{uuid.uuid4().hex}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            root = zarr.open_group(
                LocalStore(tmp), mode="w-", zarr_format=3, attributes={ATTR: {"format": FORMAT, "meta": meta.to_json()}}
            )
            _write_gaussians(root.create_group("gaussians", attributes={"bodies": list(gaussians)}), gaussians)
            root.create_group("episodes")
            _fsync_tree(tmp)
            os.rename(tmp, self.path)
            _fsync(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            if err.errno in (errno.EEXIST, errno.ENOTEMPTY) and probe(self.path):
                return  # another writer created it first: resume it
            raise DatasetError(f"{self.path}: cannot create the dataset: {err}") from err
        log.info("created dataset %s (task %s, %s, %g fps)", self.path, meta.task, meta.source, meta.fps)

    def _acquire(self) -> int:
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise DatasetError(f"{self.path}: locked by another writer (one writer at a time)") from None
        return fd

    def _clean_staging(self) -> None:
        staging = self.path / _STAGING
        if staging.exists():
            left = list(staging.iterdir())
            if left:
                log.warning("%s: removing %d unfinished episode(s) of an interrupted writer", self.path, len(left))
            shutil.rmtree(staging)

    def append(
        self,
        episode: EpisodeData,
        *,
        success: bool,
        success_time: float = math.inf,
        final_coverage: float = math.nan,
        seed: int | None = None,
        start: StartState,
        desynced_s: float = 0.0,
        reacquisitions: int = 0,
        extra: dict[str, Any] | None = None,
    ) -> EpisodeInfo:
        """Write `episode` atomically as episode `next_index` and return its info. ValueError naming the field
        for malformed input (nothing written); DatasetError if writing fails (disk full: the episode is not
        written, the finished ones are untouched)."""
        if self._lock < 0:
            raise DatasetError(f"{self.path}: writer is closed")
        arrays = check_episode(episode, self.meta)
        if seed is not None and not isinstance(seed, int | np.integer):
            raise ValueError(f"seed: must be an int or None, got {seed!r}")
        n, seed = len(episode), None if seed is None else int(seed)
        info = EpisodeInfo(self.next_index, n, bool(success), not success, float(success_time),
                           float(final_coverage), n / self.meta.fps, seed, start, float(desynced_s),
                           int(reacquisitions), dict(extra or {}))  # fmt: skip
        attrs = check_info(info, self.meta)
        staging = self.path / _STAGING / f"{info.index:06d}-{uuid.uuid4().hex}"
        try:
            group = zarr.open_group(LocalStore(staging), mode="w-", zarr_format=3, attributes={ATTR: attrs})
            _write_arrays(group, arrays, self.meta.fps)
            _fsync_tree(staging)
            os.rename(staging, episode_path(self.path, info.index))
            _fsync(self.path / "episodes", os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)
            raise DatasetError(f"{self.path}: cannot write episode {info.index}: {err}") from err
        finally:
            with contextlib.suppress(OSError):
                staging.parent.rmdir()  # only when empty: zarr warns about a non-zarr directory in the dataset
        self.next_index += 1
        log.debug("%s: episode %d (%d frames, success %s)", self.path, info.index, info.length, info.success)
        return info

    def move_in(self, source: str | Path, index: int) -> EpisodeInfo:
        """Move episode `index` of the dataset at `source` (another dataset of the same meta, e.g. one a parallel
        collector's worker wrote, on the same file system) into this one as episode `next_index`, and return its
        info here. The episode is renamed, not copied: it leaves `source`. DatasetError naming the problem (an
        incompatible source, a missing episode, a failed rename); nothing changes then."""
        if self._lock < 0:
            raise DatasetError(f"{self.path}: writer is closed")
        source = Path(source)
        mismatch = meta_mismatch(self.meta, read_meta(source))
        if mismatch is not None:
            raise DatasetError(f"{source}: cannot move its episodes into {self.path}: {mismatch}")
        info = read_info(source, index, self.meta.fps)
        target = episode_path(self.path, self.next_index)
        try:
            os.rename(episode_path(source, index), target)
            _fsync(self.path / "episodes", os.O_RDONLY | os.O_DIRECTORY)
            _fsync(source / "episodes", os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            raise DatasetError(f"{self.path}: cannot move episode {index} of {source} in: {err}") from err
        info = dataclasses.replace(info, index=self.next_index)
        self.next_index += 1
        log.debug("%s: episode %d moved in from %s (%d)", self.path, info.index, source, index)
        return info

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _write_gaussians(group: zarr.Group, gaussians: Mapping[str, GaussianArrays]) -> None:
    parts = list(gaussians.values())
    body = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p) for p in parts])
    arrays = {k: np.concatenate([getattr(p, k) for p in parts]) for k in ("means", "quats", "scales", "colors")}
    arrays["opacities"] = np.concatenate([p.opacities for p in parts])
    for name, arr in (*arrays.items(), ("body", body)):
        chunks = tuple(max(1, s) for s in arr.shape)
        group.create_array(name, data=arr, chunks=chunks, **_CODEC)
