"""Sync benchmark: how closely the twin tracks the surrogate world, correction on vs off.

Runs the standard scenario (`realissim.eval.sync.scenario`: scripted push, then an unseen hand moves the T
by 5 cm at half time; online, 3 cameras at 160×90) twice — visual correction on and off, the follower on in
both — in lock-step (the world waits for the twin) or `--realtime` (on the wall clock: the surrogate paces itself,
the loop keeps the frame rate, the correction runs beside it in its own thread), or `--both`, one after the other,
side by side. Prints the sync metrics and the per-frame timing breakdown. `--json FILE` writes them under "on" and
"off" (with `--both`: under "lockstep" and "realtime", each with "on" and "off").

    python benchmarks/sync.py [--gap FILE] [--json out.json] [--seconds 20] [--realtime | --both]
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import tyro


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
    """Run on the wall clock (the surrogate paces itself; the loop keeps the frame rate, the correction runs in its
    own thread) instead of lock-step."""
    both: bool = False
    """Run lock-step, then real time, and print them side by side."""


SIDE_BY_SIDE = ("pos_err_median_mm", "pos_err_p95_mm", "pos_err_max_mm", "yaw_err_p95_deg", "recovery_s",
                "silent_loss_s", "longest_silent_loss_s", "false_alarms_per_min", "loop_hz", "frames_on_time",
                "corrected_hz", "correct_ms_median")  # fmt: skip


def main(args: Args) -> dict:
    if args.realtime or args.both:
        from realissim.util.threads import reserve_core_for_world

        reserve_core_for_world()  # before numba is imported
    from realissim.apps.demo import LoopDemoConfig, format_table, run_loop_demo
    from realissim.util.jsonable import jsonable

    clocks = (False, True) if args.both else (args.realtime,)
    out: dict = {}
    for realtime in clocks:
        config = LoopDemoConfig(seconds=args.seconds, gap=args.gap, realtime=realtime, seed=args.seed, record=False)
        results = run_loop_demo(config, out=None)
        clock = "real time" if realtime else "lock-step"
        gap = args.gap or "default"
        print(format_table(results, f"gap: {gap}, {clock}, {args.seconds:g} s, hand push at {args.seconds / 2:g} s"))
        print()
        out["realtime" if realtime else "lockstep"] = {"on": results["on"], "off": results["off"]}
    if args.both:
        print(f"| {'metric':<24} | {'lock-step on':>12} | {'real time on':>12} | {'lock-step off':>13} | "
              f"{'real time off':>13} |")  # fmt: skip
        print(f"|{'-' * 26}|{'-' * 14}|{'-' * 14}|{'-' * 15}|{'-' * 15}|")
        for key in SIDE_BY_SIDE:
            cells = [out[c][s].get(key, math.nan) for s in ("on", "off") for c in ("lockstep", "realtime")]
            print(f"| {key:<24} | {cells[0]:12.3f} | {cells[1]:12.3f} | {cells[2]:13.3f} | {cells[3]:13.3f} |")
    result = out if args.both else next(iter(out.values()))
    if args.json is not None:
        args.json.write_text(json.dumps(jsonable(result), indent=2))
    return result


if __name__ == "__main__":
    main(tyro.cli(Args))
