"""Expert relabelling (DAgger) through the twin: the policy acts, the expert labels the states it visits, the
policy retrains on the demonstrations and the labels together; `rounds` times, resumable.

A round:

1. **Roll out** the current policy in batches of offline twins (`BatchEnv`, the evaluation's settings) from fresh
   starts of the task's sampler (seeded by (seed, round); never a shipped start set's seed). The expert never
   acts: the rollouts are in the twins, where no state is dangerous, so none is "beyond recovery" for safety;
   a rollout simply ends at the task's time limit or when the whole batch has succeeded.
2. **Label** every frame the expert can label cheaply (`ExpertLabeller`): the chunk it would command there. The
   PushT expert plans a push (~2 s of search on one core) and then follows it; while the policy's arm stays within
   the plan's `replan_deviation` the expert's label is the rest of that plan, and when the arm leaves it the
   expert decides afresh from the state the policy reached — at most once per `decide_every` s of each rollout
   (the frames between are left unlabelled: the cost of a label is the search, not the frame). Labelling stops
   1 s after an env's success (the expert's labels there are "lift and hold").
3. **Store** each rollout as a relabelled episode (`data.schema.RELABEL_KEY`; the expert's chunks in
   `label_q`, which frames in `label_mask`) in the run's aggregate dataset — a copy of the demonstrations — so the
   labels are kept with the states they label and any representation (state or images rendered from the state)
   trains on them (`learn.dataset.build_samples`).
4. **Retrain**: fine-tune the round's policy on the aggregate (`TrainConfig.init_from`; `train_steps` steps).

The run directory holds `data/` (the aggregate dataset), `round_NN/` (each round's training run) and
`dagger.json` (the journal: each round's policy, rollouts, labelled frames, decisions, rollout success and wall
times). Running the same command again resumes: a round's rollouts already stored are not run again (they are
stored batch by batch), and its training resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from realissim.eval.episode import EpisodeObserver, EpisodeResult

if TYPE_CHECKING:
    from realissim.data.store import DatasetWriter
    from realissim.envs import BatchEnv, Env, FrameInfo
    from realissim.policy.base import ActionChunk, Observation, Policy
    from realissim.spec.state import StartState
    from realissim.tasks import Task

log = logging.getLogger(__name__)

JOURNAL = "dagger.json"
DATA = "data"


@dataclass(frozen=True)
class DaggerConfig:
    """How many rounds, rollouts and labels, and how each round retrains."""

    task: str = "pusht"
    """The task (registry name)."""
    rounds: int = 2
    """DAgger rounds (each: roll out, label, retrain)."""
    rollouts: int = 20
    """Policy rollouts per round (episodes from fresh starts)."""
    envs: int = 10
    """Twins run at once (a batch of rollouts)."""
    decide_every: float = 1.0
    """Least simulated time between two fresh decisions of the expert in one rollout, s (a decision is a push
    search, ~2 s of one core); the frames where the arm left the expert's plan before the next decision is due
    are left unlabelled."""
    label_budget: int | None = None
    """Stop a round's rollouts once this many frames are labelled (None: all `rollouts`); the round ends at the
    end of the batch that reaches it."""
    train_steps: int = 8000
    """Training steps of each round's fine-tuning."""
    lr: float | None = None
    """Learning rate of the fine-tuning (None: the first policy's)."""
    seed: int = 0
    """Seed of the rollouts' starts and of the policy's sampling noise; each round's training seed is seed + round."""
    threads: int = 2
    """Torch threads (training; the rollouts use one)."""
    steps: int | None = None
    """Euler steps of the policy when it acts (None: the checkpoint's)."""
    max_seconds: float | None = None
    """Time limit of a rollout, simulated s (None: the task's)."""
    workers: int = 1
    """Processes that roll out and label batches at once (the labelling is one core's push searches: 2 on a
    2-core machine label ~2× as fast)."""
    progress: bool = True
    """Progress bars."""

    def __post_init__(self) -> None:
        if min(self.rounds, self.rollouts, self.envs, self.train_steps, self.workers) < 1:
            raise ValueError("rounds, rollouts, envs, train_steps and workers must be ≥ 1")
        if not (self.decide_every >= 0 and math.isfinite(self.decide_every)):
            raise ValueError(f"decide_every: must be ≥ 0 s, got {self.decide_every}")
        if self.label_budget is not None and self.label_budget < 1:
            raise ValueError(f"label_budget: must be ≥ 1 frame or None, got {self.label_budget}")


