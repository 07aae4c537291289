"""The appearance of a scene: 3D Gaussians attached to each MuJoCo body, in that body's frame.

Keys are MuJoCo body names as `realissim.assets.mjcf` writes them: each object's name, the Panda's
link names (plus the pusher body), and `GROUND_BODY` for the table, a static geom of MuJoCo's world
body. A scene may give Gaussians for an object or the ground (inline or as an .npz reference);
anything without them gets procedural surface Gaussians from its geometry: an object's exact shape
(`ObjectSpec.boxes`) where the scene describes one, else its collision spheres.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from realissim.assets import panda
from realissim.assets.gaussians import (
    DEFAULT_OVERLAP,
    GaussianArrays,
    Seed,
    box_gaussians,
    capsule_gaussians,
    plane_gaussians,
)
from realissim.spec.io import load_gaussians
from realissim.spec.scene import BoxSpec, GaussianSetSpec, ObjectSpec, PusherSpec, SceneSpec

logger = logging.getLogger(__name__)

GROUND_BODY = "world"
"""Key of the table's Gaussians: the table is a geom of MuJoCo's world body (id 0)."""
LINK_COLOR = (0.92, 0.92, 0.92)
"""Franka white, as the link geoms' rgba in the MJCF."""
ROD_COLOR = (0.3, 0.3, 0.32)
"""Dark anodised rod, as the pusher geom's rgba in the MJCF."""
INSIDE_TOL = 1e-9
"""A mean deeper than this (m) inside another part of the same body is hidden and dropped."""


@dataclass(frozen=True)
class AppearanceConfig:
    """How procedural Gaussians are laid out (spacings are the largest distance between neighbours)."""

    object_spacing: float = 0.01
    """Objects (the T-block: about 650 Gaussians), m."""
    robot_spacing: float = 0.022
    """Arm links, m."""
    pusher_spacing: float = 0.008
    """Pusher rod, m (finer: it is thin and it is what touches the objects)."""
    ground_spacing: float = 0.03
    """Table top, m."""
    checker: float | None = 0.1
    """Table checker square size, m (None: uniform colour)."""
    overlap: float = DEFAULT_OVERLAP
    """Tangent std-dev as a fraction of the spacing."""
    opacity: float = 0.95
    jitter: float = 0.03
    """Largest random brightness change per Gaussian."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("object_spacing", "robot_spacing", "pusher_spacing", "ground_spacing", "overlap"):
            if not getattr(self, name) > 0:
                raise ValueError(f"AppearanceConfig.{name}: must be > 0, got {getattr(self, name)}")
        if self.checker is not None and not self.checker > 0:
            raise ValueError(f"AppearanceConfig.checker: must be > 0 or None, got {self.checker}")


def _drop_hidden(g: GaussianArrays, hidden: list[np.ndarray]) -> GaussianArrays:
    """`g` without the Gaussians flagged in any of the boolean masks (N,) of `hidden`."""
    return g.select(~np.any(hidden, axis=0)) if hidden else g


def _inside_box(points: np.ndarray, center: ArrayLike, half: ArrayLike) -> np.ndarray:
    """Whether points (N, 3) lie in the closed box; bool (N,)."""
    return np.all(np.abs(points - np.asarray(center)) <= np.asarray(half) + INSIDE_TOL, axis=1)


def box_union_gaussians(
    boxes: Sequence[BoxSpec], color: ArrayLike, spacing: float, opacity: float = 0.95, seed: Seed = 0, **kwargs: float
) -> GaussianArrays:
    """Surface Gaussians of a union of boxes, in the boxes' (body) frame: each box's surface in the given order,
    without the Gaussians that lie inside another box (faces where boxes touch or overlap are left out).

    `kwargs` go to `box_gaussians` (overlap, thickness, jitter). The boxes draw from one generator made from
    `seed`, in order.
    """
    rng = np.random.default_rng(seed)
    parts = []
    for i, box in enumerate(boxes):
        g = box_gaussians(box.center, box.half, color, spacing, opacity, rng, **kwargs)
        others = [_inside_box(g.means, b.center, b.half) for j, b in enumerate(boxes) if j != i]
        parts.append(_drop_hidden(g, others))
    return GaussianArrays.concat(parts)


def _segment_distance(points: np.ndarray, p0: ArrayLike, p1: ArrayLike) -> np.ndarray:
    """Distance (N,) from points (N, 3) to the segment p0 → p1."""
    a, b = np.asarray(p0, dtype=np.float64), np.asarray(p1, dtype=np.float64)
    ab = b - a
    denom = float(ab @ ab)
    t = np.zeros(len(points)) if denom == 0 else np.clip((points - a) @ ab / denom, 0.0, 1.0)
    return np.linalg.norm(points - (a + t[:, None] * ab), axis=1)


Capsule = tuple[tuple[float, float, float], tuple[float, float, float], float]


def capsules_gaussians(
    capsules: tuple[Capsule, ...], color: ArrayLike, spacing: float, opacity: float, seed: Seed, **kwargs: float
) -> GaussianArrays:
    """Surface Gaussians of a union of capsules (p0, p1, radius), without those hidden inside another."""
    rng = np.random.default_rng(seed)
    parts = []
    for i, (p0, p1, radius) in enumerate(capsules):
        g = capsule_gaussians(p0, p1, radius, color, spacing, opacity, rng, **kwargs)
        hidden = [_segment_distance(g.means, a, b) < r - INSIDE_TOL for j, (a, b, r) in enumerate(capsules) if j != i]
        parts.append(_drop_hidden(g, hidden))
    return GaussianArrays.concat(parts)


def pusher_gaussians(
    pusher: PusherSpec, spacing: float, opacity: float = 0.95, seed: Seed = 0, **kwargs: float
) -> GaussianArrays:
    """The rod in the pusher body's frame: a capsule from the flange (origin) to the tip along +z."""
    return capsule_gaussians(
        (0.0, 0.0, 0.0), (0.0, 0.0, pusher.length), pusher.radius, ROD_COLOR, spacing, opacity, seed, **kwargs
    )


