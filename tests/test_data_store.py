"""The episode store: exact round trips, random frame access, resume, rejected inputs and writers, a real full
disk, a real `kill -9` during collection, the recorder through `run_episode`, and the summary."""

from __future__ import annotations

import dataclasses
import errno
import math
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from realissim.assets.appearance import scene_gaussians
from realissim.assets.gaussians import GaussianArrays
from realissim.data import store
from realissim.data.info import describe
from realissim.data.recorder import EpisodeRecorder, meta_for_env
from realissim.data.store import (
    Dataset,
    DatasetError,
    DatasetMeta,
    DatasetWriter,
    EpisodeData,
    code_version,
    progress_label,
)
from realissim.envs.batch import BatchEnv
from realissim.envs.env import Env, EnvConfig, FrameInfo
from realissim.eval.episode import EpisodeObserver, run_episode
from realissim.eval.sync.metrics import pose_errors
from realissim.expert.scripted import ScriptedPush
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.tasks import Task, make
from realissim.twin.kinematics import PusherIK

CHILD = Path(__file__).with_name("data_collect_child.py")
SMALL_GAUSSIANS = {
    "world": GaussianArrays(
        np.zeros((2, 3)), np.tile([1.0, 0, 0, 0], (2, 1)), np.full((2, 3), 0.01), np.full((2, 3), 0.5), np.full(2, 0.9)
    ),
    "tblock": GaussianArrays(
        np.ones((1, 3)), np.array([[0.0, 1, 0, 0]]), np.full((1, 3), 0.02), np.zeros((1, 3)), np.ones(1)
    ),
}


@pytest.fixture(scope="module")
def task() -> Task[Any]:
    return make("pusht")


def make_meta(scene: SceneSpec, online: bool = False, cameras: tuple[str, ...] = (), **changes: Any) -> DatasetMeta:
    meta = DatasetMeta(
        task="pusht",
        fps=60.0,
        source="expert",
        online=online,
        gap="default" if online else None,
        scene=scene,
        task_config={"success_threshold": 0.95},
        code_version=code_version(),
        joint_names=scene.robot.joint_names,
        object_names=tuple(o.name for o in scene.objects),
        cameras=cameras,
        image_size=(20, 16) if cameras else None,
    )
    return dataclasses.replace(meta, **changes)


def make_episode(meta: DatasetMeta, length: int, seed: int = 0) -> EpisodeData:
    """Random but valid data for every field `meta` asks for."""
    rng = np.random.default_rng(seed)
    k, j = len(meta.object_names), len(meta.joint_names)
    online = {}
    if meta.online:
        online = dict(
            sync_pos_err=rng.random((length, k)),
            sync_yaw_err=rng.random((length, k)),
            desynced=rng.random(length) < 0.3,
            oracle_object_pos=rng.normal(size=(length, k, 3)),
            oracle_object_quat=rng.normal(size=(length, k, 4)),
            q_real=rng.normal(size=(length, j)),
            q_sent=rng.normal(size=(length, j)),
            correction_force=rng.normal(size=(length, k, 3)),
        )
    size = meta.image_size or (0, 0)
    return EpisodeData(
        time=np.arange(1, length + 1) / meta.fps,
        object_pos=rng.normal(size=(length, k, 3)),
        object_quat=rng.normal(size=(length, k, 4)),
        object_linvel=rng.normal(size=(length, k, 3)),
        object_angvel=rng.normal(size=(length, k, 3)),
        q=rng.normal(size=(length, j)),
        qd=rng.normal(size=(length, j)),
        q_des=rng.normal(size=(length, j)),
        tip=rng.normal(size=(length, 3)),
        progress=progress_label(length),
        policy_progress=rng.random(length).astype(np.float32),
        images={c: rng.integers(0, 256, (length, size[1], size[0], 3), np.uint8) for c in meta.cameras},
        **online,
    )


