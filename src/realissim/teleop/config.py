"""`TeleopConfig`: how a browser teleoperation session runs (server, task, store, online world, display)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from realissim.real.surrogate.process import CAMERA_SIZE


@dataclass(frozen=True)
class TeleopConfig:
    """A teleoperation session: the operator drags a tip target in the browser; the twin's arm follows it."""

    out: Path
    """The dataset (episode store) the episodes are recorded into; created, or appended to when it exists."""
    host: str = "127.0.0.1"
    """Address the web server binds to (loopback by default: only this machine can reach the page)."""
    port: int = 8080
    """TCP port of the page (0: any free port; `TeleopServer.url` says which)."""
    task: str = "pusht"
    """Registered task name (`realissim.tasks.make`)."""
    online: bool = False
    """Drive the surrogate real world too (the real arm follows the twin, the cameras correct it)."""
    gap: Path | None = None
    """Online: the surrogate's reality-gap profile JSON (None: the default profile)."""
    seed: int = 0
    """Episode i starts from `task.sample_start(np.random.default_rng(seed + i))` (also the surrogate's seed)."""
    tip_speed: float = 0.25
    """Largest speed of the commanded pusher tip, m/s (the operator's target is approached at most this fast)."""
    chunk_frames: int = 1
    """Frames each chunk spans (the target is read once per chunk). 1 follows the operator with the least delay;
    more lets an online loop that cannot keep up with real time catch up (the Env runs a chunk's late frames
    without correction), at the cost of that much delay."""
    push_height: float = 0.015
    """Height of the tip centre above the table while pushing, m (the target's z is held there)."""
    view_camera: str | None = None
    """The scene camera whose Gaussian render of the twin is shown (None: the scene's first camera)."""
    image_size: tuple[int, int] = CAMERA_SIZE
    """Size of the shown twin render and, online, of the real camera images, px (width, height)."""
    scene_hz: float = 30.0
    """Rate of the 3D twin's pose updates in the page, Hz."""
    image_hz: float = 4.0
    """Rate of the image updates in the page (twin render, real cameras), Hz."""
    judge_every: float = 0.1
    """Judge the task on ground truth every this many s of a recorded episode (for the success time)."""
    record_images: bool = False
    """Online: record the real cameras' frames with each episode."""

    def __post_init__(self) -> None:
        positive = {"tip_speed": self.tip_speed, "push_height": self.push_height, "scene_hz": self.scene_hz,
                    "image_hz": self.image_hz, "judge_every": self.judge_every}  # fmt: skip
        for name, value in positive.items():
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name}: must be a positive number, got {value}")
        if self.chunk_frames < 1:
            raise ValueError(f"chunk_frames: must be ≥ 1, got {self.chunk_frames}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port: must be in [0, 65535], got {self.port}")
        if min(self.image_size) < 16:
            raise ValueError(f"image_size: must be at least 16×16 px, got {self.image_size}")
        if self.record_images and not self.online:
            raise ValueError("record_images: an offline session has no real cameras to record")
        if self.gap is not None and not self.online:
            raise ValueError("gap: a reality-gap profile needs an online session")
