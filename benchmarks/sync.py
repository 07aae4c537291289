"""Sync benchmark: how closely the twin tracks the surrogate world, correction on vs off.

Runs the standard scenario (`realissim.eval.sync.scenario`: scripted push, then an unseen hand moves the T
by 5 cm at 10 s; online, lock-step, 3 cameras at 160×90) twice — visual correction on and off, the
follower on in both — and prints the sync metrics side by side and the per-frame timing breakdown.
`--json FILE` writes them under the keys "on" and "off".

    python benchmarks/sync.py [--gap FILE] [--json out.json] [--seconds 20]
"""

from __future__ import annotations

import json
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
    """Run on the wall clock (the surrogate paces itself; the twin catches up frame by frame) instead of
    lock-step; the loop rate is then the achieved one."""


def main(args: Args) -> dict:
    if args.realtime:
        from realissim.util.threads import reserve_core_for_world

        reserve_core_for_world()  # before numba is imported
    from realissim.apps.demo import LoopDemoConfig, format_table, run_loop_demo
    from realissim.util.jsonable import jsonable

    config = LoopDemoConfig(seconds=args.seconds, gap=args.gap, realtime=args.realtime, seed=args.seed, record=False)
    results = run_loop_demo(config, out=None)
    clock = "real time" if args.realtime else "lock-step"
    gap = args.gap or "default"
    print(format_table(results, f"gap: {gap}, {clock}, {args.seconds:g} s, hand push at {args.seconds / 2:g} s"))
    if args.json is not None:
        args.json.write_text(json.dumps(jsonable({"on": results["on"], "off": results["off"]}), indent=2))
    return results


if __name__ == "__main__":
    main(tyro.cli(Args))