@dataclass
class RoundRecord:
    """What one round did (the journal's entry)."""

    round: int
    policy: str
    """The checkpoint that acted."""
    rollouts: int = 0
    rollout_successes: int = 0
    labelled_frames: int = 0
    frames: int = 0
    decisions: int = 0
    label_wall_s: float = 0.0
    """Wall time of the rollouts and their labelling, s."""
    train_wall_s: float = 0.0
    checkpoint: str | None = None
    """The round's retrained policy (None until trained)."""


@dataclass
class DaggerReport:
    """Every round so far, and where the last policy is."""

    rounds: list[RoundRecord] = field(default_factory=list)

    @property
    def labelled_frames(self) -> int:
        return sum(r.labelled_frames for r in self.rounds)

    @property
    def policy(self) -> str | None:
        """The newest trained policy's checkpoint."""
        done = [r.checkpoint for r in self.rounds if r.checkpoint]
        return done[-1] if done else None

    def as_dict(self) -> dict[str, Any]:
        return {"rounds": [asdict(r) for r in self.rounds], "labelled_frames": self.labelled_frames,
                "policy": self.policy}  # fmt: skip


class ExpertLabeller:
    """Labels one rollout's frames with an expert's chunks (see the module's docstring): the expert's plan while the
    arm follows it (`keeps_plan`), a fresh decision at most every `decide_every` s otherwise. An expert without
    `keeps_plan` decides afresh at every label, so it labels at most one frame per `decide_every` s."""

    def __init__(self, expert: Policy, decide_every: float) -> None:
        self.expert, self.decide_every = expert, decide_every
        self.decisions = 0
        self._last = -math.inf

    def reset(self) -> None:
        self.expert.reset()
        self.decisions, self._last = 0, -math.inf

    def label(self, observation: Observation) -> ActionChunk | None:
        """The expert's chunk at `observation` (one env's), or None when it would have to decide again before
        `decide_every` has passed since its last decision."""
        keeps = getattr(self.expert, "keeps_plan", None)
        if keeps is not None and keeps(observation):
            return self.expert.act(observation)
        now = float(observation.time)
        if now - self._last < self.decide_every - 1e-9:
            return None
        replan = getattr(self.expert, "replan", None)
        if replan is not None:
            replan()
        self._last, self.decisions = now, self.decisions + 1
        return self.expert.act(observation)


def padded_label(chunk: ActionChunk, waypoints: int, horizon: float) -> np.ndarray:
    """(waypoints, J) float32: a chunk's q′ at (i + 1)·horizon/waypoints s; a shorter chunk (the end of a plan) holds
    its last waypoint. ValueError when its waypoints are not on that grid."""
    q = np.asarray(chunk.q_des, dtype=np.float64)
    n = q.shape[0]
    if n > waypoints or not math.isclose(chunk.horizon / n, horizon / waypoints, rel_tol=1e-6):
        raise ValueError(f"label: a chunk of {n} waypoints over {chunk.horizon} s is not on the grid of "
                         f"{waypoints} over {horizon} s")  # fmt: skip
    return np.concatenate([q, np.repeat(q[-1:], waypoints - n, axis=0)]).astype(np.float32)


