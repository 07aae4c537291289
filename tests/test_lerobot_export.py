"""LeRobot v3.0 export: every invariant of the on-disk format checked with pyarrow and an independent reader
(PyAV decoding at `from_timestamp + timestamp`, compared with a fresh render of the recorded state), failed
episodes left out, file roll-over, and a disk that fills up mid-export (the source untouched).

The source datasets are recorded with the real recorder: 3 offline scripted pushes of 1.5 s (90 frames at
60 Hz, 15 at the exported 10 Hz). None succeeds in 1.5 s, so a copy relabels episodes 0 and 2 as successes
(judged at 1 s) to have both kinds.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import realissim.data.lerobot as lerobot
from realissim.data.lerobot import ExportError, ExportReport, FileLimits, ImageStats, export_lerobot, feature_stats
from realissim.data.recorder import EpisodeRecorder, meta_for_env
from realissim.data.store import Dataset, DatasetError, DatasetWriter
from realissim.data.video import VideoConfig, VideoWriter, usable_codecs, video_info
from realissim.envs.env import Env
from realissim.eval.episode import run_episode
from realissim.expert.scripted import ScriptedPush
from realissim.tasks import make
from realissim.twin.physics import PhysicsConfig, build_model
from realissim.twin.state import TwinLayout
from realissim.views.virtual import VirtualCameras, body_poses

FPS, STRIDE, SECONDS = 10, 6, 1.5
CAMERAS = ("front", "wrist")
SUCCESS_TIME = 1.0
MAD_LIMIT = 6.0
"""Mean absolute difference (grey levels of 255) allowed between a decoded frame and a fresh render. Measured
2.0–3.9 on these 96 × 96 scenes with AV1 at CRF 30 (LeRobot's default): yuv420p's halved chroma resolution
blurs the red T's edges (CRF 10 still leaves 1.4–1.7); the wrist view one frame off differs by 11–16."""
STAT_KEYS = {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
INFO_KEYS = {"codebase_version", "robot_type", "fps", "total_episodes", "total_frames", "total_tasks",
             "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb", "splits", "data_path",
             "video_path", "features"}  # fmt: skip
DEFAULT_FEATURES = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
                    "task_index": "int64"}  # fmt: skip
VIDEO_INFO_KEYS = {"video.height", "video.width", "video.codec", "video.pix_fmt", "video.is_depth_map", "video.fps",
                   "video.channels", "has_audio"}  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 offline scripted pushes of 1.5 s recorded by `EpisodeRecorder` (all unsuccessful)."""
    path = tmp_path_factory.mktemp("recorded") / "ds"
    task = make("pusht")
    env = Env(task)
    with DatasetWriter(path, meta_for_env(env, "expert")) as writer:
        recorder = EpisodeRecorder(writer)
        for seed in range(3):
            start = task.sample_start(np.random.default_rng(seed))
            run_episode(env, ScriptedPush(task.scene), start, SECONDS, observers=[recorder])
    return path


@pytest.fixture(scope="module")
def source(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded episodes, 0 and 2 relabelled as successes at `SUCCESS_TIME`, 1 left failed."""
    path = tmp_path_factory.mktemp("source") / "ds"
    src = Dataset(recorded, include_failed=True)
    with DatasetWriter(path, src.meta) as writer:
        for info in src.all_episodes:
            ok = info.index != 1
            writer.append(src.episode(info.index), success=ok, success_time=SUCCESS_TIME if ok else math.inf,
                          start=info.start)  # fmt: skip
    return path


@pytest.fixture(scope="module")
def exported(source: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[ExportReport, Path]:
    out = tmp_path_factory.mktemp("export") / "lerobot"
    return export_lerobot(source, out, fps=FPS, cameras=CAMERAS, progress=False), out


def _info(out: Path) -> dict[str, Any]:
    return json.loads((out / "meta/info.json").read_text())


def _episodes(out: Path) -> list[dict[str, Any]]:
    return pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()


def _data(out: Path) -> pa.Table:
    """Every data file listed by the episodes, concatenated in order."""
    info = _info(out)
    paths = dict.fromkeys(info["data_path"].format(chunk_index=e["data/chunk_index"], file_index=e["data/file_index"])
                          for e in _episodes(out))  # fmt: skip
    return pa.concat_tables([pq.read_table(out / p) for p in paths])


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).combine_chunks()
    if pa.types.is_fixed_size_list(col.type):
        return col.flatten().to_numpy().reshape(len(col), col.type.list_size)
    return col.to_numpy(zero_copy_only=False)


def _hash_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}  # fmt: skip


