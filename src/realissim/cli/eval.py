"""`realissim eval offline|online|sweep`: trained policies evaluated in parallel twins, against the surrogate
real world, or checkpoint by checkpoint (`eval.offline`, `eval.online`, `eval.sweep`). Each subcommand has only
its own flags; what they share is embedded once (`Acting`, `OnlineLoop`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from realissim.cli.common import FAILED, INVALID, fail, print_report
from realissim.real.surrogate.process import CAMERA_SIZE

if TYPE_CHECKING:
    from realissim.tasks import Task


@dataclass(frozen=True)
class Acting:
    """The task, how a checkpoint's policy acts, and for how long."""

    task: str = "pusht"
    """The task (registry name): its start sets (unless --starts names one) and its time limit."""
    steps: int | None = None
    """Sampling steps K of an iterative policy (flow: Euler steps; None: the checkpoint's)."""
    seed: int = 0
    """Seed of the policy's sampling noise (online: of the surrogate's noise too)."""
    threads: int = 1
    """Torch threads."""
    replan_every: float | None = None
    """Ask for a new chunk after this many seconds (None: when the chunk is used up, as the paper)."""
    max_seconds: float | None = None
    """Time limit per episode, simulated s (None: the task's)."""
    kind: str = "flow"
    """The policy kind: its loader in the `realissim.policies` entry points, or "module:attribute"."""

    def limit(self, task: Task) -> float:
        """The time limit of an episode of `task`, s: `max_seconds`, or the task's."""
        return task.max_seconds if self.max_seconds is None else self.max_seconds


@dataclass(frozen=True)
class OnlineLoop:
    """The surrogate real world and the loop through the twin online (correction and follower on)."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default profile)."""
    realtime: bool = False
    """Run the surrogate on the wall clock instead of lock-step (the correction then runs beside the loop, in its
    own thread: `RuntimeConfig.correct_beside`); one core is left to each world's process."""

    def prepare(self) -> None:
        """Before anything imports numba: in real time, leave one core to the world (`reserve_core_for_world`)."""
        if self.realtime:
            from realissim.util.threads import reserve_core_for_world

            reserve_core_for_world()

    correct_every: int = 1
    """Run the visual correction on every n-th frame, holding its wrench between (`RuntimeConfig.correct_every`:
    2 runs the episode ~1.8× faster for a sync error ~10 % (median) and ~25 % (p95) above every frame's on the
    contact-rich scenario; docs/decisions.md, "Held wrenches")."""
    calibrate_at: Literal["goal", "start"] = "goal"
    """Where the twin's appearance is fitted to the cameras: with the T on its goal (exact where success is
    judged) or at the first start (`EnvConfig.calibrate_at`, docs/decisions.md)."""
    trials: int = 1
    """Episodes per start."""


def _errors(run: object) -> int:
    """`run()`'s exit code, with the errors evaluation raises printed and mapped to exit codes."""
    from realissim.policy.factory import CheckpointError

    try:
        return run()  # type: ignore[operator]
    except (KeyError, ValueError) as err:
        return fail("invalid option", err, INVALID)
    except CheckpointError as err:
        return fail("checkpoint error", err, FAILED)


def _print_sweep(title: str, rows: list, best: object) -> None:
    """A sweep's rows as a table, the chosen one marked."""
    print(title)
    print(f"  {'step':>8}  {'success':>8}  {'95 % CI':>13}  {'progress>0.9':>12}  {'coverage':>8}")
    for r in rows:
        mark = "  <- chosen" if r is best else ""
        print(f"  {r.step:>8}  {r.successes:>3}/{r.episodes:<4}  {100 * r.success_ci95[0]:5.1f}–"
              f"{100 * r.success_ci95[1]:5.1f} %  {100 * r.progress_success:11.0f}%  "
              f"{r.mean_final_coverage:8.3f}{mark}")  # fmt: skip


