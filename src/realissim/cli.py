"""The `realissim` console command: sub-commands built from dataclasses with tyro."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from realissim.assets.mjcf import scene_to_mjcf
from realissim.assets.pusht import PushTConfig, pusht_scene
from realissim.collect import CollectConfig
from realissim.spec.errors import SpecError
from realissim.spec.io import load_scene, save_scene
from realissim.tasks import make
from realissim.twin.physics import PhysicsConfig

if TYPE_CHECKING:
    from realissim.learn.train import TrainConfig


@dataclass
class Demo:
    """The main demo: the closed Real-is-Sim loop on PushT against a surrogate real world (with a reality gap),
    run with visual correction on and off; prints the sync metrics side by side and writes a rerun
    recording (demo.rrd), error plots (errors.png), camera views and a report."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default profile; see `realissim surrogate --write-gap`)."""
    seconds: float = 20.0
    """Episode length, s; an unseen hand pushes the real T by 5 cm at half of it."""
    realtime: bool = False
    """Run on the wall clock (the surrogate paces itself at the frame rate) instead of lock-step."""
    out: Path | None = Path("runs/demo")
    """Output folder (None: write nothing)."""
    camera_size: tuple[int, int] = (160, 90)
    """Real camera image size, px (width, height)."""
    seed: int = 0
    """Seed of the real world's noise."""
    record: bool = True
    """Write the rerun recording (open it with `rerun runs/demo/demo.rrd`)."""
    pusht: PushTConfig = field(default_factory=PushTConfig)
    progress: bool = True
    """Show progress bars."""

    def run(self) -> int:
        if self.realtime:
            from realissim.threads import reserve_core_for_world

            reserve_core_for_world()
        from realissim.loop_demo import LoopDemoConfig, format_table, run_loop_demo
        from realissim.real.surrogate.gap import load_gap
        from realissim.real.surrogate.process import SurrogateError

        try:
            if self.gap is not None:
                load_gap(self.gap)  # fail here, with the field named, rather than in the surrogate's process
            config = LoopDemoConfig(
                seconds=self.seconds,
                gap=self.gap,
                realtime=self.realtime,
                camera_size=self.camera_size,
                seed=self.seed,
                record=self.record,
            )
        except (SpecError, ValueError) as err:
            print(f"invalid option: {err}", file=sys.stderr)
            return 2
        try:
            results = run_loop_demo(config, make("pusht", scene=self.pusht), self.out, self.progress)
        except SurrogateError as err:
            print(f"surrogate failed: {err}", file=sys.stderr)
            return 3
        clock = "real time" if self.realtime else "lock-step"
        title = f"Closed loop on PushT: gap {self.gap or 'default'}, {clock}, {self.seconds:g} s"
        print(format_table(results, title + f", hand push at {self.seconds / 2:g} s"))
        if self.out is not None:
            print(f"outputs in {self.out}/: " + ", ".join(results["outputs"]))
        return 0


@dataclass
class Push:
    """The twin alone (offline, no real world): the PushT twin pushes the T towards its goal; prints a report."""

    seconds: float = 8.0
    """Simulated duration, s."""
    out: Path | None = Path("runs/push")
    """Folder for scene.json, model.xml, states.npz, config.json, report.json, views.png (None: write nothing)."""
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    pusht: PushTConfig = field(default_factory=PushTConfig)
    render_every: int = 4
    """Render the scene's three cameras from the twin every this many frames (0: never); writes views.png."""
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        from realissim.demo import PushDemoConfig, run_push_demo

        cfg = PushDemoConfig(seconds=self.seconds, render_every=self.render_every)
        report = run_push_demo(make("pusht", scene=self.pusht), self.physics, cfg, self.out, self.progress)
        _print_report("PushT twin physics demo", report, self.out)
        return 0