def panda_link_gaussians(
    spacing: float,
    pusher: PusherSpec | None = PusherSpec(),
    pusher_spacing: float | None = None,
    opacity: float = 0.95,
    seed: Seed = 0,
    **kwargs: float,
) -> dict[str, GaussianArrays]:
    """Link body name → Gaussians on its collision capsules (`panda.LINK_CAPSULES`) in the link frame,
    plus `panda.PUSHER_BODY` → the rod if `pusher` is given (at `pusher_spacing`, default `spacing`)."""
    rng = np.random.default_rng(seed)
    out = {
        name: capsules_gaussians(capsules, LINK_COLOR, spacing, opacity, rng, **kwargs)
        for name, capsules in zip(panda.LINK_NAMES, panda.LINK_CAPSULES)
    }
    if pusher is not None:
        out[panda.PUSHER_BODY] = pusher_gaussians(pusher, pusher_spacing or spacing, opacity, rng, **kwargs)
    return out


def sphere_set_gaussians(
    obj: ObjectSpec, spacing: float, opacity: float = 0.95, seed: Seed = 0, **kwargs: float
) -> GaussianArrays:
    """Gaussians on the outer surface of an object's collision spheres, in its body frame, in its colour."""
    spheres = tuple((c, c, r) for c, r in zip(obj.spheres.centers, obj.spheres.radii))
    return capsules_gaussians(spheres, obj.color, spacing, opacity, seed, **kwargs)


def _shape_kwargs(config: AppearanceConfig) -> dict[str, float]:
    return {"overlap": config.overlap, "jitter": config.jitter}


def _given(ref: GaussianSetSpec | str, base_dir: str | Path, field: str) -> GaussianArrays:
    return GaussianArrays(**load_gaussians(ref, base_dir, field))


def _object_gaussians(
    obj: ObjectSpec,
    index: int,
    config: AppearanceConfig,
    base_dir: str | Path,
    rng: np.random.Generator,
) -> GaussianArrays:
    if obj.gaussians is not None:
        return _given(obj.gaussians, base_dir, f"objects[{index}].gaussians")
    if obj.boxes is not None:
        kwargs = _shape_kwargs(config)
        return box_union_gaussians(obj.boxes, obj.color, config.object_spacing, config.opacity, rng, **kwargs)
    return sphere_set_gaussians(obj, config.object_spacing, config.opacity, rng, **_shape_kwargs(config))


def _ground_gaussians(scene: SceneSpec, config: AppearanceConfig, base_dir: str | Path) -> GaussianArrays:
    ground = scene.ground
    if ground.gaussians is not None:
        return _given(ground.gaussians, base_dir, "ground.gaussians")
    return plane_gaussians(
        *ground.size,
        ground.color,
        config.ground_spacing,
        checker=config.checker,
        opacity=config.opacity,
        seed=config.seed,
        overlap=config.overlap,
        jitter=config.jitter,
    )


def scene_gaussians(
    scene: SceneSpec,
    base_dir: str | Path | None = None,
    config: AppearanceConfig = AppearanceConfig(),
) -> dict[str, GaussianArrays]:
    """MuJoCo body name → Gaussians in that body's frame, for every body of `scene` that is seen.

    Objects and the ground use the scene's own Gaussians where given (references are relative to
    `base_dir`, default the working directory), else procedural ones: an object described with `boxes` is
    drawn on the surface of its boxes (`box_union_gaussians`), others on their collision spheres. Deterministic
    for `config.seed`.
    """
    if scene.robot.model != panda.MODEL_NAME:
        raise ValueError(f"no appearance for robot model {scene.robot.model!r} (known: {panda.MODEL_NAME!r})")
    base = Path(".") if base_dir is None else Path(base_dir)
    rng = np.random.default_rng(config.seed)
    out = {GROUND_BODY: _ground_gaussians(scene, config, base)}
    out |= panda_link_gaussians(
        config.robot_spacing, scene.robot.pusher, config.pusher_spacing, config.opacity, rng, **_shape_kwargs(config)
    )
    for i, obj in enumerate(scene.objects):
        out[obj.name] = _object_gaussians(obj, i, config, base, rng)
    logger.debug("scene %r appearance: %s", scene.name, {k: len(v) for k, v in out.items()})
    return out