@dataclass
class Offline:
    """`realissim eval offline CHECKPOINT`: a start set in parallel virtual twins (BatchEnv), success judged on the
    task's ground truth with a Wilson 95 % interval, and the policy's own progress > 0.9 beside it (agreement:
    confusion matrix, Cohen's κ); writes OUT/results.json and OUT/episodes.csv."""

    target: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """A checkpoint (a run's last.pt or checkpoints/step_*.pt)."""
    starts: str | None = None
    """The start set: a shipped one ("<task>/<version>"; None: the task's test set, e.g. pusht/eval-v1) or a start-set
    file in the shipped format (a miner's or your own, e.g. mined.json)."""
    limit: int | None = None
    """Only its first N starts."""
    envs: int = 20
    """Parallel environments in a batch."""
    workers: int = 1
    """Batches run at once, each in a thread with its own policy copy and single-threaded twins (one batch's
    physics runs while another's policy samples); the same episodes at any count."""
    sleep: bool = True
    """A resting object sleeps until the pusher touches it (`EnvConfig.sleep`; ~1.35× the speed)."""
    ray: str | None = None
    """Shard the batches across a Ray cluster — "local" starts one on this machine, "auto" joins the cluster this
    machine belongs to, "ray://HOST:PORT" a remote one (the optional `ray` extra); the same per-episode results
    as a local run."""
    out: Path | None = None
    """Where to write the report (None: print only)."""
    acting: Annotated[Acting, tyro.conf.OmitArgPrefixes] = field(default_factory=Acting)

    def run(self) -> int:
        return _errors(self._run)

    def _run(self) -> int:
        from realissim.envs import EnvConfig
        from realissim.eval.offline import evaluate_offline, write_report
        from realissim.policy.factory import CheckpointPolicy
        from realissim.tasks import make, start_set

        a = self.acting
        name = self.starts or make(a.task).start_set_name("test")
        starts = start_set(name, a.task)[: self.limit]
        factory = CheckpointPolicy(str(self.target), a.steps, a.seed, a.threads, a.kind)
        policy = factory.load()
        if policy.needs.real_images:
            raise ValueError("a policy trained on real camera frames runs online only: realissim eval online")
        task = make(a.task)  # (`start_set` checked that the set is this task's)
        max_seconds = a.limit(task)
        policy.check_scene(task.scene)
        config = EnvConfig(replan_every=a.replan_every, sleep=self.sleep).observing(policy.needs)
        if self.ray is not None:
            from realissim.eval.distributed import evaluate_offline_ray

            try:
                report = evaluate_offline_ray(task.name, factory, starts, self.envs, max_seconds, config, self.ray)
            except RuntimeError as err:
                return fail("ray", err, INVALID)
        else:
            report = evaluate_offline(task, policy, starts, self.envs, max_seconds, config, workers=self.workers)
        if self.out is not None:
            about = {"checkpoint": str(self.target), "starts": name, "replan_every": a.replan_every,
                     "sleep": self.sleep}  # fmt: skip
            write_report(report, self.out, about)
        print_report(f"Offline evaluation of {self.target} on {name}", report.summary(), self.out)
        return 0