@dataclass
class Scene:
    """Write the PushT preset scene, or check a scene file; optionally export its MuJoCo model."""

    check: Path | None = None
    """Scene JSON to validate (instead of writing the preset)."""
    out: Path | None = None
    """Where to write the preset scene JSON."""
    mjcf: Path | None = None
    """Where to write the generated MJCF of the (checked or preset) scene."""
    pusht: PushTConfig = field(default_factory=PushTConfig)

    def run(self) -> int:
        try:
            scene = load_scene(self.check) if self.check is not None else pusht_scene(self.pusht)
            xml = scene_to_mjcf(scene, PhysicsConfig().mjcf_options())
        except SpecError as err:
            print(f"invalid scene: {err}", file=sys.stderr)
            return 2
        if self.check is not None:
            print(
                f"{self.check}: valid scene {scene.name!r} with {len(scene.objects)} objects, "
                f"{len(scene.cameras)} cameras"
            )
        if self.out is not None:
            save_scene(scene, self.out)
            print(f"wrote {self.out}")
        if self.mjcf is not None:
            self.mjcf.write_text(xml)
            print(f"wrote {self.mjcf}")
        return 0


@dataclass
class SurrogateRun:
    """Run the surrogate real world alone: the follower moves its arm; writes camera views and ground truth."""

    gap: Path | None = None
    """Reality-gap profile JSON (None: the default profile)."""
    write_gap: Path | None = None
    """Write the default reality-gap profile (documented JSON, to edit) here and exit."""
    seconds: float = 6.0
    """Simulated duration, s."""
    camera_size: tuple[int, int] = (480, 270)
    """Rendered image size of every camera, px (width, height)."""
    seed: int = 0
    """Seed of the world's noise and disturbances."""
    out: Path | None = Path("runs/surrogate")
    """Folder for views.png, truth.npz, scene.json, config.json, report.json (None: write nothing)."""
    pusht: PushTConfig = field(default_factory=PushTConfig)
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        from realissim.real.surrogate import GapProfile, SurrogateConfig, SurrogateError, load_gap, save_gap
        from realissim.surrogate_demo import drive_surrogate

        if self.write_gap is not None:
            save_gap(GapProfile(), self.write_gap)
            print(f"wrote the default reality-gap profile to {self.write_gap}")
            return 0
        try:
            if self.gap is not None:
                load_gap(self.gap)  # fail here, with the field named, rather than in the child
            config = SurrogateConfig(gap=self.gap, seed=self.seed, camera_size=self.camera_size)
            report = drive_surrogate(make("pusht", scene=self.pusht), config, self.seconds, self.out, self.progress)
        except SpecError as err:
            print(f"invalid reality-gap profile: {err}", file=sys.stderr)
            return 2
        except SurrogateError as err:
            print(f"surrogate failed: {err}", file=sys.stderr)
            return 3
        _print_report(
            "Surrogate real world (lock-step), the real arm following the twin's scripted push", report, self.out
        )
        return 0


@dataclass
class Collect:
    """Record demonstrations through the twin into an episode store (zarr): the task's expert, offline or online
    over a surrogate real world; a progress bar; running it again on the same dataset appends more episodes.
    Failed episodes are kept, marked failed (excluded downstream by default)."""

    config: Annotated[CollectConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=CollectConfig)

    def run(self) -> int:
        from realissim.collect import CollectError, collect
        from realissim.data.store import DatasetError
        from realissim.real.surrogate.process import SurrogateError

        c = self.config
        if c.policy == "teleop":
            print("teleoperated episodes are recorded in the browser: realissim teleop --out DATASET", file=sys.stderr)
            return 2
        try:
            report = collect(c)
        except (SpecError, ValueError, KeyError) as err:
            print(f"invalid option: {err}", file=sys.stderr)
            return 2
        except DatasetError as err:
            print(f"dataset error: {err}", file=sys.stderr)
            return 3
        except SurrogateError as err:
            print(f"surrogate failed: {err}", file=sys.stderr)
            return 3
        except CollectError as err:
            print(f"collect failed: {err}", file=sys.stderr)
            return 3
        _print_report(f"Collected {c.task} demonstrations ({'online' if c.online else 'offline'})",
                      report.as_dict(), None)  # fmt: skip
        print(f"dataset: {c.out}")
        return 0


