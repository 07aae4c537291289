"""How well does calibration find the real cameras? The reprojection error of the twin's cameras against the
surrogate's true ones (evaluation only: a deployment never has them), before and after `Runtime.calibrate`.

Online, lock-step, one surrogate: the twin and the world are reset to a start drawn by the task's sampler and the
twin calibrates there (colour fit, camera refinement, colour fit), as `experiments/static_bias.py` does at its
first pose. The error is measured over a grid of points on the table (the workspace, at the table's height and at
the T's top, 35 mm above): per camera, the mean and largest pixel distance between where the twin's camera and
the true camera project them, and that distance in millimetres on the table (pixel distance × the camera's
millimetres per pixel at each point). The static error of a T the twin was not calibrated at follows this
residual (docs/decisions.md, "Calibration").

    python experiments/camera_calibration.py [--gap FILE] [--pixel-samples N] [--seed 100] [--json out.json]
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

from realissim.envs.env import Env, EnvConfig
from realissim.estimate.board_calibration import BoardCalibrationConfig
from realissim.geometry import project_points
from realissim.real.surrogate import Surrogate, SurrogateConfig, load_gap, save_gap
from realissim.real.surrogate.gap import DEFAULT_GAP_PATH
from realissim.real.surrogate.model import surrogate_cameras
from realissim.runtime import CalibrationConfig, RuntimeConfig
from realissim.tasks import make

log = logging.getLogger("camera_calibration")

SIZE = (160, 90)
"""Camera images, px (the sync scenarios' and online evaluation's)."""
HEIGHTS = (0.0, 0.035)
"""Heights of the grid's points, m: the table and the T's top."""


def table_grid(x: tuple[float, float] = (-0.3, 0.3), y: tuple[float, float] = (-0.3, 0.3), n: int = 12) -> np.ndarray:
    """Points (n·n·len(HEIGHTS), 3) on a square grid over the workspace (PushT's starts: ±0.25 m about the table's
    centre, and a margin), world frame, m."""
    gx, gy = np.meshgrid(np.linspace(*x, n), np.linspace(*y, n))
    return np.concatenate([np.column_stack([gx.ravel(), gy.ravel(), np.full(gx.size, z)]) for z in HEIGHTS])


def reprojection(
    K: np.ndarray, X_WC: np.ndarray, K_true: np.ndarray, X_WC_true: np.ndarray, points: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per point (N,): the pixel distance between the projections of `points` (N, 3) through (K (3,3), X_WC
    (4,4)) and through the true camera, and that distance in mm at each point (its depth / the focal length)."""
    uv, _ = project_points(points, K, X_WC)
    uv_true, depth = project_points(points, K_true, X_WC_true)
    px = np.linalg.norm(uv - uv_true, axis=1)
    return px, 1e3 * px * depth / K_true[0, 0]


@dataclass
class Args:
    gap: Path | None = None
    """Reality-gap profile JSON (None: the default)."""
    pixel_samples: int | None = None
    """Set every real camera's `CameraGap.pixel_samples` (None: the profile's)."""
    size: tuple[int, int] = SIZE
    """Camera images the twin calibrates from, px (w, h); errors are reported in pixels of `SIZE`."""
    board: bool = True
    """Calibrate from the surrogate's dot board (`RuntimeConfig.board_calibration`); False: photometrically."""
    seed: int = 100
    """Seed of the calibration pose (the task's sampler; 100 is static_bias.py's first pose)."""
    shift_search: float = BoardCalibrationConfig().shift_search
    """`BoardCalibrationConfig.shift_search`, px (0: the fit starts from the told cameras, as before stop 40)."""
    json: Path | None = None


def main(args: Args) -> dict:
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    task = make("pusht")
    gap = load_gap(args.gap or DEFAULT_GAP_PATH)
    if args.pixel_samples is not None:
        gap = dataclasses.replace(
            gap, cameras=tuple(dataclasses.replace(c, pixel_samples=args.pixel_samples) for c in gap.cameras)
        )
    told, true = surrogate_cameras(task.scene, gap, args.size)
    to_size = SIZE[0] / args.size[0]  # reported pixels are SIZE's
    calibration = CalibrationConfig(use_board=args.board, board=BoardCalibrationConfig(shift_search=args.shift_search))
    runtime = RuntimeConfig(calibration=calibration)
    points = table_grid()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gap.json"
        save_gap(gap, path)
        config = SurrogateConfig(gap=path, seed=0, camera_size=args.size, mode="lockstep", fps=runtime.physics.fps)
        with Surrogate(task.scene, config) as world:
            env = Env(task, EnvConfig(runtime=runtime, calibrate="first_reset", calibrate_at="start"), world)  # type: ignore[arg-type]
            env.reset(task.sample_start(np.random.default_rng(args.seed)))
            assert env.runtime.correction is not None
            views = env.runtime.correction.views
            Ks, Xs = views.Ks.double().numpy(), views.X_WCs.double().numpy()
    rows = []
    for c, cam in enumerate(true):
        row: dict[str, object] = {"camera": cam.name}
        for stage, (K, X) in (("told", (told[c].K_array, told[c].X_WC_array)), ("calibrated", (Ks[c], Xs[c]))):
            px, mm = reprojection(K, X, cam.K_array, cam.X_WC_array, points)
            px = px * to_size
            row |= {f"{stage}_px_mean": float(px.mean()), f"{stage}_px_max": float(px.max()),
                    f"{stage}_mm_mean": float(mm.mean()), f"{stage}_mm_max": float(mm.max())}  # fmt: skip
        rows.append(row)
    summary = {"gap": str(args.gap or "default"), "pixel_samples": args.pixel_samples, "seed": args.seed,
               "board": args.board, "shift_search": args.shift_search,
               "size": list(args.size),
               "told_px_mean": float(np.mean([r["told_px_mean"] for r in rows])),
               "calibrated_px_mean": float(np.mean([r["calibrated_px_mean"] for r in rows])), "rows": rows}  # fmt: skip
    print(f"camera calibration at {args.size[0]} × {args.size[1]} px, gap {summary['gap']}, pixel samples "
          f"{args.pixel_samples or 'as the profile'}, {'board' if args.board else 'photometric'} calibration "
          f"(errors in px of {SIZE[0]} × {SIZE[1]})")  # fmt: skip
    print("| camera | told px (mean / max) | told mm | calibrated px (mean / max) | calibrated mm |")
    print("|---|---|---|---|---|")
    for r in rows:
        told_px, cal_px = (
            f"{r['told_px_mean']:.2f} / {r['told_px_max']:.2f}",
            f"{r['calibrated_px_mean']:.2f} / {r['calibrated_px_max']:.2f}",
        )
        print(f"| {r['camera']} | {told_px} | {r['told_mm_mean']:.1f} | {cal_px} | {r['calibrated_mm_mean']:.1f} |")
    told_mean, cal_mean = summary["told_px_mean"], summary["calibrated_px_mean"]
    print(f"mean over the cameras: told {told_mean:.2f} px, calibrated {cal_mean:.2f} px")
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main(tyro.cli(Args))