def assert_episodes_equal(a: EpisodeData, b: EpisodeData) -> None:
    for f in dataclasses.fields(EpisodeData):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "images":
            assert x.keys() == y.keys() and all(np.array_equal(x[c], y[c]) for c in x)
        elif x is None or y is None:
            assert x is None and y is None, f.name
        else:
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name


def write(path: Path, meta: DatasetMeta, lengths: list[int], success: list[bool] | None = None) -> list[EpisodeData]:
    episodes = [make_episode(meta, n, seed=i) for i, n in enumerate(lengths)]
    with DatasetWriter(path, meta, gaussians=SMALL_GAUSSIANS) as writer:
        for i, ep in enumerate(episodes):
            ok = True if success is None else success[i]
            writer.append(ep, success=ok, start=StartState.of_scene(meta.scene), seed=i)
    return episodes


@pytest.mark.parametrize("online", [False, True], ids=["offline", "online-with-images"])
def test_meta_episodes_and_gaussians_round_trip_exactly(tmp_path: Path, scene: SceneSpec, online: bool) -> None:
    meta = make_meta(scene, online, cameras=("front", "side") if online else ())
    start = StartState.from_arrays(np.array([[0.1, -0.05, 0.0175]]), np.array([[0.9, 0, 0, 0.2]]), scene.robot.home)
    episodes = [make_episode(meta, n, seed=n) for n in (3, 150)]
    with DatasetWriter(tmp_path / "ds", meta, gaussians=None if not online else SMALL_GAUSSIANS) as writer:
        first = writer.append(
            episodes[0],
            success=True,
            success_time=0.05,
            final_coverage=0.97,
            seed=11,
            start=start,
            desynced_s=0.25,
            reacquisitions=2,
            extra={"note": ["a", 1]},
        )
        second = writer.append(episodes[1], success=False, start=start)
    ds = Dataset(tmp_path / "ds", include_failed=True)
    assert ds.meta == dataclasses.replace(meta, created=ds.meta.created) and ds.meta.created.endswith("+00:00")
    assert ds.all_episodes == (first, second) == ds.episodes
    assert (first.index, first.length, first.duration, first.seed, first.start) == (0, 3, 3 / 60, 11, start)
    assert (first.success_time, first.final_coverage, first.desynced_s, first.reacquisitions) == (0.05, 0.97, 0.25, 2)
    assert first.extra == {"note": ["a", 1]} and not first.failed
    assert second.failed and second.success_time == math.inf and math.isnan(second.final_coverage)
    for info, ep in zip(ds.episodes, episodes):
        assert_episodes_equal(ds.episode(info.index), ep)
    expected = SMALL_GAUSSIANS if online else scene_gaussians(scene)
    stored = ds.gaussians()
    assert list(stored) == list(expected)
    for body, g in expected.items():
        for k in ("means", "quats", "scales", "colors", "opacities"):
            assert np.array_equal(getattr(stored[body], k), getattr(g, k)), (body, k)


def test_frames_are_read_at_random_across_episode_boundaries(tmp_path: Path, scene: SceneSpec) -> None:
    meta = make_meta(scene, online=True, cameras=("front",))
    lengths = [5, 130, 1, 7]  # 130 frames span two time chunks (120 at 60 fps)
    episodes = write(tmp_path / "ds", meta, lengths)
    ds = Dataset(tmp_path / "ds")
    assert len(ds) == ds.num_frames == sum(lengths)
    starts = np.cumsum([0, *lengths])
    order = [*starts[:-1], *(starts[1:] - 1), *random.Random(0).sample(range(len(ds)), 20)]
    random.Random(1).shuffle(order)
    for i in map(int, order):
        e = int(np.searchsorted(np.cumsum(lengths), i, side="right"))
        row = i - sum(lengths[:e])
        frame = ds.frame(i)
        assert (frame["episode_index"], frame["frame_index"]) == (e, row)
        for name in ("time", "object_pos", "q_des", "progress", "desynced", "oracle_object_quat"):
            assert np.array_equal(frame[name], getattr(episodes[e], name)[row]), (i, name)
        assert np.array_equal(frame["images/front"], episodes[e].images["front"][row])
    assert np.array_equal(ds.frame(-1)["q"], episodes[-1].q[-1])
    assert set(ds.frame(3, fields=("tip",))) == {"tip", "episode_index", "frame_index"}
    with pytest.raises(IndexError):
        ds.frame(len(ds))