@dataclass
class Online:
    """`realissim eval online CHECKPOINT`: a start set through the twin against the surrogate real world
    (correction and follower on), success judged on the world's oracle; with --out every episode is journaled as
    it ends, so the same command resumes and a larger --limit runs only the further starts."""

    target: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """A checkpoint (a run's last.pt or checkpoints/step_*.pt)."""
    starts: str | None = None
    """The start set: a shipped one ("<task>/<version>"; None: the task's online set, e.g. pusht/online-v1) or a
    start-set file in the shipped format."""
    limit: int | None = None
    """Only its first N starts."""
    workers: int = 1
    """Processes that each run episodes with their own surrogate (a lock-step pair keeps about one core busy: 2
    on a 2-core machine ran 1.6× the frames of one); the same episodes at any count, except that each fresh
    surrogate calibrates the twin at its own first start."""
    max_held_s: float | None = 10.0
    """Abandon an episode once the desync detector has held the arm this long without a break, simulated s (the
    twin lost an object and could not find it; `EnvConfig.max_held_s`); None: never."""
    early_search: float | None = None
    """Search the objects while in sync once the desync detector's evidence has come this far towards firing, and
    put a drifting twin object back before it is lost (`SupervisionConfig.early_search`; None: the runtime's
    default, 0: off; 0.5 searches on half the evidence)."""
    early_hold: int | None = None
    """Frames the arms hold after an early placement, as after an alarm but without it
    (`SupervisionConfig.early_hold`; None: the runtime's default, 0)."""
    no_alarm_check: bool = False
    """Let the desync detector fire on its evidence alone, without the search's check of each alarm
    (`SupervisionConfig.alarm_check` None)."""
    out: Path | None = None
    """Where to write the report and the episode journal (None: print only, no resume)."""
    acting: Annotated[Acting, tyro.conf.OmitArgPrefixes] = field(default_factory=Acting)
    loop: Annotated[OnlineLoop, tyro.conf.OmitArgPrefixes] = field(default_factory=OnlineLoop)

    def run(self) -> int:
        return _errors(self._run)

    def _run(self) -> int:
        self.loop.prepare()
        from realissim.eval.online import evaluate_online, online_env_config, write_online_report
        from realissim.policy.factory import CheckpointPolicy
        from realissim.real.surrogate import SurrogateConfig
        from realissim.tasks import make, start_set

        a, w = self.acting, self.loop
        name = self.starts or make(a.task).start_set_name("online")
        starts = start_set(name, a.task)[: self.limit]
        factory = CheckpointPolicy(str(self.target), a.steps, a.seed, a.threads, a.kind)
        policy = factory.load()
        task = make(a.task)  # (`start_set` checked that the set is this task's)
        max_seconds = a.limit(task)
        policy.check_scene(task.scene)
        env = online_env_config(w.correct_every, a.replan_every, w.calibrate_at, self.max_held_s,
                                self.early_search, self.early_hold, not self.no_alarm_check)  # fmt: skip
        config = env.observing(policy.needs)
        world = SurrogateConfig(gap=w.gap, seed=a.seed, camera_size=CAMERA_SIZE,
                                mode="realtime" if w.realtime else "lockstep")  # fmt: skip
        about = {"checkpoint": str(self.target), "starts": name, "trials": w.trials,
                 "gap": str(w.gap) if w.gap else "default", "realtime": w.realtime,
                 "correct_every": w.correct_every, "calibrate_at": w.calibrate_at,
                 "max_held_s": self.max_held_s}  # fmt: skip
        if self.early_search is not None:  # (absent otherwise: journals written before the option still match)
            about["early_search"] = self.early_search
        if self.early_hold is not None:
            about["early_hold"] = self.early_hold
        if self.no_alarm_check:
            about["alarm_check"] = False
        key = about | {"max_seconds": max_seconds, "steps": a.steps, "seed": a.seed,
                       "replan_every": a.replan_every}  # fmt: skip
        journal = self.out / "episodes.jsonl" if self.out is not None else None
        acting = policy if self.workers == 1 else CheckpointPolicy(str(self.target), a.steps, a.seed, kind=a.kind)
        report = evaluate_online(task, acting, starts, w.trials, max_seconds, config, world,
                                 journal=journal, journal_key=key, workers=self.workers)  # fmt: skip
        if self.out is not None:
            write_online_report(report, self.out, about)
        print_report(f"Online evaluation of {self.target} on {name}", report.summary(), self.out)
        return 0


