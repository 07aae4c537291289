"""Record the frames where the runtime searched for a lost object, then replay the search on them with other
settings: how well each setting finds the object in exactly the images the runtime had.

`record` runs the contact-rich scenario (online, lock-step) on a gap profile and saves, for every search the
runtime made, the real images, the real arm's joints, the twin's qpos and — for scoring only — the oracle's
pose of the object, together with the runtime's calibrated views and sighting (pickled). `replay` searches
those frames again with `SearchConfig.compare` set to each of `--compare` (alternating, in one process, so the
timings compare) and prints, per setting, the position and yaw error against the oracle, the fraction of the
object-absent loss the found pose explains, and the search's time and renders. Nothing the runtime does reads
the oracle; only this script's scoring does.

    python experiments/search_replay.py record --profile 5 --out p05.pkl       # sweep profile 05, seed 0
    python experiments/search_replay.py replay p05.pkl [--every 4] [--compare intensity chromaticity]
"""

from __future__ import annotations

import dataclasses
import logging
import math
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

from realissim.envs.env import FrameInfo
from realissim.estimate.search import ObjectSearch, SearchConfig
from realissim.eval.episode import EpisodeObserver
from realissim.eval.sync.scenario import contact_rich, run_scenario
from realissim.eval.sync.sweep import SWEEP_SEED, sweep_profiles
from realissim.geometry import quat_yaw
from realissim.real.surrogate import save_gap
from realissim.tasks import make

log = logging.getLogger("search_replay")


class _Recorder(EpisodeObserver):
    """Keeps every frame in which the runtime searched, and the runtime's search (views and sighting)."""

    def __init__(self) -> None:
        self.frames: list[dict] = []
        self.search: ObjectSearch | None = None
        self.robot_qpos: np.ndarray | None = None

    def on_frame(self, frame: FrameInfo) -> None:
        report, env = frame.report, frame.env
        if report is None or not report.reacquisitions:
            return
        runtime = env.runtime
        self.search, self.robot_qpos = runtime.search, np.asarray(runtime.twin.layout.robot_qpos)
        truth = env.world.oracle.read()  # scoring only
        for attempt in report.reacquisitions:
            k = attempt.object
            self.frames.append({
                "time": float(report.state.time), "object": k, "images": report.images.copy(),
                "q_real": report.q_real.copy(), "qpos": runtime.twin.data.qpos.copy(),
                "truth_pos": truth.object_pos[k].copy(), "truth_quat": truth.object_quat[k].copy(),
            })  # fmt: skip


@dataclass
class Record:
    """Run the contact-rich scenario and save the frames where the runtime searched."""

    out: Path
    """Pickle file to write."""
    profile: int | None = None
    """Sweep profile (index into `eval.sync.sweep`, seed `sweep_seed`); None: the default gap or `--gap`."""
    gap: Path | None = None
    """Reality-gap profile JSON (when no `--profile`)."""
    seed: int = 0
    """Seed of the scenario's start and pushes."""
    seconds: float = 20.0
    sweep_seed: int = SWEEP_SEED


@dataclass
class Replay:
    """Search the recorded frames again with each setting."""

    file: tyro.conf.Positional[Path]
    """The file `record` wrote."""
    every: int = 1
    """Replay every n-th recorded search."""
    compare: tuple[Literal["intensity", "chromaticity"], ...] = ("intensity", "chromaticity")
    """`SearchConfig.compare` settings to replay."""
    shadows: tuple[bool, ...] = (True,)
    """Replay with the twin rendering the shadow it fitted at calibration (True) and/or without it (False; the
    colours stay those fitted with it). Without a fitted shadow both are the same."""
    search: SearchConfig = field(default_factory=SearchConfig)
    """The other search settings."""


def record(args: Record) -> int:
    """Returns the number of frames saved."""
    gap = args.gap
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile is not None:
            gap = Path(tmp) / "gap.json"
            save_gap(sweep_profiles(args.profile + 1, args.sweep_seed)[args.profile][1], gap)
        recorder = _Recorder()
        result = run_scenario(
            make("pusht"), contact_rich(args.seed, seconds=args.seconds, gap=gap), observers=[recorder]
        )
    if recorder.search is None:
        log.warning("the runtime never searched (median error %.1f mm): nothing to save", result["pos_err_median_mm"])
        return 0
    with open(args.out, "wb") as f:
        pickle.dump({"frames": recorder.frames, "search": recorder.search, "robot_qpos": recorder.robot_qpos}, f)
    log.info("saved %d searches to %s", len(recorder.frames), args.out)
    return len(recorder.frames)


def replay(args: Replay) -> dict[str, dict[str, float]]:
    """Per setting: position error median / max (mm), yaw error median / max (deg), explained fraction median,
    found count, time median (ms) and renders median."""
    with open(args.file, "rb") as f:
        saved = pickle.load(f)
    frames, old = saved["frames"][:: args.every], saved["search"]
    light = old.views.shadow.light if old.views.shadow is not None else None
    settings = [(c, s) for c in args.compare for s in args.shadows]
    name = {(c, s): c + ("" if light is None else (", shadow" if s else ", no shadow")) for c, s in settings}
    searches = {key: ObjectSearch(old.views, old.sighting.model, dataclasses.replace(args.search, compare=key[0]),
                                  old.sighting) for key in settings}  # fmt: skip
    rows: dict[str, list[tuple[float, ...]]] = {name[key]: [] for key in settings}
    for frame in frames:
        xpos, xquat = old.sighting.poses(frame["qpos"], saved["robot_qpos"], frame["q_real"])
        for key, search in searches.items():
            old.views.set_shadow(light if key[1] else None)
            old.views.cast_shadows(xpos, xquat)  # as the correction does before the runtime searches
            found = search.search_poses(xpos, xquat, frame["images"], frame["object"])
            pos = 1e3 * float(np.linalg.norm(found.pos[:2] - frame["truth_pos"][:2]))
            yaw = math.degrees(abs(math.remainder(found.yaw - float(quat_yaw(frame["truth_quat"])), 2 * math.pi)))
            explained = 1.0 - found.score / found.empty_score
            rows[name[key]].append((pos, yaw, explained, float(found.found), 1e3 * found.seconds, found.renders))
    out = {}
    print(f"{len(frames)} searches of {args.file}")
    print("| compare | position error median / max (mm) | yaw median / max (deg) | explained | found | ms | renders |")
    print("|---|---|---|---|---|---|---|")
    for compare, r in rows.items():
        a = np.asarray(r)
        out[compare] = {
            "pos_median_mm": float(np.median(a[:, 0])), "pos_max_mm": float(a[:, 0].max()),
            "yaw_median_deg": float(np.median(a[:, 1])), "yaw_max_deg": float(a[:, 1].max()),
            "explained_median": float(np.median(a[:, 2])), "found": int(a[:, 3].sum()),
            "ms_median": float(np.median(a[:, 4])), "renders_median": float(np.median(a[:, 5])),
        }  # fmt: skip
        o = out[compare]
        print(f"| {compare} | {o['pos_median_mm']:.1f} / {o['pos_max_mm']:.1f} | {o['yaw_median_deg']:.1f} / "
              f"{o['yaw_max_deg']:.1f} | {o['explained_median']:.2f} | {o['found']}/{len(a)} | {o['ms_median']:.0f} | "
              f"{o['renders_median']:.0f} |")  # fmt: skip
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("realissim").setLevel(logging.WARNING)
    command = tyro.extras.subcommand_cli_from_dict({"record": Record, "replay": Replay})
    if isinstance(command, Record):
        record(command)
    else:
        replay(command)