def test_failed_episodes_are_left_out_unless_asked_for(tmp_path: Path, scene: SceneSpec) -> None:
    episodes = write(tmp_path / "ds", make_meta(scene), [4, 6, 8], success=[True, False, True])
    ds = Dataset(tmp_path / "ds")
    assert [e.index for e in ds.episodes] == [0, 2] and len(ds) == 12
    assert [e.index for e in ds.all_episodes] == [0, 1, 2]
    assert np.array_equal(ds.frame(4)["q"], episodes[2].q[0])  # frame 4 is the first of episode 2, not 1
    assert len(Dataset(tmp_path / "ds", include_failed=True)) == 18


def test_resume_appends_with_the_next_index_and_clears_a_dead_writers_staging(tmp_path: Path, scene: SceneSpec) -> None:
    meta = make_meta(scene)
    write(tmp_path / "ds", meta, [4, 5])
    stale = tmp_path / "ds" / ".staging" / "000002-dead"
    stale.mkdir(parents=True)
    (stale / "zarr.json").write_text("{")  # a half-written episode of a killed writer
    assert len(Dataset(tmp_path / "ds").episodes) == 2  # readers ignore it
    newer = dataclasses.replace(meta, code_version="9.9.9", created="")  # provenance may differ
    with DatasetWriter(tmp_path / "ds", newer) as writer:
        assert not (tmp_path / "ds" / ".staging").exists() and writer.next_index == 2
        assert writer.meta.code_version == meta.code_version
        info = writer.append(make_episode(meta, 3), success=True, start=StartState.of_scene(scene))
    assert info.index == 2 and [e.length for e in Dataset(tmp_path / "ds").episodes] == [4, 5, 3]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"fps": 30.0}, "fps"),
        ({"source": "teleop"}, "source"),
        ({"task_config": {"success_threshold": 0.9}}, "task_config.success_threshold"),
        ({"online": True, "gap": "default"}, "online"),
        ({"cameras": ("front",), "image_size": (20, 16)}, "cameras"),
    ],
)
def test_resume_with_an_incompatible_meta_names_the_field(
    tmp_path: Path, scene: SceneSpec, changes: dict[str, Any], field: str
) -> None:
    write(tmp_path / "ds", make_meta(scene), [2])
    with pytest.raises(DatasetError, match=rf"{tmp_path / 'ds'}: incompatible .*{field}"):
        DatasetWriter(tmp_path / "ds", make_meta(scene, **changes))


def test_episodes_move_in_from_another_dataset_as_the_next_ones_and_leave_it(tmp_path: Path, scene: SceneSpec) -> None:
    meta = make_meta(scene, online=True, cameras=("front",))
    mine, theirs = write(tmp_path / "ds", meta, [3]), write(tmp_path / "part", meta, [4, 5])
    with DatasetWriter(tmp_path / "ds", meta) as writer:
        moved = writer.move_in(tmp_path / "part", 1)  # the part's second episode first: any order
        assert (moved.index, moved.length, moved.seed) == (1, 5, 1)
        writer.move_in(tmp_path / "part", 0)
        with pytest.raises(DatasetError, match="episode"):  # gone from the part now
            writer.move_in(tmp_path / "part", 0)
        with pytest.raises(DatasetError, match=r"cannot move .*fps"):
            write(tmp_path / "other", dataclasses.replace(meta, fps=30.0), [2])
            writer.move_in(tmp_path / "other", 0)
        assert writer.next_index == 3
    ds = Dataset(tmp_path / "ds")
    assert [(e.index, e.length, e.seed) for e in ds.episodes] == [(0, 3, 0), (1, 5, 1), (2, 4, 0)]
    for index, expected in ((0, mine[0]), (1, theirs[1]), (2, theirs[0])):
        assert_episodes_equal(ds.episode(index), expected)
    assert not Dataset(tmp_path / "part", include_failed=True).all_episodes
    assert len(Dataset(tmp_path / "other").episodes) == 1  # a refused move leaves both untouched


