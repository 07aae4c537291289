"""Fault runs: the standard scenario (correction on, lock-step) with one fault at a time.

Each run lasts `--seconds` (default 10); the unseen hand moves the T by 5 cm at half of it, and the fault
covers the push: it starts `--lead` s before and lasts `--duration` s. For each fault the table gives the
largest position error over the fault and the second after it, the frames the desync detector reported
desync (the follower held the real arm, the twin arm held too), the verdict ("tracked": the error stayed
≤ 2 cm; "held": it did not, and the detector fired and the arms held; "recovered": it did not, unnoticed,
but the twin was back within 1 s of the fault's end; "diverged": none of these), the re-convergence time
(< 5 mm) after the hand, and the detector's score against the oracle (error > 2 cm).

    python benchmarks/faults.py [--gap FILE] [--json out.json] [--seconds 10]
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import tyro

from realissim.eval.sync.scenario import ScenarioConfig, run_scenario
from realissim.real.surrogate.gap import Disturbance
from realissim.tasks import make
from realissim.util.jsonable import jsonable


@dataclass
class Args:
    """Benchmark options."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    json: Path | None = None
    """Write the results here as JSON."""
    seconds: float = 10.0
    """Length of each run, s (the hand pushes at half of it)."""
    lead: float = 0.5
    """The fault starts this long before the hand, s."""
    duration: float = 1.5
    """How long each fault lasts, s."""
    seed: int = 0
    only: str | None = None
    """Run only the faults whose name contains this."""


def faults(at: float, duration: float, front: str, obj: str) -> dict[str, Disturbance]:
    """One fault of each kind, starting at `at` s and lasting `duration` s; and a 15 cm shove of the object at
    `at` (beyond the correction's reach: its window sees about 13 cm around the twin's object)."""
    hand = Disturbance(kind="occlude", camera=front, at=at, duration=duration, center=(0.4, 0.5))
    return {
        "dropped frames (all cameras)": Disturbance(kind="drop_frame", at=at, duration=duration),
        "delayed frames (all cameras)": Disturbance(kind="delay_frame", at=at, duration=duration),
        "frozen camera (front)": Disturbance(kind="freeze_camera", camera=front, at=at, duration=duration),
        "occluding hand (front)": hand,
        "lighting ×0.5": Disturbance(kind="lighting", at=at, duration=duration, intensity=0.5),
        "shove of 15 cm": Disturbance(kind="move_object", object=obj, at=at, displacement=(0.0, -0.15, 0.0)),
    }


def main(args: Args) -> dict:
    logging.basicConfig(level=logging.WARNING)
    task = make("pusht")
    scene = task.scene
    push = args.seconds / 2
    results = {}
    for name, fault in faults(push - args.lead, args.duration, scene.cameras[0].name, scene.objects[0].name).items():
        if args.only is not None and args.only not in name:
            continue
        config = ScenarioConfig(seconds=args.seconds, push_time=push, gap=args.gap, seed=args.seed, faults=(fault,))
        out = run_scenario(task, config, label=name)
        out.pop("series")
        results[name] = out
    print(f"gap: {args.gap or 'default'}, lock-step, {args.seconds:g} s, hand push at {push:g} s, "
          f"each fault from {push - args.lead:g} s for {args.duration:g} s")  # fmt: skip
    header = ("fault", "max err (mm)", "back ≤ 2 cm after (s)", "held frames", "verdict", "recovery (s)", "median (mm)",
              "detector")  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
    for name, out in results.items():
        f, d = out["faults"][0], out["detector"]
        score = f"{d['hits']}/{d['oracle_episodes']} hit, {d['false_alarms']} false"
        print(
            f"| {name} | {f['max_err_mm']:.1f} | {f['back_in_sync_s']:.2f} | {f['held_frames']} | {f['verdict']} "
            f"| {out['recovery_s']:.2f} "
            f"| {out['pos_err_median_mm']:.2f} | {score} |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(jsonable(results), indent=2))
    return results


if __name__ == "__main__":
    main(tyro.cli(Args))