def _decode_at(path: Path, t: float) -> tuple[float, np.ndarray]:
    """The frame shown at t s (within LeRobot's 1e-4 s tolerance), found by seeking: (its time, RGB)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        container.seek(int(t / float(stream.time_base)), stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            if frame.time >= t - 1e-4:
                return frame.time, frame.to_ndarray(format="rgb24")
    raise AssertionError(f"{path}: no frame at {t} s")


def test_info_json(exported: tuple[ExportReport, Path], source: Path) -> None:
    report, out = exported
    info = _info(out)
    assert set(info) == INFO_KEYS
    assert info["codebase_version"] == "v3.0" and info["robot_type"] == "franka_panda"
    assert info["fps"] == FPS and isinstance(info["fps"], int)
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (2, 30, 1)
    assert (report.episodes, report.frames, report.skipped) == (2, 30, 1)
    assert info["splits"] == {"train": "0:2"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert (info["chunks_size"], info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (1000, 100, 200)
    features = info["features"]
    for key, ft in features.items():
        assert {"dtype", "shape", "names"} <= set(ft), key
    for key, dtype in DEFAULT_FEATURES.items():
        assert (features[key]["dtype"], features[key]["shape"]) == (dtype, [1])
    meta = Dataset(source).meta
    assert features["observation.state"]["names"] == [*meta.joint_names, "tip_x", "tip_y", "tip_z"]
    assert features["observation.environment_state"]["shape"] == [7 * len(meta.object_names)]
    assert features["action"] == {"dtype": "float32", "shape": [7], "names": list(meta.joint_names)}
    for camera in CAMERAS:
        ft = features[f"observation.images.{camera}"]
        assert (ft["dtype"], ft["shape"], ft["names"]) == ("video", [96, 96, 3], ["height", "width", "channels"])
        assert set(ft["info"]) == VIDEO_INFO_KEYS
        assert (ft["info"]["video.height"], ft["info"]["video.width"], ft["info"]["video.fps"]) == (96, 96, FPS)
        assert ft["info"]["video.codec"] == "av1" and ft["info"]["video.pix_fmt"] == "yuv420p"
        assert ft["info"]["video.channels"] == 3 and ft["info"]["has_audio"] is False
    assert report.codec == "libsvtav1"


def test_tasks_parquet(exported: tuple[ExportReport, Path]) -> None:
    _, out = exported
    table = pq.read_table(out / "meta/tasks.parquet")
    assert table.to_pylist() == [{"task_index": 0, "task": "pusht"}]
    assert table.schema.pandas_metadata["index_columns"] == ["task"]


def test_tasks_parquet_read_by_pandas(exported: tuple[ExportReport, Path]) -> None:
    """LeRobot reads tasks.parquet with pandas, the task string as the index."""
    _, out = exported
    pandas = pytest.importorskip("pandas", reason="pandas (LeRobot's reader of tasks.parquet) is not installed")
    tasks = pandas.read_parquet(out / "meta/tasks.parquet")
    assert list(tasks.index) == ["pusht"] and int(tasks.loc["pusht"].task_index) == 0


def test_data_parquet(exported: tuple[ExportReport, Path], source: Path) -> None:
    _, out = exported
    info, table = _info(out), _data(out)
    assert table.num_rows == info["total_frames"]
    assert set(table.column_names) == {k for k, ft in info["features"].items() if ft["dtype"] != "video"}
    for key, ft in info["features"].items():
        if ft["dtype"] != "video" and ft["shape"] != [1]:
            assert table.schema.field(key).type.list_size == ft["shape"][0]
    frame, index = _column(table, "frame_index"), _column(table, "index")
    np.testing.assert_array_equal(index, np.arange(table.num_rows))
    assert _column(table, "timestamp").dtype == np.float32
    np.testing.assert_array_equal(_column(table, "timestamp"), (frame / FPS).astype(np.float32))
    np.testing.assert_array_equal(_column(table, "task_index"), 0)
    src = Dataset(source)
    episode = _column(table, "episode_index")
    for e, src_info in enumerate(src.episodes):
        rows = episode == e
        ep = src.episode(src_info.index)
        k = np.arange(math.ceil(len(ep.time) / STRIDE))
        np.testing.assert_array_equal(frame[rows], k)
        i = k * STRIDE
        after = np.minimum(i + STRIDE, len(ep.time) - 1)  # the commands that drive the step to the next frame
        state = np.concatenate([ep.q[i], ep.tip[i]], axis=1)
        env_state = np.concatenate([ep.object_pos[i], ep.object_quat[i]], axis=-1).reshape(len(i), -1)
        np.testing.assert_array_equal(_column(table, "observation.state")[rows], state.astype(np.float32))
        np.testing.assert_array_equal(
            _column(table, "observation.environment_state")[rows], env_state.astype(np.float32)
        )
        np.testing.assert_array_equal(_column(table, "action")[rows], ep.q_des[after].astype(np.float32))
        np.testing.assert_array_equal(_column(table, "progress")[rows], ep.progress[i])
        np.testing.assert_array_equal(_column(table, "next.done")[rows], k == k[-1])
        np.testing.assert_array_equal(_column(table, "next.success")[rows], ep.time[after] >= SUCCESS_TIME - 1e-9)
    assert _column(table, "next.success").any() and not _column(table, "next.success").all()


def test_episodes_parquet(exported: tuple[ExportReport, Path]) -> None:
    _, out = exported
    info, episodes, table = _info(out), _episodes(out), _data(out)
    assert [e["episode_index"] for e in episodes] == list(range(info["total_episodes"]))
    assert sum(e["length"] for e in episodes) == info["total_frames"]
    index, episode = _column(table, "index"), _column(table, "episode_index")
    to_timestamp = dict.fromkeys(CAMERAS, 0.0)
    for e, row in enumerate(episodes):
        assert row["tasks"] == ["pusht"]
        assert (row["meta/episodes/chunk_index"], row["meta/episodes/file_index"]) == (0, 0)
        assert row["dataset_to_index"] - row["dataset_from_index"] == row["length"]
        assert row["dataset_from_index"] == (episodes[e - 1]["dataset_to_index"] if e else 0)
        rows = pq.read_table(out / info["data_path"].format(chunk_index=row["data/chunk_index"],
                                                            file_index=row["data/file_index"]))  # fmt: skip
        mine = _column(rows, "index")[_column(rows, "episode_index") == e]
        np.testing.assert_array_equal(mine, np.arange(row["dataset_from_index"], row["dataset_to_index"]))
        np.testing.assert_array_equal(index[episode == e], mine)
        for camera in CAMERAS:
            key = f"videos/observation.images.{camera}"
            assert row[f"{key}/from_timestamp"] == pytest.approx(to_timestamp[camera], abs=1e-9)
            assert row[f"{key}/to_timestamp"] - row[f"{key}/from_timestamp"] == pytest.approx(row["length"] / FPS)
            to_timestamp[camera] = row[f"{key}/to_timestamp"]
        for feature in info["features"]:
            assert {f"stats/{feature}/{s}" for s in STAT_KEYS} <= set(row), feature
            assert row[f"stats/{feature}/count"] == [row["length"]]


def test_stats_json(exported: tuple[ExportReport, Path]) -> None:
    _, out = exported
    info, table = _info(out), _data(out)
    stats = json.loads((out / "meta/stats.json").read_text())
    assert set(stats) == set(info["features"])
    for key, st in stats.items():
        assert set(st) == STAT_KEYS, key
        assert st["count"] == [info["total_frames"]], key
        ft = info["features"][key]
        shape = (3, 1, 1) if ft["dtype"] == "video" else tuple(ft["shape"])
        arrays = {s: np.asarray(v) for s, v in st.items() if s != "count"}
        assert all(v.shape == shape for v in arrays.values()), key
        order = [arrays[s] for s in ("min", "q01", "q10", "q50", "q90", "q99", "max")]
        assert all(np.all(a <= b + 1e-12) for a, b in itertools.pairwise(order)), key
        assert np.all(arrays["std"] >= 0), key
        if ft["dtype"] == "video":
            assert np.all((arrays["min"] >= 0) & (arrays["max"] <= 1)), key
            continue
        values = _column(table, key).astype(np.float64).reshape(table.num_rows, -1)
        np.testing.assert_allclose(arrays["min"].ravel(), values.min(0))
        np.testing.assert_allclose(arrays["max"].ravel(), values.max(0))
        np.testing.assert_allclose(arrays["mean"].ravel(), values.mean(0), rtol=1e-9, atol=1e-12)


def test_videos_decode_to_fresh_renders(exported: tuple[ExportReport, Path], source: Path) -> None:
    """An independent reader: PyAV seeks to from_timestamp + timestamp; the frame found must be the recorded
    state's render (within `MAD_LIMIT`), the nearest of the episode's renders (or one identical to it)."""
    _, out = exported
    info, episodes, table = _info(out), _episodes(out), _data(out)
    src = Dataset(source)
    model = build_model(src.meta.scene, PhysicsConfig())
    layout = TwinLayout.from_model(model, src.meta.joint_names, src.meta.object_names)
    cams = VirtualCameras(src.meta.scene, model, CAMERAS, (96, 96))
    for camera in CAMERAS:
        key = f"observation.images.{camera}"
        path = out / info["video_path"].format(video_key=key, chunk_index=0, file_index=0)
        with av.open(str(path)) as container:
            times = [frame.time for frame in container.decode(video=0)]
        assert len(times) == info["total_frames"]
        np.testing.assert_array_equal(times, np.arange(len(times)) / FPS)
    for e, row in enumerate(episodes):
        ep = src.episode(src.episodes[e].index)
        qpos = np.tile(model.qpos0, (row["length"], 1))
        qpos[:, layout.robot_qpos] = ep.q[::STRIDE]
        qpos[:, layout.object_qpos] = np.concatenate([ep.object_pos[::STRIDE], ep.object_quat[::STRIDE]], -1)
        renders = cams.render_batch(*body_poses(model, qpos))
        timestamps = _column(table, "timestamp")[_column(table, "episode_index") == e]
        for k in (0, row["length"] // 2, row["length"] - 1):
            for camera in CAMERAS:
                key = f"observation.images.{camera}"
                path = out / info["video_path"].format(video_key=key, chunk_index=row[f"videos/{key}/chunk_index"],
                                                       file_index=row[f"videos/{key}/file_index"])  # fmt: skip
                t = row[f"videos/{key}/from_timestamp"] + float(timestamps[k])
                shown, image = _decode_at(path, t)
                assert abs(shown - t) < 1e-4
                mad = np.abs(image.astype(float) - renders[camera].astype(float)).mean(axis=(1, 2, 3))
                assert mad[k] < MAD_LIMIT, (e, k, camera, mad[k])
                nearest = renders[camera][np.argmin(mad)].astype(float)
                assert np.abs(nearest - renders[camera][k]).mean() < 1.0, (e, k, camera)  # it, or one just like it


def test_failed_episodes_excluded_unless_asked(
    exported: tuple[ExportReport, Path], source: Path, tmp_path: Path
) -> None:
    _, out = exported
    assert json.loads((out / "meta/realissim_export.json").read_text())["source_episodes"] == [0, 2]
    everything = export_lerobot(source, tmp_path / "all", cameras=("wrist",), include_failed=True, progress=False)
    assert (everything.episodes, everything.skipped, everything.frames) == (3, 0, 45)
    assert _info(tmp_path / "all")["total_episodes"] == 3


def test_files_roll_over_at_their_size_limits(source: Path, tmp_path: Path) -> None:
    """Tiny limits: each episode gets its own data file (the third in chunk 1); videos roll over too, once the
    encoder has written its held-back frames, and each video file holds exactly its episodes' frames."""
    out = tmp_path / "rolled"
    limits = FileLimits(chunks_size=2, data_files_size_in_mb=1e-6, video_files_size_in_mb=1e-6)
    export_lerobot(source, out, cameras=("wrist",), include_failed=True, limits=limits, progress=False)
    info, episodes = _info(out), _episodes(out)
    assert [(e["data/chunk_index"], e["data/file_index"]) for e in episodes] == [(0, 0), (0, 1), (1, 0)]
    assert _data(out).num_rows == info["total_frames"] == 45
    key = "videos/observation.images.wrist"
    files: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in episodes:
        files.setdefault((row[f"{key}/chunk_index"], row[f"{key}/file_index"]), []).append(row)
    assert len(files) > 1
    for (chunk, file), rows in files.items():
        starts = np.cumsum([0, *(r["length"] for r in rows)])[:-1] / FPS
        assert [r[f"{key}/from_timestamp"] for r in rows] == pytest.approx(starts.tolist(), abs=1e-9)
        video = out / info["video_path"].format(
            video_key="observation.images.wrist", chunk_index=chunk, file_index=file
        )
        with av.open(str(video)) as container:
            assert sum(1 for _ in container.decode(video=0)) == sum(r["length"] for r in rows)