class RelabelRecorder(EpisodeObserver):
    """Records every env of a `BatchEnv`'s episodes with an expert's labels and appends each as a relabelled episode
    to `writer` (`data.schema.RELABEL_KEY`, with `about` in it). `make_labeller()` builds one labeller per env."""

    def __init__(
        self,
        writer: DatasetWriter,
        make_labeller: Callable[[], ExpertLabeller],
        waypoints: int,
        horizon: float,
        about: dict[str, Any],
        budget: int | None = None,
    ) -> None:
        self.writer, self.make_labeller = writer, make_labeller
        self.waypoints, self.horizon, self.about, self.budget = waypoints, horizon, about, budget
        self.labellers: list[ExpertLabeller] = []
        self.start_indices: Sequence[int] | None = None
        """Each env's start's place in the round's starts (set before each batch), stored with its episode."""
        self.labelled = 0
        """Frames labelled over every episode so far."""
        self.decisions = 0
        self._frames: list[dict[str, list[np.ndarray]]] = []
        self._success_at: list[float] = []
        self._ik: Any = None

    def on_reset(self, env: Env | BatchEnv, observation: Observation) -> None:
        from realissim.envs import BatchEnv
        from realissim.twin.kinematics import PusherIK

        if not isinstance(env, BatchEnv):
            raise TypeError(f"RelabelRecorder records a BatchEnv, got {type(env).__name__}")
        while len(self.labellers) < env.size:
            self.labellers.append(self.make_labeller())
        for labeller in self.labellers:
            labeller.reset()
        if self._ik is None:
            self._ik = PusherIK(env.task.scene)
        self._frames = [{} for _ in range(env.size)]
        self._success_at = [math.inf] * env.size

    def on_frame(self, frame: FrameInfo) -> None:
        from realissim.policy.base import Observation

        s = frame.state
        times = np.atleast_1d(frame.time)
        for b, frames in enumerate(self._frames):
            t = float(times[b])
            values = {"time": s.time[b], "object_pos": s.object_pos[b], "object_quat": s.object_quat[b],
                      "object_linvel": s.object_linvel[b], "object_angvel": s.object_angvel[b], "q": s.q[b],
                      "qd": s.qd[b], "q_des": frame.q_des[b], "policy_progress": np.atleast_1d(frame.progress)[b],
                      "tip": self._ik.tip_position(s.q[b])}  # fmt: skip
            chunk = None
            if t <= self._success_at[b] + 1.0 and (self.budget is None or self.labelled < self.budget):
                observation = Observation(time=np.asarray(t), q=s.q[b], qd=s.qd[b], q_des=frame.q_des[b],
                                          object_pos=s.object_pos[b], object_quat=s.object_quat[b])  # fmt: skip
                chunk = self.labellers[b].label(observation)
            values["label_mask"] = np.asarray(chunk is not None)
            values["label_q"] = (np.zeros((self.waypoints, len(s.q[b])), np.float32) if chunk is None
                                 else padded_label(chunk, self.waypoints, self.horizon))  # fmt: skip
            self.labelled += chunk is not None
            for name, value in values.items():
                frames.setdefault(name, []).append(np.asarray(value))
        self._judge(frame)

    def _judge(self, frame: FrameInfo) -> None:
        """Note each env's first success on the twin (labelling stops 1 s after it)."""
        if frame.frame % 6:
            return
        pos, quat = frame.env.twins.object_poses()  # type: ignore[union-attr]
        for b in range(len(self._frames)):
            if math.isinf(self._success_at[b]) and frame.env.task.evaluate(pos[b], quat[b]).success:
                self._success_at[b] = float(np.atleast_1d(frame.time)[b])

    def on_end(self, result: EpisodeResult | list[EpisodeResult]) -> None:
        from realissim.data.schema import RELABEL_KEY, EpisodeData, progress_label

        assert isinstance(result, list)
        for b, (frames, r) in enumerate(zip(self._frames, result, strict=True)):
            arrays = {name: np.stack(values) for name, values in frames.items()}
            decisions = self.labellers[b].decisions
            self.decisions += decisions
            episode = EpisodeData(**arrays, progress=progress_label(len(arrays["time"])))
            about = self.about | {"horizon": self.horizon, "waypoints": self.waypoints, "decisions": decisions,
                                  "labelled_frames": int(arrays["label_mask"].sum())}  # fmt: skip
            if self.start_indices is not None:
                about["start_index"] = int(self.start_indices[b])
            final = {k: float(v) for k, v in r.final.items()}
            self.writer.append(episode, success=r.success, success_time=r.success_time,
                                      final_coverage=final.get("coverage", math.nan), start=r.start,
                                      extra={RELABEL_KEY: about, "final": final})  # fmt: skip
        self._frames = []


