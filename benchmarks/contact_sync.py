"""Contact-rich sync benchmark: random pushes keep the T moving (`eval.sync.scenario.contact_rich`), online,
lock-step (or `--realtime`: on the wall clock, the surrogate pacing itself, the correction in its own thread), 3
cameras at 160 × 90; correction on and off. Errors are the twin's T against the oracle, over all
frames and over frames where the real T moves (> 1 cm/s); `silent_loss_s` is the time the error exceeded 2 cm
while the desync detector said in sync; the detector's recall counts oracle episodes (> 2 cm for > 0.25 s)
it flagged within 0.25 s of their start.

    python benchmarks/contact_sync.py [--gap FILE] [--seconds 20] [--seed 0] [--realtime] [--json out.json]
    python benchmarks/contact_sync.py --sweep [--profiles 12] [--tune 4]   # the gap sweep, correction on

The sweep's profiles come from `eval.sync.sweep` (seeded); the first `--tune` are the ones to tune on, the
rest are held out, and the table marks which is which. With `--json`, a sweep writes its file after every profile
and, run again with the same settings, resumes from it.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import tyro

if "--realtime" in sys.argv:  # numba's pool is sized on import: one core is left to the real-time world
    from realissim.util.threads import reserve_core_for_world

    reserve_core_for_world()

from realissim.eval.sync.scenario import contact_rich, run_scenario
from realissim.eval.sync.sweep import SWEEP_SEED, describe, sweep_profiles
from realissim.real.surrogate import save_gap
from realissim.runtime import CalibrationConfig, RuntimeConfig
from realissim.tasks import make
from realissim.util.jsonable import jsonable
from realissim.views.shadows import ShadowFitConfig

KEYS = (
    ("pos_err_median_mm", "position error, median (mm)"),
    ("pos_err_p95_mm", "position error, p95 (mm)"),
    ("pos_err_p95_moving_mm", "position error, p95 while moving (mm)"),
    ("pos_err_max_mm", "position error, max (mm)"),
    ("yaw_err_p95_deg", "yaw error, p95 (deg)"),
    ("silent_loss_s", "silent loss > 2 cm (s)"),
    ("longest_silent_loss_s", "longest silent loss (s)"),
    ("desynced_s", "flagged out of sync (s)"),
    ("reacquisitions", "re-acquisitions"),
    ("reacquire_ms", "re-acquisition cost, median (ms)"),
    ("vetoed_alarms", "alarms the search check vetoed"),
    ("check_ms", "alarm check cost, median (ms)"),
    ("detector_recall", "detector recall"),
    ("false_alarms_per_min", "false alarms per min"),
    ("false_alarms_pose_per_min", "... with yaw > 10° a loss too"),
    ("moving_fraction", "frames with the T moving"),
    ("real_tipped_s", "real T standing on a side, oracle (s)"),
    ("tipped_s", "... recognised by the twin (s)"),
    ("pos_err_p95_lying_mm", "position error, p95, real T lying (mm)"),
    ("loop_hz", "loop rate (Hz)"),
    ("frames_on_time", "frames on time (real time)"),
    ("corrected_hz", "corrections per second"),
    ("correct_ms_median", "correction cost, median (ms)"),
    ("correction_age_ms_median", "correction age when applied (ms)"),
)


@dataclass
class Args:
    """Benchmark options."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    seconds: float = 20.0
    """Episode length, s."""
    seed: int = 0
    """Seed of the start and of the random pushes."""
    json: Path | None = None
    """Write the results here as JSON."""
    sweep: bool = False
    """Run the gap sweep instead (correction on, one row per profile)."""
    profiles: int = 12
    """Profiles in the sweep."""
    tune: int = 4
    """The sweep's first this many profiles are for tuning; the rest are held out."""
    sweep_seed: int = SWEEP_SEED
    correct_every: int = 1
    """Correct every n-th frame, holding the wrench between (`RuntimeConfig.correct_every`)."""
    calibrate_at: Literal["goal", "start"] = "start"
    """Where the twin's appearance is fitted: at the episode's start (as the sync scenarios do) or with the T on
    its goal (as online evaluation does)."""
    shadows: bool = True
    """Let calibration fit a shadow-casting key light and the twin render its shadow (`CalibrationConfig.shadows`);
    False: the twin renders none, as before stop 40."""
    with_off: bool = False
    """With `--sweep`: also run each profile with the correction off (its row's "off" holds that run's metrics), to
    check that the correction is never worse than none."""
    only: tuple[int, ...] = ()
    """With `--sweep`: run only these profile indices (default: all `--profiles`)."""
    eps2d: float | None = None
    """The renderer's low-pass in the twin's views, px² (`ViewsConfig.eps2d`; None: its default)."""
    iterations: int | None = None
    """Adam steps of the visual correction per frame (`CorrectionConfig.iterations`; None: its default)."""
    no_alarm_check: bool = False
    """Let the detector fire on its evidence alone, without the search's check (`SupervisionConfig.alarm_check`
    None), as before stop 51."""
    realtime: bool = False
    """Run on the wall clock: the surrogate paces itself at the frame rate, the loop keeps it, the correction runs
    beside the loop in its own thread (`RuntimeConfig.correct_beside`)."""
    pushes: Literal["closed", "lifted"] = "closed"
    """The scenario's pushes (`ScenarioConfig.pushes`): "closed" (round the T, closed loop) or "lifted"
    (lifted over the T, open loop: the earlier scenario)."""