def test_resume_with_another_scene_names_the_scene_field(tmp_path: Path, scene: SceneSpec) -> None:
    write(tmp_path / "ds", make_meta(scene), [2])
    heavier = dataclasses.replace(scene.objects[0], mass=scene.objects[0].mass * 2)
    other = dataclasses.replace(scene, objects=(heavier,))
    with pytest.raises(DatasetError, match=r"incompatible .*scene\.objects\[0\]\.mass"):
        DatasetWriter(tmp_path / "ds", make_meta(other))


def _set(name: str, value: Callable[[EpisodeData], Any]) -> Callable[[EpisodeData], None]:
    return lambda ep: setattr(ep, name, value(ep))


@pytest.mark.parametrize(
    ("online", "mutate", "field"),
    [
        (False, _set("object_pos", lambda ep: ep.object_pos[:, 0]), "EpisodeData.object_pos: expected shape"),
        (False, _set("q", lambda ep: np.where(np.eye(*ep.q.shape), np.nan, ep.q)), "EpisodeData.q: contains NaN"),
        (False, _set("time", lambda ep: ep.time[::-1].copy()), "EpisodeData.time: must be strictly increasing"),
        (False, _set("progress", lambda ep: ep.progress * 0.5), "EpisodeData.progress"),
        (False, _set("policy_progress", lambda ep: ep.policy_progress.astype(str)), "EpisodeData.policy_progress"),
        (False, _set("desynced", lambda ep: np.zeros(len(ep), bool)), "EpisodeData.desynced: must be None"),
        (False, _set("tip", lambda ep: None), "EpisodeData.tip: missing"),
        (True, _set("desynced", lambda ep: ep.desynced.astype(int)), "EpisodeData.desynced: dtype must be bool"),
        (True, _set("sync_yaw_err", lambda ep: None), "EpisodeData.sync_yaw_err: missing while"),
        (True, _set("q_sent", lambda ep: None), "EpisodeData.q_sent: missing while"),
        (False, _set("q_real", lambda ep: np.zeros_like(ep.q)), "EpisodeData.q_real: must be None"),
        (True, _set("images", lambda ep: {"front": ep.images["front"].astype(np.float32)}), r"images\['front'\]"),
        (True, _set("images", lambda ep: {}), "EpisodeData.images: cameras"),
    ],
)
def test_malformed_episodes_are_rejected_naming_the_field(
    tmp_path: Path, scene: SceneSpec, online: bool, mutate: Callable[[EpisodeData], None], field: str
) -> None:
    meta = make_meta(scene, online, cameras=("front",) if online else ())
    episode = make_episode(meta, 6)
    mutate(episode)
    with DatasetWriter(tmp_path / "ds", meta, gaussians=SMALL_GAUSSIANS) as writer:
        with pytest.raises(ValueError, match=field):
            writer.append(episode, success=True, start=StartState.of_scene(scene))
        assert writer.append(make_episode(meta, 6), success=True, start=StartState.of_scene(scene)).index == 0
    assert not (tmp_path / "ds" / ".staging").exists()


def test_malformed_metas_and_appends_are_rejected_naming_the_field(tmp_path: Path, scene: SceneSpec) -> None:
    with pytest.raises(ValueError, match=r"DatasetMeta\.gap"):
        make_meta(scene, online=False, gap="default")
    with pytest.raises(ValueError, match=r"DatasetMeta\.image_size"):
        make_meta(scene, cameras=("front",), image_size=None)
    with pytest.raises(ValueError, match=r"DatasetMeta\.joint_names"):
        make_meta(scene, joint_names=("a",) * 7)
    meta = make_meta(scene)
    with DatasetWriter(tmp_path / "ds", meta, gaussians=SMALL_GAUSSIANS) as writer:
        with pytest.raises(ValueError, match="start"):
            writer.append(make_episode(meta, 2), success=True, start=StartState((), scene.robot.home))
        with pytest.raises(ValueError, match="extra"):
            writer.append(make_episode(meta, 2), success=True, start=StartState.of_scene(scene), extra={"x": {1}})