def rollout_starts(task: Task, config: DaggerConfig, round_: int) -> tuple[StartState, ...]:
    """The `rollouts` starts of round `round_` (1-based), drawn by the task's sampler from a seed of (seed, round)
    that is none of the task's shipped start sets' seeds."""
    from realissim.tasks.base import generate_start_set

    shipped = {spec.seed for spec in task.start_sets.values()}
    seed = int(np.random.SeedSequence([config.seed, round_, 62]).generate_state(1)[0])
    while seed in shipped:
        seed += 1
    return generate_start_set(task, config.rollouts, seed)


def _journal(out: Path) -> DaggerReport:
    path = out / JOURNAL
    if not path.exists():
        return DaggerReport()
    data = json.loads(path.read_text())
    return DaggerReport([RoundRecord(**r) for r in data["rounds"]])


def _save_journal(out: Path, report: DaggerReport, about: dict[str, Any]) -> None:
    tmp = out / (JOURNAL + ".tmp")
    tmp.write_text(json.dumps(about | report.as_dict(), indent=2))
    tmp.replace(out / JOURNAL)


def _round_episodes(data: Path, round_: int) -> list[Any]:
    """The relabelled episodes of round `round_` already in the aggregate dataset."""
    from realissim.data.reader import Dataset
    from realissim.data.schema import RELABEL_KEY

    stored = Dataset(data, include_failed=True).all_episodes
    return [e for e in stored if e.extra.get(RELABEL_KEY, {}).get("round") == round_]


