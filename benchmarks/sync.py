"""Sync benchmark: how closely the twin tracks the surrogate world, correction on vs off.

Runs the standard scenario (`realissim.eval.scenario`: scripted push, then an unseen hand moves the T
by 5 cm at 10 s; online, lock-step, 3 cameras at 160×90) twice — visual correction on and off, the
follower on in both — and prints the sync metrics side by side and the per-frame timing breakdown.
`--json FILE` writes them under the keys "on" and "off".

    python benchmarks/sync.py [--gap FILE] [--json out.json] [--seconds 20]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

from realissim.assets.pusht import pusht_scene
from realissim.eval.scenario import ScenarioConfig, run_scenario
from realissim.runtime.loop import RuntimeConfig

KEYS = (
    ("pos_err_median_mm", "position error, median (mm)"),
    ("pos_err_p95_mm", "position error, p95 (mm)"),
    ("yaw_err_median_deg", "yaw error, median (deg)"),
    ("yaw_err_p95_deg", "yaw error, p95 (deg)"),
    ("recovery_s", "re-convergence < 5 mm after the hand (s)"),
    ("follower_rms_rad", "follower tracking RMS (rad)"),
    ("loop_hz", "loop rate (Hz)"),
)


@dataclass
class Args:
    """Benchmark options."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    json: Path | None = None
    """Write the results here as JSON."""
    seconds: float = 20.0
    """Episode length, s (the hand pushes at half of it)."""
    seed: int = 0
    realtime: bool = False
    """Run on the wall clock (the surrogate paces itself; the twin catches up frame by frame) instead of
    lock-step; the loop rate is then the achieved one."""


def main(args: Args) -> dict:
    scene = pusht_scene()
    base = ScenarioConfig(
        seconds=args.seconds, push_time=args.seconds / 2, gap=args.gap, seed=args.seed, realtime=args.realtime
    )
    results = {}
    for name, correct in (("on", True), ("off", False)):
        config = replace(base, runtime=RuntimeConfig(correct=correct))
        out = run_scenario(scene, config)
        out.pop("series")
        results[name] = out
    clock = "real time" if args.realtime else "lock-step"
    print(f"gap: {args.gap or 'default'}, {clock}, {args.seconds:g} s, hand push at {args.seconds / 2:g} s")
    print(f"| {'metric':<42} | {'correction on':>13} | {'off':>9} |")
    print(f"|{'-' * 44}|{'-' * 15}|{'-' * 11}|")
    for key, label in KEYS:
        print(f"| {label:<42} | {results['on'][key]:13.3f} | {results['off'][key]:9.3f} |")
    print(f"desync detector (correction on): {results['on']['desync_events'] or 'never fired'}")
    print("timing per frame, median ms (correction on):")
    for key, value in results["on"]["timing_ms"].items():
        print(f"  {key:<8} {value:8.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(tyro.cli(Args))