@dataclass
class Data:
    """Inspect an episode store: `realissim data info DATASET` prints its summary."""

    action: tyro.conf.Positional[Literal["info"]]
    """What to do."""
    dataset: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DATASET")]
    """The dataset folder."""

    def run(self) -> int:
        from realissim.data.info import describe
        from realissim.data.store import DatasetError

        try:
            print(describe(self.dataset))
        except DatasetError as err:
            print(f"dataset error: {err}", file=sys.stderr)
            return 3
        return 0


@dataclass
class Export:
    """Export an episode store: `realissim export lerobot DATASET OUT [--fps 10] [--cameras wrist,front]` writes
    a LeRobot v3.0 dataset (parquet + mp4 videos rendered from the recorded twin states)."""

    format: tyro.conf.Positional[Literal["lerobot"]]
    """Target format."""
    dataset: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DATASET")]
    """The source dataset (never modified)."""
    out: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="OUT")]
    """The new dataset's folder (must not exist or be empty, unless --overwrite)."""
    fps: int = 10
    """Frame rate of the export (must divide the dataset's)."""
    cameras: str = "front,wrist"
    """Virtual cameras to render as videos, comma-separated (scene cameras and/or wrist; empty: none)."""
    image_size: tuple[int, int] = (96, 96)
    """Video size, px (width, height)."""
    include_failed: bool = False
    """Export failed episodes too."""
    overwrite: bool = False
    """Replace an existing export at OUT."""
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        from realissim.data.lerobot import export_lerobot
        from realissim.data.store import DatasetError

        cameras = tuple(c.strip() for c in self.cameras.split(",") if c.strip())
        try:
            report = export_lerobot(self.dataset, self.out, fps=self.fps, cameras=cameras,
                                    include_failed=self.include_failed, image_size=self.image_size,
                                    overwrite=self.overwrite, progress=self.progress)  # fmt: skip
        except ValueError as err:
            print(f"invalid option: {err}", file=sys.stderr)
            return 2
        except DatasetError as err:
            print(f"export failed: {err}", file=sys.stderr)
            return 3
        _print_report(f"Exported {self.dataset} to LeRobot v3.0", {
            "episodes": report.episodes, "skipped (failed)": report.skipped, "frames": report.frames,
            "fps": report.fps, "cameras": ",".join(report.cameras) or "-", "codec": report.codec or "-",
            "files": len(report.files), "MB": report.bytes / 1e6, "wall_s": report.wall_s,
            "frames_per_s": report.frames_per_s}, None)  # fmt: skip
        print(f"dataset: {report.out}")
        return 0


@dataclass
class Teleop:
    """Browser teleoperation (viser): drag the pusher tip's target on the table; the twin's arm follows by planar
    IK (online, the real arm follows the twin). The page shows the twin beside the real camera views with the
    live sync state; Start / Save / Discard record episodes into an episode store. Binds to loopback by
    default; open the printed URL."""

    out: Path = Path("data/pusht_teleop")
    """The dataset episodes are saved into (created, or appended to)."""
    host: str = "127.0.0.1"
    """Address to bind (loopback by default; 0.0.0.0 exposes the page to the network)."""
    port: int = 8080
    """TCP port (0: any free one)."""
    online: bool = False
    """Over the surrogate real world (the real arm follows; the cameras correct the twin)."""
    gap: Path | None = None
    """Reality-gap profile JSON for --online."""
    seed: int = 0
    """Seed of the episodes' starts (and of the world)."""
    tip_speed: float = 0.25
    """Top speed of the tip towards the dragged target, m/s."""
    record_images: bool = False
    """Online: record the real camera frames too."""

    def run(self) -> int:
        from realissim.teleop import TeleopConfig, run_teleop

        try:
            config = TeleopConfig(out=self.out, host=self.host, port=self.port, online=self.online,
                                  gap=self.gap, seed=self.seed, tip_speed=self.tip_speed,
                                  record_images=self.record_images)  # fmt: skip
        except ValueError as err:
            print(f"invalid option: {err}", file=sys.stderr)
            return 2
        return run_teleop(config)


