"""How far is the twin's T from the real one when nothing moves? The settled (static) error of the visual
correction over a set of T poses: the goal (where a policy ends and where the task's 0.95 coverage asks for a
few millimetres) and poses drawn by the task's sampler.

Online, lock-step, one surrogate: the twin is calibrated at the first pose only (as online evaluation does),
then for every pose the twin and the world are reset to it with the arm at home and held there while the
correction runs for `--seconds`; the error is the twin's T against the oracle (evaluation only), its median
over the last `--window` s. A twin that sits a few millimetres off where a policy stops reads success where
the real T has none, so this bias is what online success needs small.

    python experiments/static_bias.py [--gap FILE] [--poses 8] [--seconds 2] [--ideal-cameras] [--json out.json]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from realissim.assets.appearance import AppearanceConfig
from realissim.envs.env import Env, EnvConfig
from realissim.estimate.color_fit import ColorFitConfig
from realissim.estimate.correction import CorrectionConfig
from realissim.eval.episode import run_episode
from realissim.eval.sync.scenario import SyncObserver
from realissim.geometry import quat_yaw, yaw_quat
from realissim.policy.base import ActionChunk, Observation
from realissim.real.surrogate import Surrogate, SurrogateConfig, load_gap, save_gap
from realissim.real.surrogate.gap import DEFAULT_GAP_PATH
from realissim.runtime import CalibrationConfig, RuntimeConfig, ViewsConfig
from realissim.spec.state import StartState
from realissim.tasks import Task, make

log = logging.getLogger("static_bias")


class _Hold:
    """Holds the arm at its current joints."""

    def reset(self) -> None:
        pass

    def act(self, observation: Observation) -> ActionChunk:
        q = np.asarray(observation.q, dtype=np.float64)
        return ActionChunk(np.repeat(q[None], 32, axis=0), np.zeros(32), 1.0)


NEAR_GOAL = ((0.02, 0.0, 0.1), (-0.03, 0.02, -0.2), (0.0, -0.04, 0.35), (0.05, 0.03, -0.5))
"""Poses around the goal, (dx, dy, dyaw) m, m, rad: where a policy pushes the T at the end of an episode."""


def poses(task: Task, n: int, seed: int) -> list[tuple[str, StartState]]:
    """n − 1 starts drawn by the task's sampler (seed `seed`), then poses around the goal (`NEAR_GOAL`), then the
    goal itself, each named, the arm at home. Calibration happens at the first (or at the goal, with
    `--calibrate-at goal`), as in online evaluation, where the T reaches the goal long after."""
    rng = np.random.default_rng(seed)
    out = [(f"sampled {i}", task.sample_start(rng)) for i in range(n - 1)]
    goal = next(g.pose for g in task.scene.goals)
    home = np.asarray(task.scene.robot.home)
    for dx, dy, dyaw in (*NEAR_GOAL, (0.0, 0.0, 0.0)):
        pos = np.asarray(goal.pos) + np.array([dx, dy, 0.0])
        quat = yaw_quat(float(quat_yaw(np.asarray(goal.quat))) + dyaw)
        name = "goal" if dx == dy == dyaw == 0 else f"goal {100 * dx:+.0f},{100 * dy:+.0f} cm {np.degrees(dyaw):+.0f}°"
        out.append((name, StartState.from_arrays(pos[None], np.asarray(quat)[None], home)))
    return out


@dataclass
class Args:
    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    poses: int = 8
    """This many − 1 sampled poses, then the poses around the goal and the goal."""
    seed: int = 100
    """Seed of the sampled poses."""
    seconds: float = 2.0
    """Settling time per pose, s."""
    window: float = 0.5
    """The error is the median over the last this many s."""
    ideal_cameras: bool = False
    """Zero the gap's camera calibration errors (rotation, translation, focal scale, principal point)."""
    pixel_samples: int | None = None
    """Set every real camera's `CameraGap.pixel_samples` (None: the profile's)."""
    refine_cameras: bool = True
    """Calibration refines the cameras photometrically where the board does not calibrate them."""
    board: bool = True
    """Calibrate the cameras from the surrogate's dot board (`RuntimeConfig.board_calibration`)."""
    smooth: float = 0.0
    """`ColorFitConfig.smooth`: the smoothness penalty on the objects' fitted colours."""
    blur: float = 0.0
    """`CorrectionConfig.blur`: σ px of the blur on both images before the correction's loss."""
    fill_unseen: bool = False
    """`ColorFitConfig.fill_unseen`: Gaussians no camera sees at calibration take their seen neighbours' colours."""
    eps2d: float | None = None
    """`RuntimeConfig.eps2d`: the renderer's low-pass in the twin's views, px² (None: its default)."""
    object_spacing: float | None = None
    """The twin's Gaussian spacing on objects, m (`AppearanceConfig.object_spacing`; None: the default)."""
    calibrate_at: str = "start"
    """Where the twin calibrates: "start" (the first pose) or "goal" (`EnvConfig.calibrate_at`)."""
    calibrate: str = "first_reset"
    """When the twin calibrates: "first_reset" (as online evaluation does) or "every_reset"."""
    json: Path | None = None