def test_a_second_writer_is_rejected_until_the_first_closes(tmp_path: Path, scene: SceneSpec) -> None:
    meta = make_meta(scene)
    with DatasetWriter(tmp_path / "ds", meta, gaussians=SMALL_GAUSSIANS):
        with pytest.raises(DatasetError, match="locked by another writer"):
            DatasetWriter(tmp_path / "ds", meta)
        Dataset(tmp_path / "ds")  # reading needs no lock
    with DatasetWriter(tmp_path / "ds", meta) as writer:
        assert writer.next_index == 0


def test_what_is_not_a_dataset_is_named(tmp_path: Path, scene: SceneSpec) -> None:
    with pytest.raises(DatasetError, match="no dataset here"):
        Dataset(tmp_path / "missing")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hello")
    with pytest.raises(DatasetError, match=rf"{tmp_path / 'other'}: not a realissim dataset"):
        DatasetWriter(tmp_path / "other", make_meta(scene))
    assert (tmp_path / "other" / "notes.txt").read_text() == "hello"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs (needs the right to mount; skipped otherwise)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_fails_the_append_and_keeps_the_finished_episodes(small_disk: Path, scene: SceneSpec) -> None:
    meta = make_meta(scene)
    written: list[EpisodeData] = []
    with (
        DatasetWriter(small_disk / "ds", meta, gaussians=SMALL_GAUSSIANS) as writer,
        pytest.raises(DatasetError) as err,
    ):
        for i in range(20):  # ~0.5 MB of incompressible data each: the disk fills within a few
            episode = make_episode(meta, 1500, seed=i)
            writer.append(episode, success=True, start=StartState.of_scene(scene))
            written.append(episode)
    assert len(written) >= 1
    assert str(small_disk / "ds") in str(err.value) and f"episode {len(written)}" in str(err.value)
    assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ENOSPC
    assert not (small_disk / "ds" / ".staging").exists()
    ds = Dataset(small_disk / "ds")
    assert [e.index for e in ds.episodes] == list(range(len(written)))
    for info, episode in zip(ds.episodes, written):
        assert_episodes_equal(ds.episode(info.index), episode)


def test_a_write_error_removes_the_partial_episode(
    tmp_path: Path, scene: SceneSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = make_meta(scene)
    write(tmp_path / "ds", meta, [3])

    def full(root: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "_fsync_tree", full)
    with DatasetWriter(tmp_path / "ds", meta) as writer:
        with pytest.raises(DatasetError, match=r"cannot write episode 1: .*No space left"):
            writer.append(make_episode(meta, 4), success=True, start=StartState.of_scene(scene))
        assert writer.next_index == 1
    assert not (tmp_path / "ds" / ".staging").exists()
    assert [e.index for e in Dataset(tmp_path / "ds").episodes] == [0]


class _Lines:
    """A child process's stdout lines, readable with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._queue.put(line.strip())
        self._queue.put(None)

    def next(self, timeout: float) -> str | None:
        """The next line; None at the end of the output; TimeoutError if none comes in `timeout` s."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no line from the child in {timeout} s") from None