@dataclass
class Train:
    """Train a flow-matching policy on an episode store's successful episodes: a progress bar with the loss and
    speed, checkpoints every N steps into OUT/checkpoints (OUT/last.pt the newest), OUT/loss.png; `--resume`
    continues a run that was stopped. Deterministic for a given seed and thread count."""

    data: Path = Path("data/pusht_expert")
    """The episode store (`realissim collect`)."""
    obs: Literal["state", "static", "wrist", "real"] = "state"
    """Observation representation: the object's pose, a virtual static or wrist camera image, or a recorded
    real camera frame (online datasets recorded with images only); each with the arm's joints."""
    out: Path = Path("runs/policy")
    """The run directory."""
    resume: bool = False
    """Continue the run in OUT from OUT/last.pt."""
    steps: int = 20_000
    """Optimiser steps in all."""
    batch_size: int = 64
    """Samples per step."""
    lr: float = 1e-3
    """Peak learning rate."""
    actions: Literal["relative", "absolute"] = "absolute"
    """Joint waypoints generated relative to the held q′, or absolute (the paper)."""
    input_noise: float = 0.0
    """Training only: noise (std) on the normalised q and object pose inputs, a regulariser."""
    state_tip: bool = True
    """state: also the pusher tip's position (world, and in the object's frame) as inputs (75 % against 66 % on
    60 demonstrations; `--no-state-tip`: without)."""
    state_hidden: tuple[int, ...] = (256, 256)
    """state: widths of an MLP from the state to extra conditioning features (`--state-hidden` with no widths:
    none, the state itself conditions the network)."""
    channels: tuple[int, ...] = (32, 64, 128)
    """The velocity U-Net's channels per level, finest first (each divisible by 8)."""
    kernel: int = 3
    """The velocity U-Net's temporal kernel size (odd)."""
    image_hidden: tuple[int, ...] = ()
    """Image representations: widths of an MLP fusing the image features and q into extra conditioning
    features (none by default)."""
    wrist_lift: bool = False
    """wrist: also the image keypoints' world positions on the table (rays from the camera, posed by the arm's
    kinematics)."""
    camera: str | None = None
    """Image representations: the camera (None: "wrist" for wrist, the scene's first camera otherwise)."""
    image_size: tuple[int, int] = (96, 96)
    """Image representations: image width and height, px."""
    aux_object: float = 0.0
    """Image representations, training only: weight of an auxiliary loss teaching the image encoder the
    object's pose (from the recorded twin state; unused when acting). 0: off."""
    via_pose: bool = False
    """Image representations: act through the object's pose — the auxiliary head (needs --aux-object > 0)
    estimates it from the image and q, and the state policy's conditioning is built from the estimate
    (teacher-forced in training: the network learns on the recorded pose)."""
    policy_from: Path | None = None
    """With --via-pose: a trained state policy's checkpoint (same dataset) to adopt, frozen; only the image
    encoder and the pose head train."""
    policy_from_any_dataset: bool = False
    """With --policy-from: adopt a state policy trained on another dataset of the same scene too."""
    checkpoint_every: int = 2000
    """Steps between checkpoints."""
    max_episodes: int | None = None
    """Train on the dataset's first N successful episodes only (None: all)."""
    seed: int = 0
    """Seed of the weights, the validation split, the batches and the flow noise."""
    threads: int = 1
    """Torch CPU threads."""
    progress: bool = True
    """Show a progress bar."""

    def config(self) -> TrainConfig:
        from realissim.learn.model import ModelConfig
        from realissim.learn.train import TrainConfig
        from realissim.learn.unet import UNetConfig

        return TrainConfig(
            model=ModelConfig(
                network=UNetConfig(channels=self.channels, kernel=self.kernel),
                obs=self.obs,
                actions=self.actions,
                state_tip=self.state_tip,
                state_hidden=self.state_hidden,
                image_hidden=self.image_hidden,
                wrist_lift=self.wrist_lift,
                input_noise=self.input_noise,
                camera=self.camera,
                image_size=self.image_size,
                aux_object=self.aux_object,
                via_pose=self.via_pose,
            ),
            steps=self.steps,
            batch_size=self.batch_size,
            lr=self.lr,
            checkpoint_every=self.checkpoint_every,
            policy_from=str(self.policy_from) if self.policy_from is not None else None,
            policy_from_any_dataset=self.policy_from_any_dataset,
            max_episodes=self.max_episodes,
            seed=self.seed,
            threads=self.threads,
            progress=self.progress,
        )

    def run(self) -> int:
        from realissim.data.schema import DatasetError
        from realissim.learn.train import train
        from realissim.policy.factory import CheckpointError

        try:
            result = train(self.config(), self.data, self.out, resume=self.resume)
        except (ValueError, FileExistsError) as err:
            print(f"invalid option: {err}", file=sys.stderr)
            return 2
        except (DatasetError, CheckpointError) as err:
            print(f"cannot train: {err}", file=sys.stderr)
            return 3
        tail = result.losses[-100:]
        report = {
            "steps": result.step,
            "final_loss": float(tail.mean()) if len(tail) else float("nan"),
            "validation_loss": float(result.val[-1, 1]) if len(result.val) else float("nan"),
            "wall_min": result.wall_s / 60,
            "checkpoint": str(result.checkpoint),
        }
        _print_report(f"Trained a {self.obs} flow policy", report, self.out)
        return 0


