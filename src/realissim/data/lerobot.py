"""Export a realissim dataset to LeRobot's dataset format v3.0, written against the on-disk layout (LeRobot
≥ 0.4 reads it) without importing lerobot.

Layout under OUT: `meta/info.json`, `meta/stats.json`, `meta/tasks.parquet`, `meta/episodes/chunk-000/
file-000.parquet`, `data/chunk-CCC/file-FFF.parquet` and `videos/<key>/chunk-CCC/file-FFF.mp4` (many
episodes per file, a new file once one reaches its size limit). `meta/realissim_export.json` records the
resolved export settings and which source episode each exported one is.

Per exported frame (float32 vectors, SI units, world frame, quaternions [w, x, y, z]):
- `observation.state` (J + 3): the joints q (rad), then the pusher tip centre (x, y, z) m;
- `observation.environment_state` (7 K): per object of the twin (never the oracle), position then quaternion;
- `action` (J): the desired joints q′ that drive the step to the next exported frame (the setpoint in force
  at its end; see `episode_columns`);
- `progress` (1): the progress label; `next.done` (bool): last frame of its episode; `next.success` (bool):
  the episode was judged a success by the end of this step;
- `observation.images.<camera>`: videos rendered by `VirtualCameras` from the recorded twin state;
- LeRobot's own `timestamp` = frame_index / fps, `frame_index`, `episode_index`, `index`, `task_index`.

Resampling: `fps` must divide the source frame rate; exported frame k of an episode is source frame k·s
(s = source fps / fps), so an episode of T source frames gives ceil(T / s) frames.

Everything is written into a sibling `OUT.partial-<pid>` renamed to OUT at the end; any error removes it,
and an OSError (a full disk) becomes an `ExportError` naming OUT and the cause. The source is only read.
Dependencies point down: this module → `data.lerobot_format`, `data.reader`, `data.schema`, `data.stats`,
`data.video`, `views`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from realissim.data.lerobot_format import (
    CODEBASE_VERSION,
    DATA_PATH,
    EPISODES_PATH,
    EXPORT_PATH,
    IMAGE_KEY,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
    data_schema,
    episode_columns,
    features,
    table,
)
from realissim.data.reader import Dataset
from realissim.data.render import StateRenderer
from realissim.data.schema import DatasetError, EpisodeData, EpisodeInfo
from realissim.data.stats import QUANTILES as QUANTILES  # re-exported
from realissim.data.stats import ImageStats, feature_stats
from realissim.data.video import VideoConfig, VideoWriter, resolve_codec, video_info
from realissim.views.virtual import WRIST

log = logging.getLogger(__name__)


class ExportError(DatasetError):
    """An export could not be completed; the message names the output and the cause."""


@dataclass(frozen=True)
class FileLimits:
    """When LeRobot's files roll over (its defaults)."""

    chunks_size: int = 1000
    """Files per chunk directory."""
    data_files_size_in_mb: float = 100
    """A data parquet file takes no more episodes once it reaches this size, MB."""
    video_files_size_in_mb: float = 200
    """A video file takes no more episodes once it reaches this size, MB (as written so far: the encoder
    holds back some frames, a few dozen at most, so a file rolls over up to that much later)."""

    def __post_init__(self) -> None:
        if self.chunks_size < 1 or not self.data_files_size_in_mb > 0 or not self.video_files_size_in_mb > 0:
            raise ValueError(f"FileLimits: need chunks_size ≥ 1 and positive file sizes, got {self}")


@dataclass(frozen=True)
class ExportReport:
    """What `export_lerobot` wrote and how long it took."""

    out: Path
    episodes: int
    """Episodes exported."""
    skipped: int
    """Source episodes left out (failed ones, unless included)."""
    frames: int
    """Frames exported (rows of the data files; frames of each camera's video)."""
    fps: int
    cameras: tuple[str, ...]
    codec: str | None
    """The video encoder (None without cameras)."""
    files: tuple[Path, ...]
    """Every file written, relative to `out`."""
    bytes: int
    """Total size of the files, bytes."""
    wall_s: float
    render_s: float
    """Of which rendering the cameras, s."""
    encode_s: float
    """Of which encoding videos, s."""

    @property
    def frames_per_s(self) -> float:
        """Exported frames per wall-clock second."""
        return self.frames / self.wall_s if self.wall_s > 0 else math.inf


