"""The surrogate world behind the process boundary: handles, clocks, resets, failures and clean shutdown."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest

from helpers import BAD_STARTS, random_start
from realissim.real import CameraStalledError
from realissim.real.follower import Follower, standard_trajectory
from realissim.real.shm import SHM_PREFIX
from realissim.real.surrogate.gap import Disturbance, GapProfile
from realissim.real.surrogate.process import (
    Surrogate,
    SurrogateConfig,
    SurrogateDiedError,
    SurrogateHungError,
)
from realissim.real.surrogate.world import SurrogateWorld
from realissim.spec.errors import SpecError
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState

SMALL = (160, 90)
SEED = 5


@pytest.fixture(scope="module")
def surrogate(scene: SceneSpec) -> Iterator[Surrogate]:
    """One lock-step surrogate (3 cameras at SMALL) shared by the reset tests; each starts with a reset."""
    with Surrogate(scene, SurrogateConfig(camera_size=SMALL, seed=SEED)) as world:
        yield world


@pytest.fixture(scope="module")
def reference(scene: SceneSpec) -> Iterator[SurrogateWorld]:
    """The same world in this process: what a new world reset to a start state shows and does."""
    with SurrogateWorld(scene, GapProfile(), seed=SEED, camera_size=SMALL) as world:
        yield world


def _exists(segment: str) -> bool:
    return os.path.exists(f"/dev/shm/{segment.removeprefix('/')}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it only waits to be reaped.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def _listening_inodes() -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        path = f"/proc/net/{table}"
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                state, inode = fields[3], fields[9]
                if table.startswith("udp") or state == "0A":
                    inodes.add(inode)
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def test_lockstep_handles_step_and_listen_nowhere(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(camera_size=SMALL)) as world:
        segment = world.segment_name
        assert segment.startswith(SHM_PREFIX) and _exists(segment)
        assert not (_socket_inodes(world.pid) & _listening_inodes()), "the surrogate listens on a network socket"
        t0 = world.clock.now()
        state = world.robot.read()
        np.testing.assert_allclose(state.q, scene.robot.home, atol=1e-2)
        frames = [cam.read() for cam in world.cameras]
        assert [f.image.shape for f in frames] == [(90, 160, 3)] * len(scene.cameras)
        target = np.asarray(scene.robot.home) + 0.05
        sent = world.robot.command(target)
        np.testing.assert_allclose(sent, target)
        t1 = world.step(30)
        assert t1 == pytest.approx(t0 + 30 / world.config.fps, abs=1e-9)
        assert world.clock.now() == pytest.approx(t1)
        later = [cam.read() for cam in world.cameras]
        assert all(b.index > a.index and b.stamp > a.stamp for a, b in zip(frames, later))
        moved = world.robot.read()
        assert moved.stamp == pytest.approx(t1)
        assert np.abs(moved.q - target).max() < np.abs(state.q - target).max()
        truth = world.oracle.read()
        assert truth.object_names == tuple(o.name for o in scene.objects)
        assert truth.time == pytest.approx(t1)
        clipped = world.robot.command(np.asarray(scene.robot.home) + 10.0)
        assert world.robot.clipped.all() and np.all(clipped <= world.robot.description.q_upper)
    assert not _exists(segment)


def test_lockstep_is_deterministic(scene: SceneSpec) -> None:
    runs = []
    for _ in range(2):
        with Surrogate(scene, SurrogateConfig(camera_size=SMALL, seed=3)) as world:
            world.robot.command(np.asarray(scene.robot.home) + 0.1)
            world.step(20)
            truth = world.oracle.read()
            runs.append((truth.q, truth.object_pos, [cam.read().image for cam in world.cameras]))
    (q0, p0, im0), (q1, p1, im1) = runs
    assert np.array_equal(q0, q1) and np.array_equal(p0, p1)
    assert all(np.array_equal(a, b) for a, b in zip(im0, im1))


def test_killed_surrogate_is_reported_and_cleaned_up(scene: SceneSpec) -> None:
    world = Surrogate(scene, SurrogateConfig(render=False, timeout=2.0)).start()
    pid, segment = world.pid, world.segment_name
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(SurrogateDiedError):
        world.step()
    assert time.monotonic() - start < 2.5
    world.close()
    assert not _alive(pid) and not _exists(segment)


def test_hung_surrogate_is_reported_within_the_timeout(scene: SceneSpec) -> None:
    world = Surrogate(scene, SurrogateConfig(render=False, timeout=1.0)).start()
    pid, segment = world.pid, world.segment_name
    os.kill(pid, signal.SIGSTOP)
    start = time.monotonic()
    with pytest.raises(SurrogateHungError, match=r"1\.0 s"):
        world.step()
    assert 0.9 < time.monotonic() - start < 2.0
    world.close()
    assert not _alive(pid) and not _exists(segment)


def test_realtime_runs_on_the_wall_clock(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(mode="realtime", camera_size=SMALL)) as world:
        first = world.cameras[0].read()
        world.robot.command(np.asarray(scene.robot.home) + 0.05)
        time.sleep(0.5)
        state = world.robot.read()
        assert abs(state.stamp - time.monotonic()) < 0.2
        later = world.cameras[0].read()
        assert later.index >= first.index + 10
        with pytest.raises(RuntimeError, match="lock-step"):
            world.step()
        assert world.oracle.read().q[0] > scene.robot.home[0] + 0.02


def test_follower_tracks_the_standard_trajectory_on_the_surrogate_arm(scene: SceneSpec) -> None:
    # Measured: RMS 0.0107 rad, max 0.0184 rad (one frame of lag at 0.94 rad/s, plus the arm's 4 ms latency
    # and finite gains); the bounds leave a margin.
    with Surrogate(scene, SurrogateConfig(render=False)) as world:
        follower = Follower(world.robot.description)
        start = world.robot.read().q
        follower.reset(start)
        for k in range(361):
            q_sim, qd_sim = standard_trajectory(k / 60, start)
            assert follower.follow(world.robot, q_sim, qd_sim).mode == "track"
            world.step()
    stats = follower.tracking.summary()
    assert stats["rms_rad"] < 0.015 and stats["max_rad"] < 0.025, stats


@pytest.mark.slow
def test_fifty_open_close_cycles_leave_nothing_behind(scene: SceneSpec) -> None:
    pids, segments = [], []
    for i in range(50):
        with Surrogate(scene, SurrogateConfig(render=False)) as world:
            pids.append(world.pid)
            segments.append(world.segment_name)
            if i % 10 == 0:
                world.step()
    assert not any(_exists(s) for s in segments)
    assert not any(_alive(pid) for pid in pids)


def test_disturbances_cross_the_boundary_and_a_stopped_camera_is_reported(scene: SceneSpec) -> None:
    config = SurrogateConfig(camera_size=SMALL, stall_frames=5)
    cam = scene.cameras[0].name
    with Surrogate(scene, config) as world:
        world.step()
        start = world.oracle.read().object_pos[0]
        world.disturb(Disturbance(kind="move_object", object=scene.objects[0].name, displacement=(0.05, 0.0, 0.0)))
        world.disturb(Disturbance(kind="drop_frame", camera=cam, at=world.clock.now(), duration=1.0))
        world.step(3)
        assert world.oracle.read().object_pos[0][0] == pytest.approx(start[0] + 0.05, abs=5e-3)
        frozen = world.cameras[0].read()
        world.step(3)
        assert world.cameras[0].read().index == frozen.index  # no new frame, not yet stalled
        assert world.cameras[1].read().index > frozen.index
        world.step(5)
        with pytest.raises(CameraStalledError, match=cam):
            world.cameras[0].read()
        world.cameras[1].read()


# -- reset -------------------------------------------------------------------------------------------
def _images(world: Surrogate) -> list[np.ndarray]:
    return [cam.read().image for cam in world.cameras]


def test_reset_publishes_exactly_the_start_state_and_fresh_frames(
    surrogate: Surrogate, reference: SurrogateWorld, scene: SceneSpec
) -> None:
    rng = np.random.default_rng(11)
    offset = np.asarray(GapProfile().arm.joint_offset)
    surrogate.reset(random_start(scene, rng))
    for _ in range(3):
        surrogate.robot.command(np.asarray(scene.robot.home))
        surrogate.step(2)
        before = [cam.read() for cam in surrogate.cameras]
        to = random_start(scene, rng)
        surrogate.reset(to)
        truth = surrogate.oracle.read()
        np.testing.assert_array_equal(truth.object_pos, to.object_pos)
        np.testing.assert_allclose(truth.object_quat, to.object_quat, rtol=0, atol=1e-15)
        np.testing.assert_array_equal(truth.q, to.q_array)
        assert not truth.qd.any() and truth.time == 0.0 and surrogate.clock.now() == 0.0
        state = surrogate.robot.read()
        np.testing.assert_array_equal(state.q, to.q_array + offset)
        assert not state.qd.any() and state.stamp == 0.0
        reference.reset(to)
        for cam, old, fresh in zip(surrogate.cameras, before, reference.render_cameras()):
            frame = cam.read()
            assert frame.index > old.index and frame.stamp == 0.0
            assert not np.array_equal(frame.image, old.image), cam.name
            np.testing.assert_array_equal(frame.image, fresh.image, err_msg=cam.name)


def test_reset_drops_stale_commands_and_live_disturbances(
    surrogate: Surrogate, reference: SurrogateWorld, scene: SceneSpec
) -> None:
    """A reset amid live disturbances, with a command sent but not yet acted on: the next episode steps and
    renders bit for bit as a new world reset to the same state, left alone."""
    rng = np.random.default_rng(12)
    surrogate.reset(random_start(scene, rng, spread=0.2))
    surrogate.step(2)
    lit = _images(surrogate)
    now = surrogate.clock.now()
    surrogate.disturb(Disturbance("occlude", camera=scene.cameras[0].name, duration=10.0))
    surrogate.disturb(Disturbance("lighting", duration=10.0, intensity=0.3))
    surrogate.disturb(Disturbance("freeze_camera", camera=scene.cameras[2].name, duration=10.0))
    late = now + 5 / surrogate.config.fps
    surrogate.disturb(Disturbance("move_object", at=late, object=scene.objects[0].name, displacement=(0.05, 0, 0)))
    surrogate.step()
    assert np.mean(_images(surrogate)[1]) < 0.6 * np.mean(lit[1])  # the disturbances act
    surrogate.robot.command(np.asarray(scene.robot.home) + 0.3)  # sent; acted on only at the next step
    to = random_start(scene, rng, spread=0.2)
    surrogate.reset(to)
    reference.reset(to)
    for k in range(12):  # past the frame the move was due at
        for image, fresh in zip(_images(surrogate), reference.render_cameras()):
            np.testing.assert_array_equal(image, fresh.image, err_msg=f"frame {k}")
        truth, expected = surrogate.oracle.read(), reference.oracle()
        np.testing.assert_array_equal(truth.q, expected.q, err_msg=f"frame {k}")
        np.testing.assert_array_equal(truth.object_pos, expected.object_pos, err_msg=f"frame {k}")
        surrogate.step()
        reference.step_frame()
    np.testing.assert_allclose(surrogate.oracle.read().q, to.q_array, atol=2e-3)


@pytest.mark.parametrize(
    ("change", "field"),
    BAD_STARTS,
)
def test_a_bad_start_state_is_refused_in_the_parent(
    surrogate: Surrogate, scene: SceneSpec, change: dict, field: str
) -> None:
    surrogate.reset(StartState.of_scene(scene))
    surrogate.step(3)
    pid, t = surrogate.pid, surrogate.clock.now()
    with pytest.raises(SpecError) as err:
        surrogate.reset(dataclasses.replace(StartState.of_scene(scene), **change))
    assert err.value.field == field
    assert surrogate.oracle.read().time == t  # nothing reached the world
    assert surrogate.step() == pytest.approx(t + 1 / surrogate.config.fps, abs=1e-3)  # whole control ticks
    assert surrogate.pid == pid
    with pytest.raises(SpecError, match="finite"):
        StartState(StartState.of_scene(scene).objects, (math.nan,) * 7)


def _footprint(pid: int) -> dict[str, object]:
    """What a surrogate could leak: our child processes, open files (ours and the child's), and which process
    it is (a respawn changes the pid)."""
    return {
        "children": sorted(p.pid for p in mp.active_children()),
        "fds": len(os.listdir("/proc/self/fd")),
        "child_fds": len(os.listdir(f"/proc/{pid}/fd")),
        "pid": pid,
    }


def _segments_of_others(ours: set[int]) -> set[str]:
    """Shared-memory segments mapped by processes not in `ours` (e.g. a test run beside this one)."""
    names = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours:
            continue
        try:
            with open(f"/proc/{entry}/maps") as f:
                names.update(line.split("/dev/shm/")[1].split()[0] for line in f if "/dev/shm/" in line)
        except OSError:
            continue  # gone, or not ours to read
    return names


def _reset_many(world: Surrogate, scene: SceneSpec, n: int) -> None:
    """`n` resets to random object poses (arm at home), stepping in between; each lands where asked, and
    nothing is left behind: no process, segment or open file more, the same child throughout."""
    rng = np.random.default_rng(13)
    home = StartState.of_scene(scene)
    world.reset(home)
    before, segments = _footprint(world.pid), set(os.listdir("/dev/shm"))
    for k in range(n):
        to = dataclasses.replace(random_start(scene, rng), q=home.q)
        world.reset(to)
        truth = world.oracle.read()
        assert truth.time < 0.5, k  # real time runs on at once, lock-step stays at 0
        np.testing.assert_allclose(truth.object_pos, to.object_pos, atol=1e-3, err_msg=f"reset {k}")
        if world.lockstep:
            world.step()
    assert _footprint(world.pid) == before
    assert not set(os.listdir("/dev/shm")) - segments - _segments_of_others({os.getpid(), world.pid})


def test_a_hundred_resets_leave_nothing_behind(surrogate: Surrogate, scene: SceneSpec) -> None:
    _reset_many(surrogate, scene, 100)


def test_a_hundred_resets_in_real_time(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(mode="realtime", camera_size=SMALL)) as world:
        _reset_many(world, scene, 100)
        first = world.cameras[0].read()
        time.sleep(0.2)
        assert world.cameras[0].read().index > first.index  # still running


def test_the_frame_rate_is_passed_down(scene: SceneSpec) -> None:
    with Surrogate(scene, SurrogateConfig(render=False, fps=40.0)) as world:
        assert world.step(4) == pytest.approx(0.1, abs=1e-9)
