"""The surrogate world behind the process boundary: handles, clocks, failures and clean shutdown."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from realissim.real import CameraStalledError
from realissim.real.follower import Follower, standard_trajectory
from realissim.real.shm import SHM_PREFIX
from realissim.real.surrogate.gap import Disturbance
from realissim.real.surrogate.process import (
    Surrogate,
    SurrogateConfig,
    SurrogateDiedError,
    SurrogateHungError,
)
from realissim.spec.scene import SceneSpec

SMALL = (160, 90)


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
        assert t1 == pytest.approx(t0 + 30 / 60, abs=1e-9)
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