def _collect_and_kill(path: Path, log: Path, finished: int, rng: random.Random) -> tuple[int, dict[int, int]]:
    """Run the collecting child until it has stored `finished` episodes, then `kill -9` it in the middle of
    storing the next one: after a random one of its first arrays (of 11) has started to be written. Returns its
    first index and the episodes it reported stored (index → frames)."""
    with log.open("a") as err:
        proc = subprocess.Popen([sys.executable, str(CHILD), str(path), "1.0"], stdout=subprocess.PIPE,
                                stderr=err, text=True)  # fmt: skip
    lines, reported, arrays = _Lines(proc), {}, -1
    try:
        while not (line := lines.next(120.0) or "").startswith("ready"):
            assert line, log.read_text()
        first = int(line.split()[1])
        kill_after = rng.randint(1, 10)
        while arrays < kill_after:
            line = lines.next(60.0) or ""
            assert line, log.read_text()
            if line.startswith("finished"):
                _, index, frames = line.split()
                reported[int(index)] = int(frames)
            elif line.startswith("writing") and len(reported) == finished:
                arrays = 0
            elif line.startswith("array") and arrays >= 0:
                arrays += 1
        time.sleep(rng.uniform(0.0, 0.005))
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -9
    return first, reported


def test_kill_9_during_collection_loses_at_most_the_episode_in_progress(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first, reported = _collect_and_kill(path, tmp_path / "child.log", 2, random.Random(12))
    assert first == 0 and reported == {0: 60, 1: 60}
    ds = Dataset(path, include_failed=True)
    assert [e.index for e in ds.all_episodes] == [0, 1]  # the episode being written is lost, nothing else
    assert [p.name[:6] for p in (path / ".staging").iterdir()] == ["000002"]  # killed while writing episode 2
    for info in ds.all_episodes:
        episode = ds.episode(info.index)
        assert info.length == len(episode) == 60
        assert all(np.all(np.isfinite(getattr(episode, n))) for n in ("time", "object_pos", "q", "tip"))
    with DatasetWriter(path, ds.meta) as writer:  # a restarted collector resumes after the stored episodes
        assert not (path / ".staging").exists()
        info = writer.append(make_episode(ds.meta, 2), success=True, start=StartState.of_scene(ds.meta.scene))
    assert info.index == 2 and len(Dataset(path).all_episodes) == 3


class _Frames(EpisodeObserver):
    def __init__(self) -> None:
        self.frames: list[FrameInfo] = []

    def on_frame(self, frame: FrameInfo) -> None:
        self.frames.append(frame)


def test_the_recorder_stores_an_offline_episode_frame_by_frame(tmp_path: Path, task: Task[Any]) -> None:
    env, seen = Env(task), _Frames()
    meta = meta_for_env(env, "expert")
    assert (meta.fps, meta.task, meta.online, meta.gap) == (60.0, "pusht", False, None)
    with DatasetWriter(tmp_path / "ds", meta, gaussians=SMALL_GAUSSIANS) as writer:
        recorder = EpisodeRecorder(writer, seed=7)
        result = run_episode(env, ScriptedPush(task.scene), None, 1.0, [recorder, seen], stop_on_success=False, seed=7)
    info, episode = recorder.last, Dataset(tmp_path / "ds", include_failed=True).episode(0)
    assert info is not None and info.length == len(episode) == result.frames == 60
    assert (info.success, info.seed, info.start) == (result.success, 7, result.start)
    assert info.final_coverage == result.final["coverage"] and info.extra["final"]["pos_err"] == result.final["pos_err"]
    assert np.array_equal(episode.time, [f.state.time for f in seen.frames])
    assert np.array_equal(episode.q_des, [f.q_des for f in seen.frames])
    assert np.array_equal(episode.object_angvel, [f.state.object_angvel for f in seen.frames])
    assert np.array_equal(episode.progress, np.arange(60, dtype=np.float32) / np.float32(59))
    assert np.array_equal(episode.policy_progress, np.float32(result.progress))
    ik = PusherIK(task.scene)
    assert all(np.array_equal(episode.tip[k], ik.tip_position(episode.q[k])) for k in (0, 30, 59))
    assert np.ptp(episode.tip[:, 0]) > 0.01  # the tip moved: not a constant
    assert episode.desynced is None and episode.oracle_object_pos is None and episode.images == {}


@pytest.mark.slow
def test_the_recorder_stores_the_oracle_sync_errors_and_real_frames_online(tmp_path: Path, task: Task[Any]) -> None:
    from realissim.real.surrogate import Surrogate, SurrogateConfig
    from realissim.runtime.config import RuntimeConfig

    config = EnvConfig(runtime=RuntimeConfig(correct=False), calibrate="never")
    with Surrogate(task.scene, SurrogateConfig(camera_size=(80, 45))) as world:
        env = Env(task, config, world)
        meta = meta_for_env(env, "expert", gap="default", record_images=True)
        with DatasetWriter(tmp_path / "ds", meta, gaussians=SMALL_GAUSSIANS) as writer:
            recorder = EpisodeRecorder(writer, record_images=True)
            run_episode(env, ScriptedPush(task.scene), None, 0.5, [recorder], stop_on_success=False, seed=1)
        truth = world.oracle.read()
    episode = Dataset(tmp_path / "ds", include_failed=True).episode(0)
    assert meta.cameras == tuple(c.name for c in task.scene.cameras) and meta.image_size == (80, 45)
    assert np.array_equal(episode.oracle_object_pos[-1], truth.object_pos)
    for k in (0, 29):
        expected = pose_errors(
            episode.object_pos[k, 0],
            episode.object_quat[k, 0],
            episode.oracle_object_pos[k, 0],
            episode.oracle_object_quat[k, 0],
        )
        assert (episode.sync_pos_err[k, 0], episode.sync_yaw_err[k, 0]) == expected
    assert not episode.desynced.any() and len(episode.desynced) == 30
    # the measured fields: the real arm lags the targets it is sent by its latency and servo, no correction ran
    assert episode.q_real.shape == episode.q_sent.shape == (30, 7) and episode.correction_force.shape == (30, 1, 3)
    assert not np.array_equal(episode.q_real[1:], episode.q_sent[:-1])  # (measured, not copied)
    assert np.abs(episode.q_real[1:] - episode.q_sent[:-1]).max() < 0.02
    assert np.all(episode.correction_force == 0)
    for cam in meta.cameras:
        assert episode.images[cam].shape == (30, 45, 80, 3) and episode.images[cam].std() > 0


def test_the_recorder_refuses_a_batch_and_a_mismatched_dataset(tmp_path: Path, task: Task[Any]) -> None:
    env = Env(task)
    with DatasetWriter(tmp_path / "ds", make_meta(task.scene, fps=30.0), gaussians=SMALL_GAUSSIANS) as writer:
        recorder = EpisodeRecorder(writer)
        with pytest.raises(TypeError, match="one Env"):
            recorder.on_reset(BatchEnv(task, 2), env.reset(seed=0))
        with pytest.raises(ValueError, match="frame rate 60 Hz differs from the dataset's 30 fps"):
            recorder.on_reset(env, env.reset(seed=0))


def test_describe_summarises_meta_episodes_and_fields(tmp_path: Path, scene: SceneSpec) -> None:
    write(tmp_path / "ds", make_meta(scene, online=True, cameras=("front",)), [60, 30, 90], [True, False, True])
    text = describe(tmp_path / "ds")
    for line in (
        "task       pusht",
        "source     expert, online (gap: default)",
        "fps        60",
        "cameras    front (20×16 px)",
        "episodes   3 total: 2 successful, 1 failed",
        "success    66.7 %",
        "frames     180 (3.0 s; 1.0 s per episode)",
        f"code       {code_version()}",
    ):
        assert line in text, line
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert "(T, 1, 3)" in rows["object_pos"] and "float64" in rows["object_pos"] and "blosc(zstd, 5)" in rows["q"]
    assert "EVALUATION ONLY" in rows["oracle_object_pos"] and "EVALUATION ONLY" not in rows["q"]
    assert "(T, 16, 20, 3)" in rows["images/front"] and "uint8" in rows["images/front"]
    assert "on disk" in text
    shutil.rmtree(tmp_path / "ds" / "episodes")
    with pytest.raises(DatasetError, match="cannot list episodes"):
        describe(tmp_path / "ds")
