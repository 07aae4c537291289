"""The main demo: the closed Real-is-Sim loop on the PushT scene, correction on against correction off.

The surrogate real world starts with a reality-gap profile; the twin's Gaussians come from the known
geometry with colours fitted to the surrogate's first views; a scripted pushing motion runs for
`seconds` with an unseen hand moving the real T by 5 cm halfway; the follower makes the real arm follow
the twin arm. The episode runs twice, visual correction on and off, and the demo reports the sync
metrics side by side and writes a rerun recording, error plots and camera views.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from realissim.apps.outputs import RunOutputs
from realissim.real.surrogate.process import CAMERA_SIZE
from realissim.util.images import grid

if TYPE_CHECKING:  # the heavy modules are imported where used: `realissim --help` stays fast
    from realissim.tasks import Task

log = logging.getLogger(__name__)

METRICS = (
    ("pos_err_median_mm", "position error, median (mm)"),
    ("pos_err_p95_mm", "position error, p95 (mm)"),
    ("pos_err_max_mm", "position error, max (mm)"),
    ("yaw_err_median_deg", "yaw error, median (deg)"),
    ("yaw_err_p95_deg", "yaw error, p95 (deg)"),
    ("recovery_s", "re-convergence < 5 mm after the hand (s)"),
    ("recovery_10mm_s", "re-convergence < 10 mm after the hand (s)"),
    ("follower_rms_rad", "follower tracking RMS (rad)"),
    ("loop_hz", "loop rate (Hz)"),
    ("frames_on_time", "frames on time (real time)"),
    ("corrected_hz", "corrections per second"),
    ("correct_ms_median", "correction cost, median (ms)"),
)
"""The sync metrics the demo and the sync benchmark report: (key in `run_scenario`'s result, label)."""


@dataclass(frozen=True)
class LoopDemoConfig:
    """The closed-loop demo."""

    seconds: float = 20.0
    """Episode length, s; the unseen hand pushes the T at half of it."""
    gap: Path | None = None
    """Reality-gap profile JSON (None: the default profile)."""
    realtime: bool = False
    """Run on the wall clock (the surrogate paces itself at the frame rate) instead of lock-step."""
    camera_size: tuple[int, int] = CAMERA_SIZE
    """Real camera image size, px (width, height)."""
    hand_push: tuple[float, float, float] = (0.0, 0.05, 0.0)
    """How far the unseen hand moves the real T, world frame, m."""
    seed: int = 0
    record: bool = True
    """Write the rerun recording demo.rrd."""
    image_every: int = 15
    """Camera images in the recording every this many frames."""

    def __post_init__(self) -> None:
        if not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"seconds: must be a positive number, got {self.seconds}")
        if min(self.camera_size) < 16:
            raise ValueError(f"camera_size: must be at least 16×16 px, got {self.camera_size}")
        if self.image_every < 1:
            raise ValueError(f"image_every: must be ≥ 1, got {self.image_every}")


def run_loop_demo(
    config: LoopDemoConfig, task: Task | None = None, out: Path | None = None, progress: bool = True
) -> dict:
    """Run the episode on `task` (default: PushT) with correction on, then off; returns {"on": metrics, "off":
    metrics, "outputs": [...]}. With `out`, writes report.json, report.md, errors.png, views.png and (if
    `config.record`) demo.rrd."""
    from realissim.eval.sync.scenario import ScenarioConfig, run_scenario
    from realissim.runtime.config import RuntimeConfig
    from realissim.tasks import make

    task = make("pusht") if task is None else task
    scene = task.scene
    base = ScenarioConfig(
        seconds=config.seconds,
        push_time=config.seconds / 2,
        hand_push=config.hand_push,
        camera_size=config.camera_size,
        gap=config.gap,
        seed=config.seed,
        realtime=config.realtime,
    )
    outputs = RunOutputs(out)
    recording = None
    rrd = outputs.path("demo.rrd") if config.record else None
    if rrd is not None:
        from realissim.eval.sync.record import Recording

        recording = Recording(rrd, scene, config.image_every)
    results: dict = {}
    series: dict = {}
    views: dict = {}
    try:
        for name, correct in (("on", True), ("off", False)):
            observer = recording.run(f"correction_{name}") if recording is not None else None
            cfg = replace(base, runtime=RuntimeConfig(correct=correct))
            observers = [observer] if observer is not None else []
            result = run_scenario(task, cfg, progress, observers, label=f"correction {name}")
            series[name] = result.pop("series")
            results[name] = result
            if observer is not None and observer.last_real is not None:
                views[name] = (observer.last_real, observer.last_twin)
    finally:
        if recording is not None:
            recording.close()
    if outputs.enabled:
        _write_outputs(outputs, config, results, series, views)
        if recording is not None:
            outputs.add("demo.rrd")
        outputs.summary()
    results["outputs"] = outputs.written
    return results


def format_table(results: dict, title: str) -> str:
    """The sync metrics of the "on" and "off" runs side by side, as a Markdown table."""
    lines = [title, "", f"| {'metric':<42} | {'correction on':>13} | {'off':>9} |"]
    lines.append(f"|{'-' * 44}|{'-' * 15}|{'-' * 11}|")
    for key, label in METRICS:
        lines.append(f"| {label:<42} | {results['on'][key]:13.3f} | {results['off'][key]:9.3f} |")
    events = results["on"]["desync_events"]
    lines.append("")
    lines.append(
        "desync detector (correction on): "
        + (", ".join(f"{kind} at {t:.2f} s" for t, kind in events) if events else "never fired")
    )
    lines.append("timing per frame, median ms (correction on): " + ", ".join(
        f"{key} {value:.2f}" for key, value in results["on"]["timing_ms"].items()
    ))  # fmt: skip
    return "\n".join(lines)


def _write_outputs(outputs: RunOutputs, config: LoopDemoConfig, results: dict, series: dict, views: dict) -> None:
    from realissim.eval.sync.plots import plot_errors

    clock = "real time" if config.realtime else "lock-step"
    title = f"gap {config.gap or 'default'}, {clock}, {config.seconds:g} s, hand push at {config.seconds / 2:g} s"
    desync = {f"correction {k}": [t for t, kind in results[k]["desync_events"] if kind == "fired"] for k in series}
    errors_png = outputs.path("errors.png")
    assert errors_png is not None
    plot_errors({f"correction {k}": v for k, v in series.items()}, errors_png, (config.seconds / 2,), desync, title)
    outputs.add("errors.png")
    if views:
        rows = []
        for c in range(next(iter(views.values()))[0].shape[0]):
            rows.append([img[c] for name in views for img in views[name]])
        outputs.png("views.png", grid(rows, gap=2))
    outputs.npz("series.npz", **{f"{run}_{key}": np.asarray(v) for run, s in series.items() for key, v in s.items()})
    outputs.json("report.json", {"config": config, "on": results["on"], "off": results["off"]})
    outputs.text("report.md", format_table(results, f"# Closed-loop demo: {title}") + "\n")