def export_lerobot(
    dataset: str | Path,
    out: str | Path,
    fps: int = 10,
    cameras: Sequence[str] = ("front", WRIST),
    include_failed: bool = False,
    image_size: tuple[int, int] = (96, 96),
    task: str | None = None,
    video: VideoConfig = VideoConfig(),
    limits: FileLimits = FileLimits(),
    overwrite: bool = False,
    progress: bool = True,
) -> ExportReport:
    """Export the realissim dataset at `dataset` to a LeRobot v3.0 dataset at `out` (see module docstring):
    frames at `fps` Hz (dividing the dataset's rate), the virtual `cameras` (scene camera names and/or
    "wrist") as videos of `image_size` (width, height) px, the successful episodes (the store marks the
    others failed; all with `include_failed`), under the task string `task` (default: the dataset's task
    name), `video` encoding the videos, files rolling over at `limits`, a tqdm bar with `progress`.

    Raises ValueError for a bad argument, DatasetError for an unreadable source, ExportError for an `out`
    that overlaps the source or is not empty (without `overwrite`), for no episode to export, and for a
    failed write (the partial output is removed first).
    """
    t0 = time.perf_counter()
    source = Dataset(dataset, include_failed=include_failed)
    stride = resample_stride(source.meta.fps, fps)
    out = Path(out)
    _check_out(Path(dataset), out, overwrite)
    if not source.episodes:
        failed = sum(e.failed for e in source.all_episodes)
        raise ExportError(f"{dataset}: no episode to export ({failed} failed ones left out: see include_failed)")
    partial = out.parent / f"{out.name}.partial-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        job = _Export(
            Path(dataset),
            source,
            partial,
            stride,
            fps,
            tuple(cameras),
            image_size,
            task or source.meta.task,
            video,
            limits,
        )
        job.run(progress)
        _publish(partial, out)
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        raise ExportError(
            f"export to {out} failed: {error}; the partial output was removed, the source was only read"
        ) from error
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    files = tuple(sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file()))
    report = ExportReport(
        out=out,
        episodes=len(source.episodes),
        skipped=len(source.all_episodes) - len(source.episodes),
        frames=job.frames,
        fps=fps,
        cameras=tuple(cameras),
        codec=job.codec,
        files=files,
        bytes=sum((out / f).stat().st_size for f in files),
        wall_s=time.perf_counter() - t0,
        render_s=job.render_s,
        encode_s=job.encode_s,
    )
    log.info("exported %d episodes, %d frames to %s in %.1f s", report.episodes, report.frames, out, report.wall_s)
    return report


def resample_stride(source_fps: float, fps: int) -> int:
    """Source frames per exported frame; ValueError unless `fps` is a positive integer dividing `source_fps`."""
    if isinstance(fps, bool) or not isinstance(fps, int | np.integer) or fps < 1:
        raise ValueError(f"fps: LeRobot needs a positive integer frame rate, got {fps!r}")
    stride = round(source_fps / fps)
    if stride < 1 or abs(stride * fps - source_fps) > 1e-9 * source_fps:
        divisors = [d for d in range(1, int(source_fps) + 1) if source_fps % d == 0]
        raise ValueError(f"fps: {fps} Hz does not divide the dataset's {source_fps:g} Hz; choose one of {divisors}")
    return stride


def _check_out(dataset: Path, out: Path, overwrite: bool) -> None:
    """ExportError if `out` overlaps the source dataset, or holds files and `overwrite` is off."""
    src, dst = dataset.resolve(), out.resolve()
    if dst == src or src in dst.parents or dst in src.parents:
        raise ExportError(f"{out}: the output must not overlap the source dataset {dataset}")
    if dst.exists() and not dst.is_dir():
        raise ExportError(f"{out}: exists and is not a directory")
    if dst.is_dir() and any(dst.iterdir()) and not overwrite:
        raise ExportError(f"{out}: exists and is not empty (pass overwrite=True to replace it)")


def _publish(partial: Path, out: Path) -> None:
    """Move the finished export into place, replacing what `out` held."""
    old = out.parent / f"{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(partial, out)
    shutil.rmtree(old, ignore_errors=True)


class _Slots:
    """The (chunk, file) indices of a sequence of files that roll over at `limit_mb`."""

    def __init__(self, chunks_size: int, limit_mb: float) -> None:
        self.chunk, self.file = 0, 0
        self.chunks_size, self.limit = chunks_size, limit_mb * 1024 * 1024

    def full(self, path: Path) -> bool:
        """Whether the current file (at `path`; an encoder may not have created it yet) has reached the
        limit; if so, the next slot is chosen."""
        if not path.exists() or path.stat().st_size < self.limit:
            return False
        self.file += 1
        if self.file == self.chunks_size:
            self.chunk, self.file = self.chunk + 1, 0
        return True