def test_no_cameras_no_videos(source: Path, tmp_path: Path) -> None:
    report = export_lerobot(source, tmp_path / "plain", cameras=(), progress=False)
    info = _info(tmp_path / "plain")
    assert info["video_path"] is None and report.codec is None
    assert not any(ft["dtype"] == "video" for ft in info["features"].values())
    assert not (tmp_path / "plain" / "videos").exists()


def test_bad_arguments(source: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"7 Hz does not divide the dataset's 60 Hz; choose one of \[1, 2, 3, 4"):
        export_lerobot(source, tmp_path / "a", fps=7)
    with pytest.raises(ValueError, match="positive integer"):
        export_lerobot(source, tmp_path / "a", fps=0)
    with pytest.raises(ValueError, match="unknown camera"):
        export_lerobot(source, tmp_path / "a", cameras=("nope",), progress=False)
    with pytest.raises(DatasetError, match="no dataset"):
        export_lerobot(tmp_path / "missing", tmp_path / "a")
    with pytest.raises(ExportError, match="overlap the source"):
        export_lerobot(source, source / "lerobot")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        export_lerobot(source, tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    export_lerobot(source, tmp_path / "full", cameras=(), overwrite=True, progress=False)
    assert not (tmp_path / "full" / "keep.txt").exists() and (tmp_path / "full" / "meta/info.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]


def test_failed_write_removes_the_partial_output(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write error at the very end (after all data and videos) still leaves nothing behind."""
    before = _hash_tree(source)

    def full(path: Path, value: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(lerobot, "_write_json", full)
    with pytest.raises(ExportError, match=r"export to .*out failed: \[Errno 28\] No space left on device"):
        export_lerobot(source, tmp_path / "out", cameras=("wrist",), progress=False)
    assert list(tmp_path.iterdir()) == []
    assert _hash_tree(source) == before


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Any:
    """A 48 KiB tmpfs (the export needs ~100 KiB), unmounted afterwards; skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_mid_export(source: Path, tiny_disk: Path) -> None:
    before = _hash_tree(source)
    with pytest.raises(ExportError, match=r"No space left on device") as caught:
        export_lerobot(source, tiny_disk / "out", fps=FPS, cameras=CAMERAS, include_failed=True, progress=False)
    assert str(tiny_disk / "out") in str(caught.value)
    assert list(tiny_disk.iterdir()) == []
    assert _hash_tree(source) == before


def test_feature_stats_match_numpy() -> None:
    x = np.random.default_rng(0).normal(size=(50, 4))
    st = feature_stats(x)
    np.testing.assert_allclose(st["q10"], np.quantile(x, 0.1, axis=0))
    np.testing.assert_allclose(st["std"], x.std(axis=0))
    assert st["count"].tolist() == [50] and st["min"].shape == (4,)
    assert feature_stats(np.arange(5))["q50"].tolist() == [2.0]


def test_image_stats_match_numpy() -> None:
    frames = np.random.default_rng(1).integers(0, 256, size=(6, 16, 20, 3)).astype(np.uint8)
    stats = ImageStats()
    stats.add(frames[:2])
    rest = ImageStats()
    rest.add(frames[2:])
    stats += rest
    st = stats.stats()
    pixels = frames.reshape(-1, 3) / 255.0
    assert st["count"].tolist() == [6] and st["mean"].shape == (3, 1, 1)
    np.testing.assert_allclose(st["mean"].ravel(), pixels.mean(0))
    np.testing.assert_allclose(st["std"].ravel(), pixels.std(0))
    np.testing.assert_allclose(st["max"].ravel(), pixels.max(0))
    for q in (0.01, 0.1, 0.5, 0.9, 0.99):
        expected = np.quantile(pixels, q, axis=0, method="inverted_cdf")
        np.testing.assert_allclose(st[f"q{round(q * 100):02d}"].ravel(), expected)


@pytest.mark.parametrize("codec", usable_codecs())
def test_video_writer_round_trip(codec: str, tmp_path: Path) -> None:
    """Every usable encoder: frame k shown at exactly k / fps s, decoded close to what was written."""
    y, x = np.mgrid[0:48, 0:64]
    frames = np.stack([np.stack([x * 4, y * 5, np.full_like(x, 40 * k)], -1) for k in range(5)]).astype(np.uint8)
    frames[:, 10:20, 10:20] = 255
    with VideoWriter(tmp_path / "v.mp4", 7, 64, 48, VideoConfig(codec=codec)) as writer:
        writer.write(frames[:3])
        writer.write(frames[3])
        writer.write(frames[4:])
    with av.open(str(tmp_path / "v.mp4")) as container:
        decoded = [(f.time, f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    assert [t for t, _ in decoded] == [k / 7 for k in range(5)]
    assert np.abs(np.stack([im for _, im in decoded]).astype(float) - frames).mean() < MAD_LIMIT
    assert video_info(tmp_path / "v.mp4")["video.fps"] == 7