def run(gap: Path | None, seconds: float, seed: int, correct: bool, label: str, every: int = 1,
        calibrate_at: Literal["goal", "start"] = "start", shadows: bool = True,
        eps2d: float | None = None, iterations: int | None = None, alarm_check: bool = True,
        pushes: Literal["closed", "lifted"] = "closed", realtime: bool = False) -> dict:  # fmt: skip
    calibration = CalibrationConfig(shadows=ShadowFitConfig(enabled=shadows))
    runtime = RuntimeConfig(correct=correct, correct_every=every, calibration=calibration)
    if not alarm_check:
        runtime = replace(runtime, supervision=replace(runtime.supervision, alarm_check=None))
    if eps2d is not None:
        runtime = replace(runtime, views=replace(runtime.views, eps2d=eps2d))
    if iterations is not None:
        runtime = replace(runtime, correction=replace(runtime.correction, iterations=iterations))
    config = contact_rich(seed, seconds=seconds, gap=gap, runtime=runtime, calibrate_at=calibrate_at, pushes=pushes,
                          realtime=realtime)  # fmt: skip
    out = run_scenario(make("pusht"), config, label=label)
    out.pop("series")
    return out


def main(args: Args) -> dict:
    logging.basicConfig(level=logging.WARNING)
    if args.sweep:
        return sweep(args)
    results = {}
    for name in ("on", "off"):
        label = f"correction {name}"
        results[name] = run(
            args.gap,
            args.seconds,
            args.seed,
            name == "on",
            label,
            args.correct_every,
            args.calibrate_at,
            args.shadows,
            args.eps2d,
            args.iterations,
            not args.no_alarm_check,
            args.pushes,
            args.realtime,
        )
    print(
        f"contact-rich, gap {args.gap or 'default'}, seed {args.seed}, {args.seconds:g} s, "
        f"{'real time' if args.realtime else 'lock-step'}, "
        f"correcting every {args.correct_every} frame(s), calibrated at the {args.calibrate_at}"
        + ("" if args.shadows else ", no shadows rendered")
        + ("" if args.eps2d is None else f", twin low-pass {args.eps2d:g} px²")
        + ("" if args.iterations is None else f", {args.iterations} correction steps")
        + (", no alarm check" if args.no_alarm_check else "")
        + (f", {args.pushes} pushes" if args.pushes != "closed" else "")
    )
    print(f"| {'metric':<38} | {'correction on':>13} | {'off':>9} |")
    print(f"|{'-' * 40}|{'-' * 15}|{'-' * 11}|")
    for key, label in KEYS:
        print(f"| {label:<38} | {results['on'][key]:13.3f} | {results['off'][key]:9.3f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(jsonable(results), indent=2))
    return results


def sweep(args: Args) -> dict:
    """One row per profile. With `--json`, the file is rewritten after every profile and a sweep cut off is resumed
    from it: rows already there (same sweep seed, scenario seed, length and correction rate) are not run again."""
    rows: dict = {}
    key = {"sweep_seed": args.sweep_seed, "seed": args.seed, "seconds": args.seconds,
           "correct_every": args.correct_every, "calibrate_at": args.calibrate_at, "shadows": args.shadows,
           "eps2d": args.eps2d, "iterations": args.iterations, "alarm_check": not args.no_alarm_check,
           "pushes": args.pushes, "realtime": args.realtime, "with_off": args.with_off}  # fmt: skip
    if args.json is not None and args.json.exists():
        done = json.loads(args.json.read_text())
        if done.pop("_key", None) == key:
            rows = done
            logging.getLogger(__name__).warning("resuming the sweep: %d profiles done in %s", len(rows), args.json)
    with tempfile.TemporaryDirectory() as folder:
        for i, (name, gap) in enumerate(sweep_profiles(args.profiles, args.sweep_seed)):
            if name in rows or (args.only and i not in args.only):
                continue
            path = Path(folder) / f"{name}.json"
            save_gap(gap, path)
            out = run(path, args.seconds, args.seed, True, name, args.correct_every, args.calibrate_at, args.shadows,
                      args.eps2d, args.iterations, not args.no_alarm_check, args.pushes, args.realtime)  # fmt: skip
            rows[name] = {"set": "tune" if i < args.tune else "held-out", **describe(gap), **out}
            if args.with_off:
                rows[name]["off"] = run(path, args.seconds, args.seed, False, f"{name} off", args.correct_every,
                                        args.calibrate_at, args.shadows, args.eps2d, args.iterations,
                                        not args.no_alarm_check, args.pushes, args.realtime)  # fmt: skip
            if args.json is not None:
                args.json.write_text(json.dumps(jsonable({"_key": key, **rows}), indent=2))
    params = ("friction", "mass", "com_mm", "latency_ms", "cam_rot_deg", "shadows")
    shown = ("pos_err_median_mm", "pos_err_p95_mm", "pos_err_p95_moving_mm", "pos_err_max_mm", "yaw_err_p95_deg",
             "silent_loss_s", "longest_silent_loss_s", "detector_recall", "false_alarms_per_min",
             "false_alarms_pose_per_min", "desynced_s", "reacquisitions", "vetoed_alarms")  # fmt: skip
    print(f"gap sweep (seed {args.sweep_seed}), contact-rich seed {args.seed}, {args.seconds:g} s, correction on, "
          f"{'real time' if args.realtime else 'lock-step'}"
          + ("" if args.shadows else ", no shadows rendered"))  # fmt: skip
    print("| profile | set | " + " | ".join(params + shown) + " |")
    print("|" + "---|" * (2 + len(params) + len(shown)))
    for name, row in rows.items():
        cells = [f"{row[k]:.2f}" for k in params + shown]
        print(f"| {name} | {row['set']} | " + " | ".join(cells) + " |")
    if args.with_off:
        print("\ncorrection on against off (position error, mm): never worse than none when both columns say yes")
        print("| profile | set | median on | median off | p95 on | p95 off | on ≤ off (median) | on ≤ off (p95) |")
        print("|---|---|---|---|---|---|---|---|")
        for name, row in rows.items():
            on_m, off_m, on_p, off_p = (row["pos_err_median_mm"], row["off"]["pos_err_median_mm"],
                                        row["pos_err_p95_mm"], row["off"]["pos_err_p95_mm"])  # fmt: skip
            print(
                f"| {name} | {row['set']} | {on_m:.2f} | {off_m:.2f} | {on_p:.2f} | {off_p:.2f} | "
                f"{'yes' if on_m <= off_m else 'NO'} | {'yes' if on_p <= off_p else 'NO'} |"
            )
    return rows


if __name__ == "__main__":
    main(tyro.cli(Args))
