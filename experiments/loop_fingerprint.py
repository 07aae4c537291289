"""A fingerprint of the online loop, to show a change that should not change behaviour did not.

Runs short lock-step sync scenarios that go through every stage of the frame loop (the standard push with the
unseen hand; contact-rich pushes; a 12 cm loss that fires the detector and is re-acquired; the early search with an
early hold; correction every other frame) and prints, per case, a SHA-256 of every frame's twin state (object
poses, joints and velocities, bit for bit) and the detector's verdict, with the counts of desynced frames,
re-acquisition attempts and placements, and the sync error. Lock-step runs are deterministic on one machine, so
two trees that print the same hashes ran the same episodes to the bit.

    python experiments/loop_fingerprint.py                  # every case (~5 min on 2 cores)
    python experiments/loop_fingerprint.py standard loss    # some of them
    PYTHONPATH=/path/to/other/src python experiments/loop_fingerprint.py   # the same against another tree

Written for issue 60's restructuring (docs/results-log.md).
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np

from realissim.eval.episode import EpisodeObserver
from realissim.eval.sync.scenario import ScenarioConfig, run_scenario
from realissim.runtime import RuntimeConfig, SupervisionConfig
from realissim.tasks import make

CASES: dict[str, dict] = {
    "standard": {"seconds": 8.0, "push_time": 4.0},
    "contact0": {"seconds": 6.0, "motion": "random", "motion_seed": 0},
    "loss": {"seconds": 6.0, "push_time": 2.0, "hand_push": (0.12, -0.05, 0.0)},
    "early": {"seconds": 6.0, "push_time": 2.0, "hand_push": (0.03, 0.0, 0.0),
              "supervision": {"early_search": 0.3, "early_hold": 5}},
    "every2": {"seconds": 5.0, "motion": "random", "motion_seed": 1, "correct_every": 2},
}  # fmt: skip
"""Each case: `ScenarioConfig` fields, with `supervision` (SupervisionConfig fields) and `correct_every`."""


class Fingerprint(EpisodeObserver):
    """Hashes every frame's twin state and verdict; counts desynced frames, attempts and placements."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.frames = self.desynced = self.attempts = self.placed = 0

    def on_frame(self, frame) -> None:  # type: ignore[no-untyped-def]
        report = frame.report
        state = report.state
        for array in (state.object_pos, state.object_quat, state.q, state.qd):
            self.hash.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
        self.hash.update(bytes([report.desynced]))
        self.frames += 1
        self.desynced += int(report.desynced)
        self.attempts += len(report.reacquisitions)
        self.placed += sum(a.placed for a in report.reacquisitions)


def run(name: str) -> dict:
    """One case's fingerprint and sync error."""
    case = dict(CASES[name])
    runtime = RuntimeConfig(
        correct_every=case.pop("correct_every", 1), supervision=SupervisionConfig(**case.pop("supervision", {}))
    )
    seen = Fingerprint()
    result = run_scenario(make("pusht"), ScenarioConfig(runtime=runtime, **case), progress=False, observers=[seen])
    errors = {"median_mm": round(result["pos_err_median_mm"], 6), "p95_mm": round(result["pos_err_p95_mm"], 6)}
    return {"sha256": seen.hash.hexdigest()[:16], "frames": seen.frames, "desynced": seen.desynced,
            "attempts": seen.attempts, "placed": seen.placed, **errors}  # fmt: skip


def main(names: list[str]) -> None:
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    for name in names or list(CASES):
        print(name, json.dumps(run(name)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