@dataclass
class Sweep:
    """`realissim eval sweep RUN`: every checkpoint of a training run offline (default start set pusht/select-v1,
    disjoint from the test set), success against step, and the checkpoint it would choose; with --online also
    against the surrogate, and the two compared (Pearson, Spearman, MMRV with bootstrap intervals, and what
    offline's choice scores online). Resumes where it stopped."""

    target: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="RUN")]
    """A training run's folder (its checkpoints/step_*.pt)."""
    starts: str | None = None
    """The offline start set, shipped or a start-set file (None: the task's selection set, e.g. pusht/select-v1,
    disjoint from its test set)."""
    limit: int | None = None
    """Only its first N starts."""
    envs: int = 20
    """Parallel environments in a batch."""
    workers: int = 1
    """Offline batches run at once (threads; see `eval offline --workers`)."""
    ray: str | None = None
    """Shard every (checkpoint, batch) pair across a Ray cluster ("local", "auto", "ray://HOST:PORT")."""
    out: Path | None = None
    """Where the offline sweep's reports go (None: RUN/sweep/<start set>)."""
    offline: bool = True
    """Evaluate every checkpoint offline."""
    online: bool = False
    """Also evaluate every checkpoint online (--online-starts × --trials; --gap, --realtime apply) and compare."""
    online_starts: str | None = None
    """The online start set, shipped or a start-set file (None: the task's online set)."""
    online_limit: int | None = None
    """Only its first N starts."""
    online_workers: int = 1
    """Online: processes, each with its own surrogate (see `eval online --workers`)."""
    acting: Annotated[Acting, tyro.conf.OmitArgPrefixes] = field(default_factory=Acting)
    loop: Annotated[OnlineLoop, tyro.conf.OmitArgPrefixes] = field(default_factory=OnlineLoop)

    def run(self) -> int:
        return _errors(self._run)

    def _run(self) -> int:
        if self.online:
            self.loop.prepare()
        from realissim.eval.sweep import (
            OnlineSweepSettings,
            SweepSettings,
            choose,
            compare_sweeps,
            sweep_offline,
            sweep_online,
        )

        if not (self.offline or self.online):
            raise ValueError("sweep: nothing to do (--no-offline without --online)")
        from realissim.tasks import make

        a, w = self.acting, self.loop
        task = make(a.task)
        offline_starts = self.starts or task.start_set_name("select")
        online_starts = self.online_starts or task.start_set_name("online")
        offline_rows = online_rows = None
        if self.offline:
            settings = SweepSettings(offline_starts, self.limit, self.envs, a.max_seconds, a.replan_every, a.steps,
                                     a.seed)  # fmt: skip
            try:
                offline_rows, best, out = sweep_offline(self.target, settings, self.out, a.threads, self.ray,
                                                        self.workers, a.kind)  # fmt: skip
            except RuntimeError as err:
                if self.ray is None:
                    raise
                return fail("ray", err, INVALID)
            _print_sweep(f"Checkpoint sweep of {self.target} on {settings.starts} (offline)", offline_rows, best)
            print(f"chosen: {best.checkpoint}")
            print(f"outputs in {out}/ (sweep.json, success.png, one folder per checkpoint)")
        if self.online:
            online = OnlineSweepSettings(
                online_starts, self.online_limit, w.trials, a.max_seconds, str(w.gap) if w.gap else None,
                w.realtime, a.steps, a.seed, w.correct_every, w.calibrate_at,
            )  # fmt: skip
            online_rows, out = sweep_online(self.target, online, None, a.threads, self.online_workers, a.kind)
            _print_sweep(f"Checkpoint sweep of {self.target} on {online.starts} (online)", online_rows,
                         choose(online_rows))  # fmt: skip
            print(f"outputs in {out}/")
        if offline_rows is not None and online_rows is not None:
            both = compare_sweeps(offline_rows, online_rows, Path(self.target) / "sweep",
                                  (offline_starts, online_starts))  # fmt: skip
            _print_comparison(both)
            print(f"outputs in {Path(self.target) / 'sweep'}/ (sweep_both.json, success_both.png)")
        return 0


def _print_comparison(both: dict) -> None:
    """Offline against online over the checkpoints both evaluated."""
    print(f"Offline against online over {both['checkpoints']} checkpoints")
    for score in ("success", "coverage"):
        for name in ("pearson", "spearman", "mmrv"):
            key = name if score == "success" else f"coverage_{name}"
            if key in both:
                v, lo, hi = both[key]
                print(f"  {score:<8} {name:<9} {v:.3f}  [{lo:.3f}, {hi:.3f}] (bootstrap 95 %)")
    on = both["chosen_online"]
    print(f"  offline chooses step {both['chosen_step']}: online {on['successes']}/{on['episodes']} "
          f"(the best online: step {both['best_online_step']})")  # fmt: skip


Eval = (
    Annotated[Offline, tyro.conf.subcommand("offline")]
    | Annotated[Online, tyro.conf.subcommand("online")]
    | Annotated[Sweep, tyro.conf.subcommand("sweep")]
)
"""`realissim eval`'s three subcommands."""

EVAL_HELP = (
    "Evaluate trained policies: `eval offline CHECKPOINT` in parallel virtual twins, `eval online CHECKPOINT` "
    "against the surrogate real world, `eval sweep RUN` every checkpoint of a run (and names the one to use)."
)
