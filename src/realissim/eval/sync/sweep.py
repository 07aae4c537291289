"""A family of reality-gap profiles for testing the twin's sync beyond the default gap (evaluation only).

`sweep_profiles(n, seed)` draws `n` profiles around the default one: the T's friction ×0.5–1.6, mass ×0.7–1.4,
centre-of-mass offset up to 1 cm; the arm's latency up to 15 ms; every camera's calibration error (rotation,
translation, focal scale, principal point) scaled by 0–2× the default's, each camera its own; shadows on or
off; the key light from another direction with another colour, the fill light recoloured. Profile i is a
function of (seed, i) only, so a sweep can be extended without changing its first profiles. The first
`tune` profiles are for tuning the correction; report on the rest (held out).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from realissim.real.surrogate.gap import CameraGap, GapProfile, LightingGap, ObjectGap

SWEEP_SEED = 20261130
"""The default sweep's seed."""


def _scaled(rng: np.random.Generator, vector: tuple[float, ...], scale: float) -> tuple[float, ...]:
    """`vector` (a default error) turned to a random direction and scaled: same size × `scale`."""
    v = rng.normal(size=len(vector))
    return tuple(float(x) for x in v / np.linalg.norm(v) * np.linalg.norm(vector) * scale)


def sweep_profile(seed: int, index: int, cameras: tuple[str, ...] = ("front", "left", "right")) -> GapProfile:
    """Profile `index` of the sweep `seed` (see the module docstring); `cameras` are the scene's camera names."""
    rng = np.random.default_rng([seed, index])
    base = GapProfile()
    t = base.object_gap("tblock")
    com = rng.normal(size=2)
    com = com / np.linalg.norm(com) * rng.uniform(0.0, 0.01)
    tblock = dataclasses.replace(
        t,
        friction_scale=float(rng.uniform(0.5, 1.6)),
        mass_scale=float(rng.uniform(0.7, 1.4)),
        com_offset=(float(com[0]), float(com[1]), 0.0),
    )
    objects = (tblock, *(o for o in base.objects if o.name != "tblock"))
    arm = dataclasses.replace(base.arm, latency=float(rng.uniform(0.0, 0.015)))
    default = base.camera_gap(cameras[0])
    cams = []
    for name in cameras:
        s = float(rng.uniform(0.0, 2.0))
        cams.append(
            dataclasses.replace(
                default,
                name=name,
                rotation_error=_scaled(rng, default.rotation_error, s),
                translation_error=_scaled(rng, default.translation_error, s),
                focal_scale=1.0 + (default.focal_scale - 1.0) * s * float(rng.choice([-1.0, 1.0])),
                principal_offset=_scaled(rng, default.principal_offset, s),  # type: ignore[arg-type]
            )
        )
    azimuth, elevation = rng.uniform(-math.pi, math.pi), rng.uniform(math.radians(35), math.radians(80))
    key = (math.cos(azimuth) * math.cos(elevation), math.sin(azimuth) * math.cos(elevation), -math.sin(elevation))
    warmth = rng.uniform(-0.1, 0.1)
    light = base.lighting
    lighting = dataclasses.replace(
        light,
        key_direction=key,
        key_color=tuple(float(c * rng.uniform(0.8, 1.2)) for c in (0.7 + warmth, 0.68, 0.7 - warmth)),  # type: ignore[arg-type]
        fill_color=tuple(float(c * rng.uniform(0.6, 1.4)) for c in light.fill_color),  # type: ignore[arg-type]
        shadow_size=int(rng.choice([0, 1024])),
    )
    return dataclasses.replace(base, objects=objects, arm=arm, cameras=tuple(cams), lighting=lighting)


def sweep_profiles(n: int, seed: int = SWEEP_SEED) -> list[tuple[str, GapProfile]]:
    """(name, profile) for profiles 0 … n − 1 of the sweep `seed`; names "sweep-<seed>-<i>"."""
    return [(f"sweep-{seed}-{i:02d}", sweep_profile(seed, i)) for i in range(n)]


def describe(gap: GapProfile) -> dict[str, float]:
    """The swept parameters of a profile, for tables: friction and mass scale, COM offset (mm), latency (ms),
    the cameras' largest rotation error (deg), shadows (0/1)."""
    t: ObjectGap = gap.object_gap("tblock")
    cams: tuple[CameraGap, ...] = gap.cameras
    light: LightingGap = gap.lighting
    return {
        "friction": t.friction_scale,
        "mass": t.mass_scale,
        "com_mm": 1e3 * float(np.linalg.norm(t.com_offset)),
        "latency_ms": 1e3 * gap.arm.latency,
        "cam_rot_deg": max(math.degrees(float(np.linalg.norm(c.rotation_error))) for c in cams),
        "shadows": float(light.shadow_size > 0),
    }
