"""The control panel of the teleoperation page (viser GUI): episode buttons, status, sync, camera views."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import viser

from realissim.teleop.session import Snapshot


def status_text(snapshot: Snapshot, dt: float) -> str:
    """Markdown: recording or idle, the episode's length, episodes saved, the tip and its target (mm)."""
    if snapshot.recording:
        head = f"**Recording**: {snapshot.episode_frames * dt:.1f} s, {snapshot.episode_frames} frames"
    else:
        head = "Idle: press **Start** to record an episode"
    tip = _mm(snapshot.tip)
    target = "none (drag the gizmo)" if snapshot.target is None else _mm(snapshot.target)
    return f"{head}  \nsaved: {snapshot.saved}  \ntip (mm): {tip}  \ntarget (mm): {target}"


def _mm(point: np.ndarray) -> str:
    return ", ".join(f"{1e3 * v:.0f}" for v in point)


def sync_text(snapshot: Snapshot, object_names: Sequence[str]) -> str:
    """Markdown: offline, or the desync detector's verdict and the twin-vs-oracle error (evaluation only)."""
    if snapshot.desynced is None:
        return "Offline: the twin is the world (no real world to stay in sync with)."
    verdict = "**DESYNCED**: the real arm is held" if snapshot.desynced else "**in sync**"
    lines = [f"desync detector: {verdict}"]
    if snapshot.sync_pos_err is not None and snapshot.sync_yaw_err is not None:
        lines.append("sync error vs the oracle (evaluation only, the loop never sees it):")
        for name, pos, yaw in zip(object_names, snapshot.sync_pos_err, snapshot.sync_yaw_err):
            lines.append(f"- {name}: {1e3 * pos:.1f} mm, {math.degrees(yaw):.1f}°")
    return "  \n".join(lines)


class Panel:
    """Buttons Start / Save / Discard, status and sync text, the twin's render and the real camera views."""

    def __init__(
        self,
        server: viser.ViserServer,
        twin_camera: str,
        real_cameras: Sequence[str],
        image_size: tuple[int, int],
        object_names: Sequence[str],
    ) -> None:
        blank = np.zeros((image_size[1], image_size[0], 3), dtype=np.uint8)
        self.object_names = tuple(object_names)
        gui = server.gui
        with gui.add_folder("Episode"):
            self.start = gui.add_button("Start", hint="Reset to the task's next start and record")
            self.save = gui.add_button("Save", disabled=True, hint="Write the episode to the store")
            self.discard = gui.add_button("Discard", disabled=True, hint="Drop the episode")
            self.status = gui.add_markdown("Starting…")
        with gui.add_folder("Sync"):
            self.sync = gui.add_markdown("")
        with gui.add_folder("Views"):
            self.twin_image = gui.add_image(blank, label=f"twin (Gaussian render): {twin_camera}")
            self.real_images = [gui.add_image(blank, label=f"real: {name}") for name in real_cameras]

    def show_state(self, snapshot: Snapshot, dt: float) -> None:
        """Update the text and the buttons' availability from `snapshot` (only what changed is sent)."""
        _set(self.status, "content", status_text(snapshot, dt))
        _set(self.sync, "content", sync_text(snapshot, self.object_names))
        self.show_recording(snapshot.recording)

    def show_recording(self, recording: bool) -> None:
        """Save and Discard are available while an episode is being recorded, Start otherwise."""
        _set(self.start, "disabled", recording)
        _set(self.save, "disabled", not recording)
        _set(self.discard, "disabled", not recording)

    def show_images(self, twin: np.ndarray, real: np.ndarray | None) -> None:
        """The twin's render (H, W, 3) uint8 and, online, the real frames (C, H, W, 3) uint8."""
        self.twin_image.image = twin
        if real is not None:
            for handle, image in zip(self.real_images, real):
                handle.image = image


def _set(handle: object, prop: str, value: object) -> None:
    """Set a GUI property only when it changes (each assignment is a message to every browser)."""
    if getattr(handle, prop) != value:
        setattr(handle, prop, value)
