"""The contact-rich sync scenario (correction on) over many seeds, with the correction's integral settings as
options: how a change to the correction fares beyond the few seeds `benchmarks/contact_sync.py` runs.

One lock-step 20 s episode per seed (`eval.sync.scenario.contact_rich`: random pushes from a sampled start, both
seeded), 3 cameras at 160 × 90, the default runtime except the options below; the errors are the twin's T against
the oracle (evaluation only). Each finished seed is appended to `--out` as one JSON line, so a run cut off
resumes where it stopped (seeds already there with the same settings are skipped); the table and the means over
the seeds are printed at the end. Under sustained contact single events (a loss, a flip of the real T) decide a
seed's tail, so compare settings on means and on per-seed counts over a dozen seeds or more, not on one.

    python experiments/contact_seeds.py --seeds 0 1 2 3 4 5 6 7 8 9 10 11 --out seeds.jsonl
    python experiments/contact_seeds.py --discharge 0 0 --out discharge.jsonl   # CorrectionConfig.integral_discharge
    python experiments/contact_seeds.py --lead-path 1.0 --out path.jsonl   # ArmConfig.lead_path_s
    python experiments/contact_seeds.py --early-search 0.5 --out early.jsonl   # RuntimeConfig.early_search
    python experiments/contact_seeds.py --no-alarm-check --out evidence.jsonl   # RuntimeConfig.alarm_check None
    python experiments/contact_seeds.py --rest-eps2d 0.01 --out rest.jsonl   # CorrectionConfig.rest_eps2d
    python experiments/contact_seeds.py --pushes lifted --out lifted.jsonl   # stops 35–51's pushes
    python experiments/contact_seeds.py --board-error 0 0 0 --out placed.jsonl   # the board exactly where told

Run one at a time: two lock-step pairs at once on a 2-core machine ran ten times slower each (the rasteriser's and
torch's threads contend), not two.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

from realissim.eval.sync.scenario import contact_rich, run_scenario
from realissim.real.surrogate import load_gap, save_gap
from realissim.real.surrogate.gap import DEFAULT_GAP_PATH
from realissim.runtime import RuntimeConfig
from realissim.tasks import make

KEYS = (
    ("pos_err_median_mm", "median mm"),
    ("pos_err_p95_mm", "p95 mm"),
    ("pos_err_p95_moving_mm", "p95 moving"),
    ("pos_err_max_mm", "max mm"),
    ("yaw_err_p95_deg", "yaw p95 °"),
    ("longest_silent_loss_s", "silent s"),
    ("detector_recall", "recall"),
    ("false_alarms_per_min", "false /min"),
    ("reacquisitions", "re-acq."),
    ("early_placements", "early"),
    ("vetoed_alarms", "vetoed"),
    ("moving_fraction", "T moving"),
    ("real_tipped_s", "real tipped s"),
    ("tipped_s", "tipped s"),
)


@dataclass
class Args:
    """Experiment options."""

    seeds: tuple[int, ...] = tuple(range(12))
    """Scenario seeds (start and pushes)."""
    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    board_error: tuple[float, float, float] | None = None
    """Override the profile's `board_error` (dx, dy m, dyaw rad: where the calibration board truly lies against
    where the twin is told; the profile so changed is written beside `--out` as <out>.gap.json); `0 0 0` measures
    what the board's placement costs (docs/results.md, stop 57)."""
    seconds: float = 20.0
    """Episode length, s."""
    integral: float | None = None
    """`CorrectionConfig.integral`, 1/s (None: its default)."""
    discharge: tuple[float, float] | None = None
    """`CorrectionConfig.integral_discharge` (m/s, rad/s; None: its default)."""
    lead_path: float | None = None
    """`RuntimeConfig.lead_path_s`, s (None: its default)."""
    lead_lag: float | None = None
    """`RuntimeConfig.lead_lag_frames` (None: its default)."""
    early_search: float | None = None
    """`RuntimeConfig.early_search` (None: its default)."""
    no_alarm_check: bool = False
    """`RuntimeConfig.alarm_check` None: the detector fires on its evidence alone."""
    rest_eps2d: float | None = None
    """`CorrectionConfig.rest_eps2d`, px² (None: its default); a negative value: None (off)."""
    pushes: Literal["closed", "lifted"] = "closed"
    """The scenario's pushes (`ScenarioConfig.pushes`): "lifted" for stops 35–51's."""
    threads: int | None = None
    """Torch (and rasteriser) threads (None: torch's default)."""
    out: Path = Path("contact_seeds.jsonl")
    """One JSON line per finished seed; read back to resume."""


