"""The PushT expert: success offline on `pusht/eval-v1` and online on `pusht/online-v1` (surrogate real world,
default gap unless --gap, correction and follower on, lock-step, success judged on the oracle), with 95 % Wilson
intervals, the median time to success, the failure modes, and the offline collection rate (episodes recorded into
an episode store per minute, through `realissim.apps.collect`).

Each episode's result is appended to a JSON-lines log beside the output (`--log`), and a re-run with the same log
skips the episodes already there, so a run cut off (e.g. by a session's end) resumes.

    python benchmarks/expert.py [--json expert.json] [--offline N] [--online N] [--gap FILE] [--collect N]
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro
from tqdm import tqdm

from realissim.apps.collect import CollectConfig, collect
from realissim.envs import Env, EnvConfig
from realissim.eval.episode import run_episode
from realissim.eval.stats import wilson
from realissim.expert.pusht import PushTExpert
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.tasks import make, start_set


@dataclass
class Args:
    """Benchmark options."""

    json: Path | None = None
    """Write the results here as JSON."""
    log: Path = Path("runs/expert_episodes.jsonl")
    """Per-episode results (JSON lines); episodes already in it are not run again."""
    offline: int = 100
    """Episodes of pusht/eval-v1 (its first N starts)."""
    online: int = 20
    """Episodes of pusht/online-v1 (its first N starts)."""
    gap: Path | None = None
    """Reality-gap profile for the online run (None: the default)."""
    max_seconds: float = 60.0
    """Time limit per episode, simulated s."""
    collect: int = 4
    """Offline episodes recorded through `realissim collect` to time the collection rate (0: skip)."""
    seed: int = 0
    """Seed of the surrogate's noise."""


def _load(log: Path) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["key"]] = row
    return done


def _append(log: Path, row: dict) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()


def _row(key: str, index: int, result, expert: PushTExpert) -> dict:
    return {
        "key": key,
        "start": index,
        "success": bool(result.success),
        "success_time": result.success_time if result.success else None,
        "final": {k: float(v) for k, v in result.final.items()},
        "pushes": len(expert.pushes),
        "wall_s": result.wall_s,
        "policy_s": result.policy_s,
        "desynced_s": result.desynced_s,
        "reacquisitions": result.reacquisitions,
    }


def run_set(args: Args, online: bool, done: dict[str, dict]) -> list[dict]:
    task = make("pusht")
    version = "online-v1" if online else "eval-v1"
    starts = start_set(f"pusht/{version}")[: args.online if online else args.offline]
    tag = f"{version}:{args.gap.stem if args.gap else 'default'}" if online else version
    todo = [i for i in range(len(starts)) if f"{tag}:{i}" not in done]
    rows = [done[f"{tag}:{i}"] for i in range(len(starts)) if f"{tag}:{i}" in done]
    if not todo:
        return rows
    expert = PushTExpert(task.scene)
    world = None
    if online:
        config = SurrogateConfig(gap=args.gap, seed=args.seed, camera_size=(160, 90), mode="lockstep")
        world = Surrogate(task.scene, config).__enter__()
    try:
        env = Env(task, EnvConfig(), world)
        bar = tqdm(todo, desc=tag, unit="episode")
        for i in bar:
            result = run_episode(env, expert, starts[i], args.max_seconds)
            row = _row(f"{tag}:{i}", i, result, expert)
            _append(args.log, row)
            rows.append(row)
            bar.set_postfix(success=f"{sum(r['success'] for r in rows)}/{len(rows)}")
    finally:
        if world is not None:
            world.__exit__(None, None, None)
    return rows


def summarise(rows: list[dict]) -> dict:
    k, n = sum(r["success"] for r in rows), len(rows)
    times = [r["success_time"] for r in rows if r["success"]]
    failures = [{"start": r["start"], **{key: round(v, 4) for key, v in r["final"].items()}, "pushes": r["pushes"]}
                for r in rows if not r["success"]]  # fmt: skip
    return {
        "success": k / n if n else math.nan,
        "ci": wilson(k, n),
        "n": n,
        "median_time_to_success_s": float(np.median(times)) if times else math.nan,
        "p90_time_to_success_s": float(np.percentile(times, 90)) if times else math.nan,
        "median_pushes": float(np.median([r["pushes"] for r in rows])) if rows else math.nan,
        "median_wall_s": float(np.median([r["wall_s"] for r in rows])) if rows else math.nan,
        "failures": failures,
        "desynced_s_total": float(sum(r.get("desynced_s", 0.0) for r in rows)),
        "reacquisitions": int(sum(r.get("reacquisitions", 0) for r in rows)),
    }


def collection_rate(n: int) -> float:
    """Offline episodes per minute recorded into a fresh dataset by `realissim.apps.collect` (the real path)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        report = collect(CollectConfig(episodes=n, out=Path(tmp) / "ds", seed=1, progress=False))
        return 60.0 * report.added / (time.perf_counter() - t0)


def main() -> None:
    args = tyro.cli(Args)
    logging.basicConfig(level=logging.WARNING)
    done = _load(args.log)
    out: dict = {}
    if args.offline:
        off = summarise(run_set(args, False, done))
        out.update(offline_success=off["success"], offline_success_ci=off["ci"], offline_n=off["n"],
                   median_time_to_success_s=off["median_time_to_success_s"], offline=off)  # fmt: skip
    if args.online:
        on = summarise(run_set(args, True, done))
        out.update(online_success=on["success"], online_success_ci=on["ci"], online_n=on["n"],
                   online_median_time_to_success_s=on["median_time_to_success_s"], online=on,
                   online_gap=args.gap.stem if args.gap else "default")  # fmt: skip
    if args.collect:
        out["collect_episodes_per_min_offline"] = collection_rate(args.collect)
    print(f"PushT expert (success within {args.max_seconds:g} s; offline judged on the twin, online on the oracle)")
    print(f"{'set':<10} {'success':>8} {'95% CI':>16} {'n':>4} {'median t':>9} {'p90 t':>7} {'pushes':>7}")
    for name in ("offline", "online"):
        if name in out:
            s = out[name]
            print(f"{name:<10} {s['success']:>8.3f} {s['ci'][0]:>7.3f}–{s['ci'][1]:<7.3f} {s['n']:>4} "
                  f"{s['median_time_to_success_s']:>8.1f}s {s['p90_time_to_success_s']:>6.1f}s "
                  f"{s['median_pushes']:>7.0f}")  # fmt: skip
            for f in s["failures"]:
                print(f"  failed: start {f['start']}: {f}")
    if "collect_episodes_per_min_offline" in out:
        print(f"collection (offline, recorded): {out['collect_episodes_per_min_offline']:.1f} episodes/min")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