@dataclass
class PolicyCmd:
    """Inspect a policy: `realissim policy info CHECKPOINT` prints what a checkpoint is."""

    action: tyro.conf.Positional[Literal["info"]]
    """What to do."""
    checkpoint: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """A checkpoint file (a run's last.pt or checkpoints/step_*.pt)."""

    def run(self) -> int:
        from realissim.learn.info import describe
        from realissim.policy.factory import CheckpointError

        try:
            print(describe(self.checkpoint))
        except CheckpointError as err:
            print(f"checkpoint error: {err}", file=sys.stderr)
            return 3
        return 0


@dataclass
class EvalOffline:
    """Evaluate trained policies. `realissim eval offline CHECKPOINT` runs a start set in parallel virtual twins
    (BatchEnv), success judged on the task's ground truth with a Wilson 95 % interval, and the policy's own
    progress > 0.9 beside it (agreement: confusion matrix, Cohen's κ); writes OUT/results.json and
    OUT/episodes.csv. `realissim eval sweep RUN` does so for every checkpoint of a training run (default start set
    pusht/select-v1, disjoint from the test set), plots success against step and names the checkpoint it would
    choose; it resumes where it stopped."""

    mode: tyro.conf.Positional[Literal["offline", "online", "sweep"]]
    """offline: one checkpoint in virtual twins; online: one checkpoint through the twin against the surrogate
    real world (correction and follower on, success on its oracle); sweep: every checkpoint of a run, offline."""
    target: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT|RUN")]
    """offline: a flow-policy checkpoint (a run's last.pt or checkpoints/step_*.pt); sweep: a training run."""
    starts: str | None = None
    """The start set (None: pusht/eval-v1 offline, pusht/online-v1 online, pusht/select-v1 for a sweep)."""
    trials: int = 1
    """Online: episodes per start."""
    gap: Path | None = None
    """Online: reality-gap profile JSON (None: the default profile)."""
    realtime: bool = False
    """Online: run the surrogate on the wall clock instead of lock-step."""
    correct_every: int = 1
    """Online: run the visual correction on every n-th frame, holding its wrench between
    (`RuntimeConfig.correct_every`: 2 runs the episode ~1.8× faster; on the contact-rich scenario its sync error is
    ~10 % (median) and ~25 % (p95) above every frame's since the held spring is scaled by 1/n², docs/decisions.md,
    "Held wrenches")."""
    calibrate_at: Literal["goal", "start"] = "goal"
    """online: where the twin's appearance is fitted to the cameras: with the T on its goal (exact where success
    is judged) or at the first start (`EnvConfig.calibrate_at`, docs/decisions.md)."""
    max_held_s: float | None = 10.0
    """online: abandon an episode once the desync detector has held the arm this long without a break, simulated
    s (the twin lost an object and could not find it; `EnvConfig.max_held_s`); None: never."""
    early_search: float | None = None
    """online: search the objects while in sync once the desync detector's evidence has come this far towards
    firing, and put a drifting twin object back before it is lost (`RuntimeConfig.early_search`; None: the
    runtime's default, 0: off; 0.5 searches on half the evidence)."""
    early_hold: int | None = None
    """online: frames the arms hold after an early placement, as after an alarm but without it
    (`RuntimeConfig.early_hold`; None: the runtime's default, 0)."""
    no_alarm_check: bool = False
    """online: let the desync detector fire on its evidence alone, without the search's check of each alarm
    (`RuntimeConfig.alarm_check` None)."""
    limit: int | None = None
    """Only its first N starts."""
    envs: int = 20
    """Parallel environments."""
    max_seconds: float = 60.0
    """Time limit per episode, simulated s."""
    steps: int | None = None
    """Euler steps K (None: the checkpoint's)."""
    replan_every: float | None = None
    """Ask for a new chunk after this many seconds (None: when the chunk is used up, as the paper)."""
    sleep: bool = True
    """Offline: a resting object sleeps until the pusher touches it (`EnvConfig.sleep`; ~1.35× the speed)."""
    seed: int = 0
    """Seed of the policy's sampling noise."""
    threads: int = 1
    """Torch threads."""
    workers: int = 1
    """offline, sweep --offline: batches run at once, each in a thread with its own policy copy and
    single-threaded twins (one batch's physics runs while another's policy samples); the same episodes at any
    count."""
    online_workers: int = 1
    """online, sweep --online: processes that each run episodes with their own surrogate (a lock-step pair keeps
    about one core busy: 2 on a 2-core machine ran 1.6× the frames of one); the same episodes at any count,
    except that each fresh surrogate calibrates the twin at its own first start."""
    out: Path | None = None
    """Where to write the reports (offline: None prints only; sweep: None is RUN/sweep/<start set>)."""
    offline: bool = True
    """sweep: evaluate every checkpoint offline (--starts, default pusht/select-v1)."""
    online: bool = False
    """sweep: also evaluate every checkpoint online (--online-starts × --trials; --gap, --realtime apply) and
    compare the two: Pearson, Spearman, MMRV with bootstrap intervals, and what offline's choice scores online."""
    online_starts: str = "pusht/online-v1"
    """sweep --online: the online start set."""
    online_limit: int | None = None
    """sweep --online: only its first N starts."""
    ray: str | None = None
    """offline, sweep: shard the batches (and checkpoints) across a Ray cluster — "local" starts one on this
    machine, "auto" joins the cluster this machine belongs to, "ray://HOST:PORT" a remote one (the optional
    `ray` extra); the same per-episode results as a local run."""

    def run(self) -> int:
        from realissim.policy.factory import CheckpointError

        try:
            if self.ray is not None and self.mode == "online":
                raise ValueError("--ray: online evaluation runs locally (one surrogate real world at a time)")
            return {"offline": self._offline, "online": self._online, "sweep": self._sweep}[self.mode]()
        except (KeyError, ValueError) as err:
            print(f"invalid option: {err}", file=sys.stderr)
            return 2
        except RuntimeError as err:
            if self.ray is None:
                raise
            print(f"ray: {err}", file=sys.stderr)
            return 2
        except CheckpointError as err:
            print(f"checkpoint error: {err}", file=sys.stderr)
            return 3

    def _online(self) -> int:
        from realissim.eval.online import evaluate_online, online_env_config, write_online_report
        from realissim.policy.factory import CheckpointPolicy, load_policy
        from realissim.real.surrogate import SurrogateConfig
        from realissim.tasks import start_set

        name = self.starts or "pusht/online-v1"
        starts = start_set(name)[: self.limit]
        policy = load_policy(str(self.target), steps=self.steps, seed=self.seed, threads=self.threads)
        task = make(name.partition("/")[0])
        policy.check_scene(task.scene)
        env = online_env_config(self.correct_every, self.replan_every, self.calibrate_at, self.max_held_s,
                                self.early_search, self.early_hold, not self.no_alarm_check)  # fmt: skip
        config = env.observing(policy.needs)
        world = SurrogateConfig(gap=self.gap, seed=self.seed, camera_size=(160, 90),
                                mode="realtime" if self.realtime else "lockstep")  # fmt: skip
        about = {"checkpoint": str(self.target), "starts": name, "trials": self.trials,
                 "gap": str(self.gap) if self.gap else "default", "realtime": self.realtime,
                 "correct_every": self.correct_every, "calibrate_at": self.calibrate_at,
                 "max_held_s": self.max_held_s}  # fmt: skip
        if self.early_search is not None:  # (absent otherwise: journals written before the option still match)
            about["early_search"] = self.early_search
        if self.early_hold is not None:
            about["early_hold"] = self.early_hold
        if self.no_alarm_check:
            about["alarm_check"] = False
        # With --out, every episode goes to a journal as it ends: the same command again resumes, and with a
        # larger --limit it runs only the further starts.
        key = about | {"max_seconds": self.max_seconds, "steps": self.steps, "seed": self.seed,
                       "replan_every": self.replan_every}  # fmt: skip
        journal = self.out / "episodes.jsonl" if self.out is not None else None
        acting = policy if self.online_workers == 1 else CheckpointPolicy(str(self.target), self.steps, self.seed)
        report = evaluate_online(task, acting, starts, self.trials, self.max_seconds, config, world,
                                 journal=journal, journal_key=key, workers=self.online_workers)  # fmt: skip
        summary = report.summary()
        if self.out is not None:
            write_online_report(report, self.out, about)
        _print_report(f"Online evaluation of {self.target} on {name}", summary, self.out)
        return 0

    def _sweep(self) -> int:
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
        offline_rows = online_rows = None
        if self.offline:
            settings = SweepSettings(
                self.starts or "pusht/select-v1", self.limit, self.envs, self.max_seconds, self.replan_every,
                self.steps, self.seed,
            )  # fmt: skip
            offline_rows, best, out = sweep_offline(self.target, settings, self.out, self.threads, self.ray,
                                                    self.workers)  # fmt: skip
            _print_sweep(f"Checkpoint sweep of {self.target} on {settings.starts} (offline)", offline_rows, best)
            print(f"chosen: {best.checkpoint}")
            print(f"outputs in {out}/ (sweep.json, success.png, one folder per checkpoint)")
        if self.online:
            online = OnlineSweepSettings(
                self.online_starts, self.online_limit, self.trials, self.max_seconds,
                str(self.gap) if self.gap else None, self.realtime, self.steps, self.seed, self.correct_every,
                self.calibrate_at,
            )  # fmt: skip
            online_rows, out = sweep_online(self.target, online, None, self.threads, self.online_workers)
            _print_sweep(f"Checkpoint sweep of {self.target} on {online.starts} (online)", online_rows,
                         choose(online_rows))  # fmt: skip
            print(f"outputs in {out}/")
        if offline_rows is not None and online_rows is not None:
            labels = (self.starts or "pusht/select-v1", self.online_starts)
            both = compare_sweeps(offline_rows, online_rows, Path(self.target) / "sweep", labels)
            print(f"Offline against online over {both['checkpoints']} checkpoints")
            for score in ("success", "coverage"):
                for name in ("pearson", "spearman", "mmrv"):
                    key = name if score == "success" else f"coverage_{name}"
                    if key in both:
                        v, lo, hi = both[key]  # type: ignore[misc]
                        print(f"  {score:<8} {name:<9} {v:.3f}  [{lo:.3f}, {hi:.3f}] (bootstrap 95 %)")
            on = both["chosen_online"]
            print(f"  offline chooses step {both['chosen_step']}: online {on['successes']}/{on['episodes']} "
                  f"(the best online: step {both['best_online_step']})")  # fmt: skip
            print(f"outputs in {Path(self.target) / 'sweep'}/ (sweep_both.json, success_both.png)")
        return 0

    def _offline(self) -> int:
        from realissim.envs import EnvConfig
        from realissim.eval.offline import evaluate_offline, write_report
        from realissim.policy.factory import CheckpointPolicy, load_policy
        from realissim.tasks import start_set

        name = self.starts or "pusht/eval-v1"
        starts = start_set(name)[: self.limit]
        policy = load_policy(str(self.target), steps=self.steps, seed=self.seed, threads=self.threads)
        if policy.needs.real_images:
            raise ValueError("a policy trained on real camera frames runs online only: realissim eval online")
        task = make(name.partition("/")[0])
        policy.check_scene(task.scene)
        config = EnvConfig(replan_every=self.replan_every, sleep=self.sleep).observing(policy.needs)
        if self.ray is not None:
            from realissim.eval.distributed import evaluate_offline_ray

            factory = CheckpointPolicy(str(self.target), self.steps, self.seed, self.threads)
            report = evaluate_offline_ray(task.name, factory, starts, self.envs, self.max_seconds, config, self.ray)
        else:
            report = evaluate_offline(task, policy, starts, self.envs, self.max_seconds, config, workers=self.workers)
        summary = report.summary()
        if self.out is not None:
            about = {
                "checkpoint": str(self.target),
                "starts": name,
                "replan_every": self.replan_every,
                "sleep": self.sleep,
            }
            write_report(report, self.out, about)
        _print_report(f"Offline evaluation of {self.target} on {name}", summary, self.out)
        return 0


