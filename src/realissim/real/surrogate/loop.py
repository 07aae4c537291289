"""The surrogate process's main loop: step the world, publish to shared memory, answer the pipe.

Runs in the child started by `realissim.real.surrogate.process.Surrogate`; nothing here is used in
the parent. The loop reads the latest joint command from shared memory before every frame, steps the
world one frame, and publishes the encoder state, ground truth, the clock and the camera frames.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import traceback
from typing import Any

from realissim.real.shm import SharedSegment
from realissim.spec.scene import SceneSpec

log = logging.getLogger(__name__)


class _Publisher:
    """Moves the world's state into the shared blocks; one writer per block."""

    def __init__(self, world: Any, segment: SharedSegment, realtime: bool) -> None:
        self.world, self.segment, self.realtime = world, segment, realtime
        self.frame = 0
        self.last_command = 0
        self.camera_index = [0] * sum(1 for name in segment.blocks if name.startswith("camera"))

    def stamp(self) -> float:
        return time.monotonic() if self.realtime else float(self.world.time)

    def apply_command(self) -> None:
        """Send the world the latest command, if one came since the last (the parent's count only grows)."""
        cmd = self.segment.blocks["command"].read()
        if int(cmd["count"]) > self.last_command:
            self.last_command = int(cmd["count"])
            self.world.command(cmd["q"])

    def reset(self, to: Any) -> None:
        """Start the world over at start state `to` and publish its frame 0.

        A command written before the reset but not yet applied (lock-step: sent after the last step) was
        meant for the old episode: it is marked consumed, so the arm holds `to.q` until the next command.
        Camera indices keep counting up, so readers see the new images as new frames."""
        self.world.reset(to)
        self.last_command = int(self.segment.blocks["command"].read()["count"])
        self.frame = 0
        self.publish()

    def publish(self) -> None:
        blocks, now = self.segment.blocks, self.stamp()
        q, qd = self.world.joint_state()
        blocks["robot"].write(q=q, qd=qd, stamp=now)
        truth = self.world.oracle()
        blocks["oracle"].write(
            time=truth.time,
            object_pos=truth.object_pos,
            object_quat=truth.object_quat,
            q=truth.q,
            qd=truth.qd,
            q_command=truth.q_command,
        )
        if self.camera_index:
            for c, result in enumerate(self.world.render_cameras()):
                if result.dropped:
                    continue
                self.camera_index[c] += 1
                # The capture time, on the runtime's clock (a delayed frame was captured earlier).
                stamp = now - (float(self.world.time) - result.stamp)
                blocks[f"camera{c}"].write(image=result.image, stamp=stamp, index=self.camera_index[c])
        blocks["clock"].write(time=now, frame=self.frame)

    def advance(self) -> None:
        """One frame: apply the latest command, step the world, publish."""
        self.apply_command()
        self.world.step_frame()
        self.frame += 1
        self.publish()


def run_child(scene: SceneSpec, cfg: dict, segment: SharedSegment, conn: Any, size: tuple[int, int]) -> None:
    """Build the world, publish its first frame, then serve lock-step or real-time until told to close."""
    from realissim.real.surrogate.gap import GapProfile, load_gap
    from realissim.real.surrogate.world import SurrogateWorld
    from realissim.spec.board import DotBoard

    try:
        gap = load_gap(cfg["gap"]) if cfg["gap"] else GapProfile()
        board = DotBoard(**cfg["board"]) if cfg.get("board") else None
        world = SurrogateWorld(
            scene, gap, seed=cfg["seed"], camera_size=size, render=cfg["render"], fps=cfg["fps"], board=board
        )
        publisher = _Publisher(world, segment, cfg["mode"] == "realtime")
        publisher.publish()
        conn.send(("ready", None))
        if cfg["mode"] == "realtime":
            _realtime(publisher, conn)
        else:
            _lockstep(publisher, conn)
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone
    except Exception:
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(("error", traceback.format_exc()))
        raise
    finally:
        segment.close()
        conn.close()


def _handle(publisher: _Publisher, conn: Any, kind: str, payload: Any) -> bool:
    """Serve one control message; False when the loop must end."""
    if kind == "close":
        return False
    if kind == "disturb":
        publisher.world.disturb(payload)
        conn.send(("ok", None))
    elif kind == "reset":
        publisher.reset(payload)
        conn.send(("reset", float(publisher.world.time)))
    elif kind == "board":
        publisher.world.show_board(bool(payload))
        publisher.publish()  # the same frame, drawn again with (without) the board
        conn.send(("board", None))
    elif kind == "step":
        for _ in range(int(payload)):
            publisher.advance()
        conn.send(("stepped", float(publisher.world.time)))
    else:
        raise ValueError(f"surrogate: unknown message {kind!r}")
    return True


def _lockstep(publisher: _Publisher, conn: Any) -> None:
    """Serve messages until "close" (or until the parent's end of the pipe closes: EOFError)."""
    running = True
    while running:
        running = _handle(publisher, conn, *conn.recv())


def _realtime(publisher: _Publisher, conn: Any) -> None:
    """Step at the world's frame rate on the wall clock; a late frame is not caught up (counted instead)."""
    parent = os.getppid()
    frame_dt = publisher.world.frame_dt
    next_frame, late = time.monotonic() + frame_dt, 0
    while True:
        while conn.poll():
            kind, payload = conn.recv()
            if kind == "step":
                raise ValueError("surrogate: 'step' is not available in real-time mode")
            if not _handle(publisher, conn, kind, payload):
                return
        if os.getppid() != parent:
            return  # orphaned: the parent died without closing us
        publisher.advance()
        wait = next_frame - time.monotonic()
        if wait > 0:
            time.sleep(wait)
            next_frame += frame_dt
        else:
            late += 1
            next_frame = time.monotonic() + frame_dt
            if late in (1, 10, 100) or late % 1000 == 0:
                log.warning("surrogate: %d frames late of real time so far", late)


__all__ = ["run_child"]
