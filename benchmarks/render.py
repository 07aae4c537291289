"""Rasteriser speed: forward and forward+backward (w.r.t. means and rotations) per backend.

Cases: (1) 1,000 Gaussians at 128×96, (2) 3,000 at 160×120, (3) 1,000 at 480×270 — synthetic scenes
from `realissim.render.synthetic` (Gaussians 1.5–2.5 m in front of a 65° camera, std-devs 1–5 cm,
opacities 0.3–0.95) — and (4) the PushT scene: the T-block and robot Gaussians at the home pose,
3 cameras at 160×90, the ground pre-rendered as a static layer. The loss is the photometric L2
against a fixed target image, as in the twin's correction step. Prints a table; `--json FILE` also
writes it (keys `caseN_<backend>_{fwd,fwdbwd}_ms`, plus `case1_fwdbwd_ms` and `case4_fwdbwd_ms`
for the fast CPU path).

    python benchmarks/render.py [--json out.json] [--threads 2] [--repeats 20]
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numba
import numpy as np
import torch
import tyro

from realissim.assets.pusht import PushTConfig, pusht_scene
from realissim.render import gsplat_available, rasterize, render_static
from realissim.render.gaussians import Gaussians
from realissim.render.synthetic import cameras, random_gaussians
from realissim.twin.physics import PhysicsConfig, build_model
from realissim.views.appearance import SceneAppearance


@dataclass
class Args:
    """Benchmark options."""

    json: Path | None = None
    """Write the results here as JSON."""
    threads: int = 2
    """CPU threads for torch and numba."""
    repeats: int = 20
    """Timed repetitions of the fast paths (median reported)."""
    reference_repeats: int = 2
    """Timed repetitions of the (slow) reference."""
    skip_reference: bool = False
    """Do not time the reference (its ratio column is then empty)."""


@dataclass
class Case:
    name: str
    gaussians: tuple[torch.Tensor, ...]
    Ks: torch.Tensor
    X_WCs: torch.Tensor
    width: int
    height: int
    static: object | None = None


def _synthetic(name: str, n: int, width: int, height: int, seed: int) -> Case:
    Ks, X_WCs = cameras(1, width, height)
    return Case(name, random_gaussians(n, seed=seed), Ks, X_WCs, width, height)


def _pusht(width: int = 160, height: int = 90) -> Case:
    """The PushT scene at home: moving T + robot Gaussians, ground as a static layer, 3 cameras."""
    scene = pusht_scene(PushTConfig(camera_width=width, camera_height=height))
    model = build_model(scene, PhysicsConfig())
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    mujoco.mj_forward(model, data)
    appearance = SceneAppearance.from_scene(scene, model)
    world = Gaussians.from_arrays(appearance.world_from_data(data))
    Ks = torch.tensor(np.stack([cam.K_array for cam in scene.cameras]), dtype=torch.float32)
    X_WCs = torch.tensor(np.stack([cam.X_WC_array for cam in scene.cameras]), dtype=torch.float32)
    static_mask = torch.tensor(appearance.static)
    moving, ground = world.select(~static_mask), world.select(static_mask)
    static = render_static(*ground.args(), Ks, X_WCs, width, height)
    name = f"4: PushT {len(moving)} moving (+{len(ground)} ground cached), 3 cams 160×90"
    return Case(name, moving.args(), Ks, X_WCs, width, height, static)


def _timed(fn: Callable[[], None], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def measure(case: Case, backend: str, repeats: int) -> tuple[float, float]:
    """(forward ms, forward+backward ms) of one case on one backend."""
    device = "cuda" if backend == "gsplat" else "cpu"
    means, quats, scales, colors, opac = (t.to(device) for t in case.gaussians)
    Ks, X_WCs = case.Ks.to(device), case.X_WCs.to(device)
    target = torch.full((Ks.shape[0], case.height, case.width, 3), 0.5, device=device)
    kw = {"backend": backend, "static": case.static}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def forward() -> None:
        with torch.no_grad():
            rasterize(means, quats, scales, colors, opac, Ks, X_WCs, case.width, case.height, **kw)
        sync()

    def forward_backward() -> None:
        m, q = means.detach().requires_grad_(), quats.detach().requires_grad_()
        rgb, _, _ = rasterize(m, q, scales, colors, opac, Ks, X_WCs, case.width, case.height, **kw)
        ((rgb - target) ** 2).mean().backward()
        sync()

    return _timed(forward, repeats), _timed(forward_backward, repeats)


def main(args: Args) -> dict[str, float]:
    torch.set_num_threads(args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    cases = [
        _synthetic("1: 1,000 Gaussians 128×96", 1000, 128, 96, seed=1),
        _synthetic("2: 3,000 Gaussians 160×120", 3000, 160, 120, seed=2),
        _synthetic("3: 1,000 Gaussians 480×270", 1000, 480, 270, seed=3),
        _pusht(),
    ]
    backends = ["cpu"] + (["gsplat"] if gsplat_available() else []) + ([] if args.skip_reference else ["reference"])
    results: dict[str, float] = {"threads": args.threads}
    rows = []
    for number, case in enumerate(cases, start=1):
        timings = {}
        for backend in backends:
            if backend == "gsplat" and case.static is not None:
                continue
            repeats = args.reference_repeats if backend == "reference" else args.repeats
            timings[backend] = measure(case, backend, repeats)
            results[f"case{number}_{backend}_fwd_ms"] = timings[backend][0]
            results[f"case{number}_{backend}_fwdbwd_ms"] = timings[backend][1]
        ref = timings.get("reference")
        for backend, (fwd, fb) in timings.items():
            ratio = f"{ref[0] / fwd:8.1f}× {ref[1] / fb:8.1f}×" if ref and backend != "reference" else ""
            rows.append(f"| {case.name:<58} | {backend:<9} | {fwd:9.2f} | {fb:9.2f} | {ratio:>19} |")
    results["case1_fwdbwd_ms"] = results["case1_cpu_fwdbwd_ms"]
    results["case4_fwdbwd_ms"] = results["case4_cpu_fwdbwd_ms"]
    results["case4_fwdbwd_ms_per_camera"] = results["case4_fwdbwd_ms"] / 3
    print(f"threads: {args.threads}")
    print(f"| {'case':<58} | {'backend':<9} | {'fwd ms':>9} | {'f+b ms':>9} | {'speed-up vs ref':>19} |")
    print(f"|{'-' * 60}|{'-' * 11}|{'-' * 11}|{'-' * 11}|{'-' * 21}|")
    print("\n".join(rows))
    print(f"case1_fwdbwd_ms = {results['case1_fwdbwd_ms']:.2f} (target ≤ 5)")
    per_camera = results["case4_fwdbwd_ms_per_camera"]
    print(f"case4_fwdbwd_ms = {results['case4_fwdbwd_ms']:.2f} ({per_camera:.2f} per camera, target ≤ 4)")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(tyro.cli(Args))