class _Export:
    """One export of `source` (read from `dataset`) into `root` (see `export_lerobot`)."""

    def __init__(
        self,
        dataset: Path,
        source: Dataset,
        root: Path,
        stride: int,
        fps: int,
        cameras: tuple[str, ...],
        size: tuple[int, int],
        task: str,
        video: VideoConfig,
        limits: FileLimits,
    ) -> None:
        meta = source.meta
        self.dataset, self.source, self.root, self.task = dataset, source, root, task
        self.stride, self.fps, self.cameras, self.size = stride, fps, cameras, size
        self.video, self.limits = video, limits
        self.renderer = StateRenderer(meta, cameras, size) if cameras else None
        self.codec = resolve_codec(video) if cameras else None
        self.features = features(meta, cameras, size)
        self.schema = data_schema(self.features)
        self.frames, self.render_s, self.encode_s = 0, 0.0, 0.0
        self.columns: list[dict[str, np.ndarray]] = []
        self.images = {c: ImageStats() for c in cameras}
        self.rows: list[dict[str, Any]] = []
        self.data: pq.ParquetWriter | None = None
        self.data_slots = _Slots(limits.chunks_size, limits.data_files_size_in_mb)
        self.videos: dict[str, VideoWriter] = {}
        self.video_slots = {c: _Slots(limits.chunks_size, limits.video_files_size_in_mb) for c in cameras}

    def run(self, progress: bool) -> None:
        """Write the data, videos and metadata of every included episode."""
        total = sum(math.ceil(e.length / self.stride) for e in self.source.episodes)
        try:
            with tqdm(total=total, desc="export lerobot", unit="frame", disable=not progress) as bar:
                for e, info in enumerate(self.source.episodes):
                    self._episode(e, info, bar)
            self._close_writers()
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the one to report
                self._close_writers()
            raise
        self._write_meta()

    def _close_writers(self) -> None:
        """Close every open data and video file, all of them even when one fails (then raise its error)."""
        writers = [w for w in (self.data, *self.videos.values()) if w is not None]
        self.data, self.videos = None, {}
        errors = []
        for writer in writers:
            try:
                writer.close()
            except Exception as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def _episode(self, e: int, info: EpisodeInfo, bar: tqdm) -> None:
        """Append source episode `info` as exported episode `e`: its data rows, video frames, metadata row."""
        ep = self.source.episode(info.index)
        columns = episode_columns(ep, info, self.stride, self.fps, e, self.frames)
        n = len(columns["index"])
        row = {"episode_index": e, "tasks": [self.task], "length": n} | self._write_data(columns)
        stats = {k: feature_stats(v) for k, v in columns.items()}
        if self.cameras:
            video_row, images = self._write_videos(ep, n, bar)
            row |= video_row
            stats |= {IMAGE_KEY.format(camera=c): s.stats() for c, s in images.items()}
        else:
            bar.update(n)
        row |= {f"stats/{k}/{s}": v.tolist() for k, st in stats.items() for s, v in st.items()}
        self.rows.append(row | {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        self.columns.append(columns)
        self.frames += n

    def _write_data(self, columns: dict[str, np.ndarray]) -> dict[str, Any]:
        """Append an episode's rows to the current data file; its data pointers for the episodes table."""
        slots = self.data_slots
        if self.data is None:
            self.data = pq.ParquetWriter(self._path(DATA_PATH, slots), self.schema, compression="snappy")
        self.data.write_table(table(columns, self.schema))
        n = len(columns["index"])
        row = {"data/chunk_index": slots.chunk, "data/file_index": slots.file}
        row |= {"dataset_from_index": self.frames, "dataset_to_index": self.frames + n}
        if slots.full(Path(self.data.where)):
            self.data.close()
            self.data = None
        return row

    def _write_videos(self, ep: EpisodeData, n: int, bar: tqdm) -> tuple[dict[str, Any], dict[str, ImageStats]]:
        """Render and encode an episode's n frames per camera: its video pointers and image stats."""
        row: dict[str, Any] = {}
        for camera in self.cameras:
            key, slots = IMAGE_KEY.format(camera=camera), self.video_slots[camera]
            if camera not in self.videos:
                path = self._path(VIDEO_PATH, slots, video_key=key)
                self.videos[camera] = VideoWriter(path, self.fps, *self.size, self.video)
            start = self.videos[camera].frames / self.fps
            row |= {f"videos/{key}/chunk_index": slots.chunk, f"videos/{key}/file_index": slots.file}
            row |= {f"videos/{key}/from_timestamp": start, f"videos/{key}/to_timestamp": start + n / self.fps}
        images = {c: ImageStats() for c in self.cameras}
        for batch in self._render(ep, n):
            t0 = time.perf_counter()
            for camera, frames in batch.items():
                self.videos[camera].write(frames)
                images[camera].add(frames)
            self.encode_s += time.perf_counter() - t0
            bar.update(len(batch[self.cameras[0]]))
        for camera in self.cameras:
            self.images[camera] += images[camera]
            if self.video_slots[camera].full(self.videos[camera].path):
                self.videos.pop(camera).close()
        return row, images

    def _path(self, template: str, slots: _Slots, **keys: str) -> Path:
        path = self.root / template.format(chunk_index=slots.chunk, file_index=slots.file, **keys)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _render(self, ep: EpisodeData, n: int) -> Iterator[dict[str, np.ndarray]]:
        """The cameras' frames uint8 (b, H, W, 3) of an episode's n exported frames, in batches: the twin's
        recorded joints and object poses put into qpos, body poses by forward kinematics."""
        assert self.renderer is not None
        rows = np.arange(n) * self.stride
        frames = self.renderer.render(ep.q[rows], ep.object_pos[rows], ep.object_quat[rows])
        while True:
            t0 = time.perf_counter()
            images = next(frames, None)
            self.render_s += time.perf_counter() - t0
            if images is None:
                return
            yield images

    def _write_meta(self) -> None:
        """tasks, episodes, stats, info and the export record."""
        (self.root / "meta").mkdir(exist_ok=True)
        tasks = pa.table({"task_index": pa.array([0], pa.int64()), "task": pa.array([self.task], pa.string())})
        pq.write_table(tasks.replace_schema_metadata({"pandas": json.dumps(_PANDAS_TASKS)}), self.root / TASKS_PATH)
        pq.write_table(pa.Table.from_pylist(self.rows), self._path(EPISODES_PATH, _Slots(1, 1)), compression="snappy")
        everything = {k: np.concatenate([c[k] for c in self.columns]) for k in self.columns[0]}
        stats = {k: feature_stats(v) for k, v in everything.items()}
        stats |= {IMAGE_KEY.format(camera=c): s.stats() for c, s in self.images.items()}
        _write_json(self.root / STATS_PATH, {k: {s: v.tolist() for s, v in st.items()} for k, st in stats.items()})
        for camera in self.cameras:
            key = IMAGE_KEY.format(camera=camera)
            first = self.root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
            self.features[key]["info"] = video_info(first)
        _write_json(self.root / INFO_PATH, self._info())
        _write_json(self.root / EXPORT_PATH, self._record())

    def _info(self) -> dict[str, Any]:
        n = len(self.rows)
        return {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": self.source.meta.scene.robot.model,
            "total_episodes": n,
            "total_frames": self.frames,
            "total_tasks": 1,
            "chunks_size": self.limits.chunks_size,
            "data_files_size_in_mb": self.limits.data_files_size_in_mb,
            "video_files_size_in_mb": self.limits.video_files_size_in_mb,
            "fps": self.fps,
            "splits": {"train": f"0:{n}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self.cameras else None,
            "features": self.features,
        }

    def _record(self) -> dict[str, Any]:
        meta = self.source.meta
        return {
            "source": str(self.dataset),
            "source_task": meta.task,
            "source_fps": meta.fps,
            "source_code_version": meta.code_version,
            "source_episodes": [e.index for e in self.source.episodes],
            "stride": self.stride,
            "fps": self.fps,
            "task": self.task,
            "cameras": list(self.cameras),
            "image_size": list(self.size),
            "video": asdict(self.video) | {"encoder": self.codec},
            "limits": asdict(self.limits),
        }


_PANDAS_TASKS = {
    "index_columns": ["task"],
    "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                        "metadata": {"encoding": "UTF-8"}}],
    "columns": [{"name": n, "field_name": n, "pandas_type": t, "numpy_type": d, "metadata": None}
                for n, t, d in (("task_index", "int64", "int64"), ("task", "unicode", "object"))],
    "attributes": {},
    "creator": {"library": "pyarrow", "version": pa.__version__},
    "pandas_version": "2.2.3",
}  # fmt: skip
"""pandas' schema metadata for tasks.parquet, so `pandas.read_parquet` restores the task string as the index
(what LeRobot reads); pandas is not a dependency of realissim."""


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