def main(args: Args) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    task = make("pusht")
    gap = load_gap(args.gap or DEFAULT_GAP_PATH)
    if args.ideal_cameras:
        zero = {"rotation_error": (0.0, 0.0, 0.0), "translation_error": (0.0, 0.0, 0.0), "focal_scale": 1.0,
                "principal_offset": (0.0, 0.0)}  # fmt: skip
        cams = tuple(dataclasses.replace(c, **zero) for c in gap.cameras)  # type: ignore[arg-type]
        gap = dataclasses.replace(gap, cameras=cams)
    if args.pixel_samples is not None:
        cams = tuple(dataclasses.replace(c, pixel_samples=args.pixel_samples) for c in gap.cameras)
        gap = dataclasses.replace(gap, cameras=cams)
    runtime = RuntimeConfig(
        calibration=CalibrationConfig(
            refine_cameras=args.refine_cameras,
            use_board=args.board,
            color_fit=ColorFitConfig(smooth=args.smooth, fill_unseen=args.fill_unseen),
        ),
        correction=CorrectionConfig(blur=args.blur),
        views=ViewsConfig(AppearanceConfig(object_spacing=args.object_spacing or AppearanceConfig.object_spacing)),
    )
    if args.eps2d is not None:
        runtime = dataclasses.replace(runtime, views=dataclasses.replace(runtime.views, eps2d=args.eps2d))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gap.json"
        save_gap(gap, path)
        config = SurrogateConfig(gap=path, seed=0, camera_size=(160, 90), mode="lockstep",
                                 fps=runtime.physics.fps)  # fmt: skip
        with Surrogate(task.scene, config) as world:
            env = Env(task, EnvConfig(runtime=runtime, calibrate=args.calibrate, calibrate_at=args.calibrate_at), world)  # type: ignore[arg-type]
            for name, start in poses(task, args.poses, args.seed):
                errors = SyncObserver()  # its recorder: the twin's T against the oracle, every frame
                run_episode(env, _Hold(), start, args.seconds, [errors], stop_on_success=False)
                t = np.asarray(errors.recorder.times)
                last = t >= t[-1] - args.window
                pos = 1e3 * np.asarray(errors.recorder.pos_err)
                yaw = np.degrees(np.asarray(errors.recorder.yaw_err))
                row = {"pose": name, "pos_mm": float(np.median(pos[last])),
                       "yaw_deg": float(np.median(yaw[last])), "first_mm": float(pos[0])}  # fmt: skip
                rows.append(row)
                log.info("%s: %.1f mm, %.2f°", row["pose"], row["pos_mm"], row["yaw_deg"])
    near = np.array([r["pos_mm"] for r in rows if r["pose"].startswith("goal")])
    pos = np.array([r["pos_mm"] for r in rows])
    yaw = np.array([r["yaw_deg"] for r in rows])
    summary = {"gap": str(args.gap or "default"), "ideal_cameras": args.ideal_cameras,
               "refine_cameras": args.refine_cameras, "board": args.board, "smooth": args.smooth,
               "blur": args.blur, "pixel_samples": args.pixel_samples, "fill_unseen": args.fill_unseen,
               "object_spacing": args.object_spacing, "eps2d": args.eps2d,
               "calibrate_at": args.calibrate_at,
               "goal_mm": rows[-1]["pos_mm"], "near_goal_median_mm": float(np.median(near)),
               "near_goal_max_mm": float(near.max()), "median_mm": float(np.median(pos)),
               "max_mm": float(pos.max()), "yaw_median_deg": float(np.median(yaw)), "yaw_max_deg": float(yaw.max()),
               "rows": rows}  # fmt: skip
    print(
        f"static error, gap {summary['gap']}, ideal cameras {args.ideal_cameras}, board {args.board}, "
        f"refine {args.refine_cameras}, "
        f"calibrated at the {args.calibrate_at}"
    )
    print("| pose | settled mm | yaw ° | at reset mm |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['pose']} | {r['pos_mm']:.1f} | {r['yaw_deg']:.2f} | {r['first_mm']:.1f} |")
    print(f"goal {summary['goal_mm']:.1f} mm; around the goal median {summary['near_goal_median_mm']:.1f} mm, max "
          f"{summary['near_goal_max_mm']:.1f} mm; all: median {summary['median_mm']:.1f} mm, max "
          f"{summary['max_mm']:.1f} mm; yaw median {summary['yaw_median_deg']:.2f}°, "
          f"max {summary['yaw_max_deg']:.2f}°")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main(tyro.cli(Args))