def run_dagger(config: DaggerConfig, policy: Path, demonstrations: Path, out: Path) -> DaggerReport:
    """`config.rounds` rounds of expert relabelling (see the module's docstring) starting from the checkpoint
    `policy` (trained on `demonstrations`, the episode store copied into `out`/data at the first round), in run
    directory `out`; resumes what `out` holds. The report's `policy` is the last round's retrained checkpoint."""
    from realissim.data.schema import RELABEL_KEY
    from realissim.eval.offline import batches
    from realissim.learn.checkpoint import load_checkpoint
    from realissim.learn.train import train
    from realissim.tasks import make

    out.mkdir(parents=True, exist_ok=True)
    data = out / DATA
    if not data.exists():
        log.info("copying the demonstrations %s into %s", demonstrations, data)
        copying = data.with_name(DATA + ".copying")
        shutil.copytree(demonstrations, copying, dirs_exist_ok=True)
        for path in (copying, *copying.rglob("*")):  # (a read-only source, e.g. a shared copy: labels go in here)
            path.chmod(path.stat().st_mode | 0o200)
        copying.rename(data)
    task = make(config.task)
    report = _journal(out)
    about = {"config": asdict(config), "first_policy": str(policy),
             "demonstrations": str(demonstrations)}  # fmt: skip
    meta, _ = load_checkpoint(policy)
    train_config = _train_config(meta["config"])
    current = Path(report.policy) if report.policy else policy
    for round_ in range(1, config.rounds + 1):
        record = next((r for r in report.rounds if r.round == round_), None)
        if record is not None and record.checkpoint:
            current = Path(record.checkpoint)
            continue
        if record is None:
            record = RoundRecord(round_, str(current))
            report.rounds.append(record)
        # 1–3: rollouts, labelled and stored, batch by batch (what is stored already is not run again)
        starts = rollout_starts(task, config, round_)
        done = _round_episodes(data, round_)
        record.rollouts, record.rollout_successes = len(done), sum(e.success for e in done)
        record.labelled_frames = sum(int(e.extra[RELABEL_KEY]["labelled_frames"]) for e in done)
        record.frames = sum(e.length for e in done)
        record.decisions = sum(int(e.extra[RELABEL_KEY]["decisions"]) for e in done)
        stored_at = {int(e.extra[RELABEL_KEY].get("start_index", -1)) for e in done}
        remaining = [i for i in range(len(starts)) if i not in stored_at]
        budget = None if config.label_budget is None else config.label_budget - record.labelled_frames
        if remaining and (budget is None or budget > 0):
            jobs = [(config, str(current), round_, idx, str(out / f".part-{round_:02d}-{n:03d}"))
                    for n, idx in enumerate(batches(remaining, config.envs))]  # fmt: skip
            for part in out.glob(f".part-{round_:02d}-*"):
                shutil.rmtree(part, ignore_errors=True)  # (an interrupted run's unfinished batch: run again)
            _label_batches(jobs, data, config, record, round_, lambda: _save_journal(out, report, about))
            log.info("round %d: %d rollouts (%d succeeded), %d of %d frames labelled, %d decisions", round_,
                     record.rollouts, record.rollout_successes, record.labelled_frames, record.frames,
                     record.decisions)  # fmt: skip
        _save_journal(out, report, about)
        # 4: retrain (resumable)
        run_dir = out / f"round_{round_:02d}"
        round_config = replace(train_config, steps=config.train_steps, init_from=str(current),
                               seed=train_config.seed + round_, threads=config.threads, progress=config.progress,
                               lr=config.lr if config.lr is not None else train_config.lr, max_episodes=None,
                               checkpoint_every=min(train_config.checkpoint_every, config.train_steps),
                               warmup_steps=min(train_config.warmup_steps, config.train_steps // 10))  # fmt: skip
        t0 = time.perf_counter()
        result = train(round_config, data, run_dir, resume=(run_dir / "last.pt").exists())
        record.train_wall_s += time.perf_counter() - t0
        record.checkpoint = str(result.checkpoint)
        current = result.checkpoint
        _save_journal(out, report, about)
    return report


def _label_batches(
    jobs: list[tuple[Any, ...]],
    data: Path,
    config: DaggerConfig,
    record: RoundRecord,
    round_: int,
    journal: Callable[[], None],
) -> None:
    """Run the rollout batches `jobs` (`_label_batch`'s arguments) — in `config.workers` processes when more than
    one — and move each finished batch's episodes into the aggregate dataset `data`, updating `record` and the
    journal after each, until all ran or the round's label budget is reached."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from tqdm import tqdm

    from realissim.data.reader import Dataset
    from realissim.data.store import DatasetWriter

    bar = tqdm(total=sum(len(j[3]) for j in jobs), desc=f"dagger round {round_}: rollouts", unit="episode",
               disable=not config.progress)  # fmt: skip

    def take(part: str, stats: dict[str, int]) -> None:
        with DatasetWriter(data, Dataset(data).meta) as writer:
            for index in Dataset(part, include_failed=True).all_episodes:
                writer.move_in(part, index.index)
        shutil.rmtree(part, ignore_errors=True)
        for key in ("rollouts", "rollout_successes", "frames", "labelled_frames", "decisions"):
            setattr(record, key, getattr(record, key) + stats[key])
        record.label_wall_s += stats["wall_s"]
        bar.update(stats["rollouts"])
        bar.set_postfix(labelled=record.labelled_frames, decisions=record.decisions)
        journal()

    def spent() -> bool:
        return config.label_budget is not None and record.labelled_frames >= config.label_budget

    try:
        if config.workers <= 1:
            for job in jobs:
                if spent():
                    break
                take(*_label_batch(*job))
            return
        import multiprocessing

        pending = list(jobs)
        with ProcessPoolExecutor(config.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            running = {pool.submit(_label_batch, *pending.pop(0)): None for _ in range(min(config.workers,
                                                                                            len(pending)))}  # fmt: skip
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    del running[future]
                    take(*future.result())
                    if pending and not spent():
                        running[pool.submit(_label_batch, *pending.pop(0))] = None
    finally:
        bar.close()


def _label_batch(
    config: DaggerConfig, policy: str, round_: int, indices: Sequence[int], part: str
) -> tuple[str, dict[str, Any]]:
    """One batch of a round's rollouts (the round's starts at `indices`), labelled and written to a new part dataset
    at `part` (the aggregate's meta); (part, its counts: rollouts, rollout_successes, frames, labelled_frames,
    decisions, wall_s). Runs in a worker process or in the caller's."""
    from realissim.data.reader import Dataset
    from realissim.data.store import DatasetWriter
    from realissim.envs import BatchEnv, EnvConfig
    from realissim.eval.episode import run_episodes
    from realissim.expert.registry import make_expert
    from realissim.policy.factory import load_policy
    from realissim.tasks import make
    from realissim.util.torch_threads import torch_settings

    t0 = time.perf_counter()
    task = make(config.task)
    starts = rollout_starts(task, config, round_)
    acting = load_policy(policy, "flow", steps=config.steps, seed=config.seed + round_, threads=1)
    acting.check_scene(task.scene)
    waypoints, horizon = _chunk_shape(policy)
    data = Path(part).parent / DATA
    with torch_settings(1), DatasetWriter(part, Dataset(data).meta) as writer:
        about = {"round": round_, "policy": policy, "expert": "task expert", "decide_every": config.decide_every}
        recorder = RelabelRecorder(
            writer, lambda: ExpertLabeller(make_expert(task), config.decide_every), waypoints, horizon, about
        )
        recorder.start_indices = list(indices)
        env = BatchEnv(task, len(indices), EnvConfig().observing(acting.needs), nthread=1)
        results = run_episodes(env, acting, [starts[i] for i in indices], config.max_seconds, [recorder])
    stats = {"rollouts": len(results), "rollout_successes": sum(r.success for r in results),
             "frames": sum(r.frames for r in results), "labelled_frames": recorder.labelled,
             "decisions": recorder.decisions, "wall_s": time.perf_counter() - t0}  # fmt: skip
    return part, stats


def _chunk_shape(checkpoint: str) -> tuple[int, float]:
    """(waypoints m, horizon H s) of the policy in `checkpoint`: the labels' grid."""
    from realissim.learn.checkpoint import load_checkpoint

    meta, _ = load_checkpoint(checkpoint)
    config = _train_config(meta["config"])
    return config.model.waypoints, config.model.horizon


def _train_config(stored: dict[str, Any]) -> Any:
    """The `TrainConfig` a checkpoint's run was trained with (fields added since then at their defaults)."""
    from realissim.learn.config import LEGACY_MODEL_FIELDS, TrainConfig
    from realissim.spec.codec import from_dict

    stored = dict(stored)
    stored["model"] = {**LEGACY_MODEL_FIELDS, **stored["model"]}
    return from_dict(TrainConfig, stored)


def labelled_frames_of(data: Path) -> int:
    """Frames an expert labelled in the relabelled episodes of the dataset at `data`."""
    from realissim.data.reader import Dataset
    from realissim.data.schema import RELABEL_KEY

    stored = Dataset(data, include_failed=True).all_episodes
    return sum(int(e.extra[RELABEL_KEY]["labelled_frames"]) for e in stored if RELABEL_KEY in e.extra)