def main(args: Args) -> list[dict]:
    logging.basicConfig(level=logging.WARNING)
    runtime = RuntimeConfig()
    correction = runtime.correction
    if args.integral is not None:
        correction = replace(correction, integral=args.integral)
    if args.discharge is not None:
        correction = replace(correction, integral_discharge=tuple(args.discharge))
    if args.rest_eps2d is not None:
        correction = replace(correction, rest_eps2d=None if args.rest_eps2d < 0 else args.rest_eps2d)
    runtime = replace(runtime, correction=correction)
    if args.lead_path is not None:
        runtime = replace(runtime, arm=replace(runtime.arm, lead_path_s=args.lead_path))
    if args.lead_lag is not None:
        runtime = replace(runtime, arm=replace(runtime.arm, lead_lag_frames=args.lead_lag))
    if args.early_search is not None:
        runtime = replace(runtime, supervision=replace(runtime.supervision, early_search=args.early_search))
    if args.no_alarm_check:
        runtime = replace(runtime, supervision=replace(runtime.supervision, alarm_check=None))
    discharge = list(correction.integral_discharge) if correction.integral_discharge else None
    settings = {"gap": str(args.gap) if args.gap else None, "seconds": args.seconds, "integral": correction.integral,
                "discharge": discharge, "lead_path_s": runtime.lead_path_s,
                "lead_lag_frames": runtime.lead_lag_frames, "early_search": runtime.early_search,
                "alarm_check": runtime.alarm_check, "pushes": args.pushes}  # fmt: skip
    if correction.rest_eps2d is not None:  # (absent otherwise: rows written before the option still resume)
        settings["rest_eps2d"] = correction.rest_eps2d
    gap = args.gap
    if args.board_error is not None:  # (absent otherwise, as above)
        settings["board_error"] = list(args.board_error)
        gap = args.out.with_name(args.out.stem + ".gap.json")
        save_gap(replace(load_gap(args.gap or DEFAULT_GAP_PATH), board_error=tuple(args.board_error)), gap)
    rows = {}
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            row = json.loads(line)
            if row.get("settings") == settings:
                rows[row["seed"]] = row
    task = make("pusht")
    for seed in args.seeds:
        if seed in rows:
            continue
        config = contact_rich(seed, seconds=args.seconds, gap=gap, runtime=runtime, threads=args.threads,
                              pushes=args.pushes)  # fmt: skip
        out = run_scenario(task, config, label=f"seed {seed}")
        rows[seed] = {"seed": seed, "settings": settings, **{k: float(out[k]) for k, _ in KEYS}}
        with args.out.open("a") as f:
            f.write(json.dumps(rows[seed]) + "\n")
    table = [rows[s] for s in args.seeds]
    print(f"contact-rich, correction on, {json.dumps(settings)}")
    print("| seed | " + " | ".join(label for _, label in KEYS) + " |")
    print("|---" * (1 + len(KEYS)) + "|")
    for row in table:
        print(f"| {row['seed']} | " + " | ".join(f"{row.get(k, math.nan):.2f}" for k, _ in KEYS) + " |")
    means = np.mean([[row.get(k, math.nan) for k, _ in KEYS] for row in table], axis=0)
    print("| mean | " + " | ".join(f"{v:.2f}" for v in means) + " |")
    return table


if __name__ == "__main__":
    main(tyro.cli(Args))