def _print_sweep(title: str, rows: list, best: object) -> None:
    """A sweep's rows as a table, the chosen one marked."""
    print(title)
    print(f"  {'step':>8}  {'success':>8}  {'95 % CI':>13}  {'progress>0.9':>12}  {'coverage':>8}")
    for r in rows:
        mark = "  <- chosen" if r is best else ""
        print(f"  {r.step:>8}  {r.successes:>3}/{r.episodes:<4}  {100 * r.success_ci95[0]:5.1f}–"
              f"{100 * r.success_ci95[1]:5.1f} %  {100 * r.progress_success:11.0f}%  "
              f"{r.mean_final_coverage:8.3f}{mark}")  # fmt: skip


def _print_report(title: str, report: dict, out: Path | None) -> None:
    """A command's report as aligned `key  value` lines under a title, and where its outputs went."""
    width = max(len(k) for k in report)
    print(title)
    for key, value in report.items():
        print(f"  {key:<{width}}  {value:.4g}" if isinstance(value, float) else f"  {key:<{width}}  {value}")
    if out is not None:
        print(f"outputs in {out}/")


@dataclass
class Report:
    """Build one self-contained HTML page (`DIR/report.html`, figures embedded) from a report folder written by
    `realissim eval offline|online|sweep --out DIR`."""

    folder: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DIR")]
    """The report folder."""
    title: str | None = None
    """Page title (None: the folder's name)."""

    def run(self) -> int:
        from realissim.eval.report import build_html

        try:
            path = build_html(self.folder, self.title)
        except ValueError as err:
            print(f"invalid report folder: {err}", file=sys.stderr)
            return 2
        print(f"wrote {path}")
        return 0


Commands = (
    Annotated[Demo, tyro.conf.subcommand("demo")]
    | Annotated[Push, tyro.conf.subcommand("push")]
    | Annotated[Scene, tyro.conf.subcommand("scene")]
    | Annotated[SurrogateRun, tyro.conf.subcommand("surrogate")]
    | Annotated[Collect, tyro.conf.subcommand("collect")]
    | Annotated[Data, tyro.conf.subcommand("data")]
    | Annotated[Export, tyro.conf.subcommand("export")]
    | Annotated[Teleop, tyro.conf.subcommand("teleop")]
    | Annotated[Train, tyro.conf.subcommand("train")]
    | Annotated[PolicyCmd, tyro.conf.subcommand("policy")]
    | Annotated[EvalOffline, tyro.conf.subcommand("eval")]
    | Annotated[Report, tyro.conf.subcommand("report")]
)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `realissim` command."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    command = tyro.cli(
        Commands,  # type: ignore[arg-type]
        args=argv,
        description="realissim: the Real-is-Sim digital twin toolkit.",
        config=(tyro.conf.OmitSubcommandPrefixes,),
    )
    return command.run()


if __name__ == "__main__":
    sys.exit(main())
