"""Offline evaluation sharded across a Ray cluster (Ray is an optional extra: `pip install 'realissim[ray]'`).

The unit of work is one batch of the local run: starts [i·envs, (i + 1)·envs) in one `BatchEnv` of that size
with a freshly built policy (`PolicyFactory`), exactly as `evaluate_offline` runs it. A batch's episodes share
the policy's noise stream and end together, so a shard that cut a batch differently would give different
(equally valid) episodes; sharding whole batches makes a Ray run agree with a local run episode by episode for
the same seeds (tested). Checkpoints shard the same way: every (checkpoint, batch) pair is one task.

Policies travel as factories, not objects: a trained policy holds a traced network and a torch generator, which
are rebuilt in the worker from the checkpoint's path (`CheckpointPolicy`), so every worker must see the same
files (a shared disk, or the same path on every node).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm

from realissim.envs import BatchEnv, EnvConfig
from realissim.eval.episode import EpisodeResult, run_episodes
from realissim.eval.offline import OfflineReport, batches
from realissim.policy.factory import PolicyFactory
from realissim.spec.state import StartState
from realissim.tasks import make

log = logging.getLogger(__name__)


def run_batch(
    task_name: str, factory: PolicyFactory, starts: list[StartState], max_seconds: float | None, config: EnvConfig
) -> list[EpisodeResult]:
    """One batch, as `evaluate_offline` runs it: a `BatchEnv` of len(starts) twins of task `task_name`, the
    policy from `factory`; the episodes' results in start order."""
    task = make(task_name)
    policy = factory(task, len(starts))
    return run_episodes(BatchEnv(task, len(starts), config), policy, starts, max_seconds)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "--ray needs Ray, an optional extra: pip install 'realissim[ray]' (or pip install 'ray>=2.10')"
        ) from None
    return ray


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address` ("auto": the one this machine belongs to, "ray://host:port": a remote
    one), or start a local one ("local" or None), unless Ray is already initialised here."""
    ray = _ray()
    if ray.is_initialized():
        return
    target = None if address in (None, "", "local") else address
    ray.init(address=target, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    log.info("Ray: %s, %s CPUs", "local" if target is None else target, ray.cluster_resources().get("CPU"))


def map_batches(
    jobs: Sequence[tuple[str, PolicyFactory, list[StartState], float, EnvConfig]],
    progress: bool = True,
    label: str = "ray eval",
    on_done: Callable[[int, list[EpisodeResult]], None] | None = None,
) -> list[list[EpisodeResult]]:
    """Run `run_batch(*job)` for every job as a Ray task (one CPU each) on the connected cluster; results in
    job order. A progress bar counts episodes with the running success rate; `on_done(i, results)` is called as
    job i finishes (any order)."""
    ray = _ray()
    remote = ray.remote(num_cpus=1, max_retries=0)(run_batch)
    pending = {remote.remote(*job): i for i, job in enumerate(jobs)}
    out: list[list[EpisodeResult] | None] = [None] * len(jobs)
    done_episodes = successes = 0
    with tqdm(total=sum(len(j[2]) for j in jobs), desc=label, unit="episode", disable=not progress) as bar:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                out[i] = ray.get(ref)
                done_episodes += len(out[i])
                successes += sum(r.success for r in out[i])
                bar.update(len(out[i]))
                bar.set_postfix(success=f"{successes}/{done_episodes}")
                if on_done is not None:
                    on_done(i, out[i])
    return [r for r in out if r is not None]


def evaluate_offline_ray(
    task_name: str,
    factory: PolicyFactory,
    starts: Sequence[StartState],
    envs: int = 20,
    max_seconds: float | None = None,
    config: EnvConfig = EnvConfig(),
    address: str | None = None,
    progress: bool = True,
) -> OfflineReport:
    """`evaluate_offline` with its batches run as Ray tasks on the cluster at `address` (see `connect`): the same
    per-episode results as a local run with the same `envs`, seeds and threads. Throughput in the report is
    simulated time over wall time per env of the batch size, as locally (so it counts the cluster's
    parallelism)."""
    if not starts:
        raise ValueError("starts: need at least one start")
    connect(address)
    wall0 = time.perf_counter()
    jobs = [(task_name, factory, batch, max_seconds, config) for batch in batches(starts, envs)]
    results = [r for batch in map_batches(jobs, progress) for r in batch]
    report = OfflineReport(results, time.perf_counter() - wall0, min(envs, len(starts)), extra={"ray": True})
    log.info("offline evaluation on Ray: %d/%d successes", report.successes, len(results))
    return report
