"""Where the cameras see each object, cheaply, every frame: evidence that the twin and the images disagree.

Per camera, the pixels whose chromaticity (r, g) / (r + g + b) lies within `color_tolerance` of an object's
fitted Gaussian colour are that object's (chromaticity ignores a global exposure gain; dark pixels, whose
chromaticity is noise, are skipped). Pixels the robot covers at the real arm's joints are excluded: the
twin's moving Gaussians are splatted as depth-tested discs (robot at the real joints, objects at the twin's
poses), which also gives the pixels where the twin's object would be visible. Both pixel sets are
back-projected onto the horizontal plane at the object's height (objects rest on the table); a camera's
estimate of the object's planar position is the twin's position plus the difference of the two centroids.
That cancels, when the twin is right, the bias of seeing sides and top at an angle (~1 cm per camera) and of
the arm hiding part of the object; it leaves ~1 cm per camera and ~5 mm combined (PushT, 160 × 90 px). The
cameras' estimates are averaged, weighted by their pixel counts.

The splat and the colour test are numba kernels; `splat_reference` and `classify_reference` are the plain
numpy definitions they are tested against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
import torch
from numba import njit
from numpy.typing import ArrayLike
from scipy.ndimage import binary_dilation
from torch import Tensor

from realissim.geometry import quat_to_mat
from realissim.twin.physics import TwinPhysics
from realissim.views.cameras import TwinViews

NEAR = 0.01
"""m; Gaussians nearer to a camera than this are not splatted."""
_GROW = np.ones((1, 7, 7), dtype=bool)
"""Growth of the cast shadow's mask (3 px each way, per camera) within which an object's colour in shade counts."""
MIN_RADIUS = 0.71
"""px; a splatted disc always covers the pixel its centre falls in."""


@dataclass(frozen=True)
class SightingConfig:
    """The per-frame colour sighting of the twin's objects."""

    color_tolerance: float = 0.1
    """Largest chromaticity distance from an object's colour for a pixel to count as the object's (the PushT
    red T sits ~0.25 from the table's brown, camera noise moves a lit pixel's chromaticity by ~0.01)."""
    min_brightness: float = 0.08
    """Pixels darker than this mean intensity (0–1) are skipped: their chromaticity is mostly noise."""
    min_pixels: int = 10
    """A camera sees an object when at least this many of its pixels are the object's."""
    min_cameras: int = 2
    """An object is seen when at least this many cameras see it."""
    splat_sigmas: float = 1.0
    """Radius of a splatted Gaussian's disc, in its largest standard deviation."""
    trim: float = 1.5
    """A camera's object pixels farther from their median point than this × the object's planar radius are
    dropped (stray pixels of the object's colour elsewhere)."""

    def __post_init__(self) -> None:
        for name in ("color_tolerance", "splat_sigmas", "trim"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.min_pixels < 1 or self.min_cameras < 1:
            raise ValueError(f"min_pixels, min_cameras: must be ≥ 1, got {self.min_pixels}, {self.min_cameras}")


@dataclass(frozen=True)
class ObjectSighting:
    """One object in one frame. World frame, m; C cameras in `TwinViews` order."""

    seen: bool
    """At least `min_cameras` cameras see the object (`pixels` ≥ `min_pixels`)."""
    position: np.ndarray
    """(2,) x, y where the cameras see the object's body origin; NaN when not seen."""
    twin_position: np.ndarray
    """(3,) the twin's object position (its body origin)."""
    distance: float
    """Planar distance between `position` and the twin's; NaN when not seen."""
    pixels: np.ndarray
    """(C,) int: pixels of the object's colour per camera (after trimming)."""
    expected: np.ndarray
    """(C,) int: pixels where the twin's object would be visible per camera."""
    overlap: np.ndarray
    """(C,) intersection over union of the object's pixels and those where the twin's object would be (NaN where
    both are empty): the agreement in shape. It also catches a twin object turned about the right position, where
    `distance` stays small (PushT: ~0.8 in sync, ~0.63 turned 118°, where the correction can settle, ~0.07 for
    15 cm off)."""
    camera_positions: np.ndarray
    """(C,2) each camera's estimate of `position`; NaN rows for cameras that do not see the object."""
    points: tuple[np.ndarray, ...]
    """Per camera, the object's pixels back-projected onto the plane z = `height`: (N_c,2) x, y."""
    height: float
    """z of the plane the pixels are back-projected onto: the twin's object height, m."""

    @property
    def cameras(self) -> int:
        """How many cameras see the object."""
        return int(np.sum(np.isfinite(self.camera_positions[:, 0])))

    def principal_yaws(self) -> list[float]:
        """Four yaw candidates (rad) from the seen points' shape: the direction of their major principal axis
        (each camera's points centred on their own mean, so cameras' offsets do not count) and its three quarter
        turns (which of the object's axes it is, and which way, the points cannot say); empty with < 3 points."""
        centred = [p - p.mean(axis=0) for p in self.points if len(p)]
        if sum(len(p) for p in centred) < 3:
            return []
        pts = np.concatenate(centred)
        _, vecs = np.linalg.eigh(pts.T @ pts)
        phi = math.atan2(vecs[1, 1], vecs[0, 1])
        return [phi + k * math.pi / 2 for k in range(4)]

    @property
    def spread(self) -> float:
        """Largest distance between two cameras' estimates, m (NaN with fewer than two): the cameras'
        disagreement with each other."""
        p = self.camera_positions[np.isfinite(self.camera_positions[:, 0])]
        if len(p) < 2:
            return math.nan
        return float(np.max(np.linalg.norm(p[:, None] - p[None], axis=-1)))


class Sighting:
    """Colour sightings of a twin's objects in the real cameras' images (see the module docstring)."""

    def __init__(self, views: TwinViews, model: mujoco.MjModel, config: SightingConfig = SightingConfig()) -> None:
        """`views` renders the twin into the real cameras (calibrated: `fit_colors`, `refine_cameras`); its
        current colours and cameras are read on every call. `model` is the twin's MuJoCo model."""
        self.views, self.model, self.config = views, model, config
        self._kin = mujoco.MjData(model)
        body = views.body_index.cpu().numpy()
        mask = views.object_mask.cpu().numpy()
        self.object_bodies = np.unique(body[mask])
        """MuJoCo body ids of the objects, in the order of the sightings."""
        k = len(self.object_bodies)
        self._label = np.where(mask, np.searchsorted(self.object_bodies, body), k).astype(np.int32)
        """(M,) per moving Gaussian: its object's index, or K for the robot."""
        self._body = body.astype(np.int64)
        self._local = np.ascontiguousarray(views.local.means.double().cpu().numpy())
        scales = views.local.scales.double().cpu().numpy()
        self._radius = np.ascontiguousarray(config.splat_sigmas * scales.max(axis=1))
        planar = np.linalg.norm(self._local[:, :2], axis=1)
        self.object_radius = np.array([planar[self._label == i].max() for i in range(k)])
        """(K,) m: each object's planar reach from its body origin (its Gaussians' means)."""
        self._cache: tuple[object, ...] = ()
        self._gate: tuple[Tensor, np.ndarray] | None = None
        """The last shadow cover read (`TwinViews.shadow_cover`) and its grown gate (C,H,W) bool."""

    def observe(self, twin: TwinPhysics, q_real: ArrayLike, images: np.ndarray | Tensor) -> list[ObjectSighting]:
        """This frame's sightings of `twin`'s objects, with the robot at the real arm's measured joints q_real
        (J,) rad (the images show the real arm) and the real images (C,H,W,3) uint8 RGB."""
        xpos, xquat = self.poses(twin.data.qpos, twin.layout.robot_qpos, q_real)
        return self(xpos, xquat, images)

    def poses(self, qpos: ArrayLike, robot_qpos: ArrayLike, q_real: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Body poses xpos (nbody,3) m, xquat (nbody,4) wxyz for qpos with the robot's joints (qpos indices
        `robot_qpos`) at q_real."""
        self._kin.qpos[:] = qpos
        self._kin.qpos[np.asarray(robot_qpos)] = q_real
        mujoco.mj_kinematics(self.model, self._kin)
        return self._kin.xpos.copy(), self._kin.xquat.copy()

    def __call__(self, xpos: np.ndarray, xquat: np.ndarray, images: np.ndarray | Tensor) -> list[ObjectSighting]:
        """Sightings (one per object, in `object_bodies` order: ascending body id, the scene's) for body poses
        xpos (nbody,3) m, xquat (nbody,4) wxyz and the real images (C,H,W,3) uint8 RGB (or float in [0, 1])."""
        views, cfg = self.views, self.config
        # The ground's shadow says where the objects' shaded colours count; cast unless the correction just cast it at
        # these poses. A gate cast up to 1 cm ago raised false alarms (docs/decisions.md, "The shadow's cost").
        views.cast_shadows(xpos, xquat)
        img = _as_uint8(images)
        shape = (len(views.cameras), views.height, views.width, 3)
        if img.shape != shape:
            raise ValueError(f"images: expected shape {shape}, got {img.shape}")
        rays, origins, X_CW, Ks, refs, owner, limit = self._camera_and_colour_tables()
        rot = quat_to_mat(np.asarray(xquat, dtype=np.float64))
        winner = np.full(shape[:3], -1, dtype=np.int32)
        depth = np.full(shape[:3], np.inf)
        pos = np.ascontiguousarray(xpos, dtype=np.float64)
        _splat_kernel(self._local, self._body, self._radius, rot, pos, Ks, X_CW, NEAR, winner, depth)
        seen = np.empty(shape[:3], dtype=np.int8)
        expected = np.empty(shape[:3], dtype=np.int8)
        tol2, floor = cfg.color_tolerance**2, 3.0 * 255.0 * cfg.min_brightness
        k = len(self.object_bodies)
        gate = np.zeros(shape[:3], dtype=np.bool_)
        if views.shadow_cover is not None:
            # The objects' colours in shade (references k … 2k − 1) count only where the twin casts a shadow, grown
            # by the object's height's parallax: under a warm key light the lit table's colour lies near them.
            if self._gate is None or self._gate[0] is not views.shadow_cover:
                grown = binary_dilation(views.shadow_cover.cpu().numpy() > 0.3, _GROW)
                self._gate = (views.shadow_cover, np.ascontiguousarray(grown))
            gate = self._gate[1]
        _classify_kernel(img, refs, owner, limit, k, k, gate, tol2, floor, winner, self._label, seen, expected)
        return [self._sighting(k, pos[b], seen, expected, rays, origins) for k, b in enumerate(self.object_bodies)]

    def _sighting(
        self,
        k: int,
        twin_pos: np.ndarray,
        seen: np.ndarray,
        expected: np.ndarray,
        rays: np.ndarray,
        origins: np.ndarray,
    ) -> ObjectSighting:
        """Object k's sighting from the per-pixel classes `seen` and `expected` (C,H,W) int8."""
        cfg, h = self.config, float(twin_pos[2])
        n_cam = len(origins)
        estimates = np.full((n_cam, 2), np.nan)
        pixels, counts = np.zeros(n_cam, dtype=np.int64), np.zeros(n_cam, dtype=np.int64)
        overlap = np.full(n_cam, np.nan)
        points = []
        for c in range(n_cam):
            mine, there = seen[c].ravel() == k, expected[c].ravel() == k
            union = np.count_nonzero(mine | there)
            if union:
                overlap[c] = np.count_nonzero(mine & there) / union
            pts = _on_plane(rays[c], origins[c], np.flatnonzero(mine), h)
            if len(pts):
                far = np.linalg.norm(pts - np.median(pts, axis=0), axis=1) > cfg.trim * self.object_radius[k]
                pts = pts[~far]
            ref = _on_plane(rays[c], origins[c], np.flatnonzero(there), h)
            points.append(pts)
            pixels[c], counts[c] = len(pts), len(ref)
            if len(pts) < cfg.min_pixels:
                continue
            bias = ref.mean(axis=0) - twin_pos[:2] if len(ref) >= cfg.min_pixels else np.zeros(2)
            estimates[c] = pts.mean(axis=0) - bias
        seeing = np.isfinite(estimates[:, 0])
        ok = int(seeing.sum()) >= cfg.min_cameras
        position = np.full(2, np.nan)
        if ok:
            w = pixels[seeing].astype(np.float64)
            position = (estimates[seeing] * w[:, None]).sum(axis=0) / w.sum()
        distance = float(np.linalg.norm(position - twin_pos[:2])) if ok else math.nan
        return ObjectSighting(
            ok, position, twin_pos.copy(), distance, pixels, counts, overlap, estimates, tuple(points), h
        )

    def references(self) -> np.ndarray:
        """(K,2) each object's reference chromaticity (`reference_chromaticity` of the views' current colours)."""
        return self._camera_and_colour_tables()[4][: len(self.object_bodies)]

    def _camera_and_colour_tables(self) -> tuple[np.ndarray, ...]:
        """Per-pixel world rays (C,H·W,3), camera origins (C,3), world-to-camera poses (C,4,4), intrinsics
        (C,3,3), and the colour test's references: chromaticities (R,2), their objects (R,) and brightness limits
        (R,) — each object's colour (K of them), then, with a shadow light, its colour in shade (K more: lit only
        by the fill and ambient light), counted only up to the geometric mean of its lit and shaded brightness.
        Rebuilt when the views' cameras, colours or shadow light have been replaced (calibration)."""
        v = self.views
        key = (v.Ks, v.X_WCs, v.local.colors, v.shadow)
        if len(self._cache) == 11 and all(a is b for a, b in zip(self._cache[:4], key)):
            return self._cache[4:]  # type: ignore[return-value]
        Ks = np.ascontiguousarray(v.Ks.double().cpu().numpy())
        X_WC = v.X_WCs.double().cpu().numpy()
        X_CW = np.ascontiguousarray(np.linalg.inv(X_WC))
        vv, uu = np.mgrid[0 : v.height, 0 : v.width] + 0.5
        rays = []
        for K, X in zip(Ks, X_WC):
            d = np.stack([(uu - K[0, 2]) / K[0, 0], (vv - K[1, 2]) / K[1, 1], np.ones_like(uu)], axis=-1)
            rays.append((d @ X[:3, :3].T).reshape(-1, 3))
        colors = np.ascontiguousarray(v.local.colors.double().cpu().numpy())
        k = len(self.object_bodies)
        refs = reference_chromaticity(colors, self._label, k)
        owner = np.arange(k, dtype=np.int32)
        limit = np.full(k, np.inf)
        if v.shadow is not None:
            attenuation = np.asarray(v.shadow.light.attenuation)
            lit = colors.sum(axis=1)
            dim = math.sqrt(float(attenuation.mean()))
            refs = np.concatenate([refs, reference_chromaticity(colors * attenuation, self._label, k)])
            owner = np.concatenate([owner, owner])
            limit = np.concatenate([limit, [255.0 * float(np.median(lit[self._label == i])) * dim for i in range(k)]])
        tables = (np.stack(rays), np.ascontiguousarray(X_WC[:, :3, 3]), X_CW, Ks, np.ascontiguousarray(refs), owner,
                  limit)  # fmt: skip
        self._cache = (*key, *tables)
        return tables


def reference_chromaticity(colors: np.ndarray, label: np.ndarray, k: int) -> np.ndarray:
    """(K,2) each object's colour as chromaticity (r, g) / (r + g + b): the median over its Gaussians' fitted
    colours (M,3) in [0, 1] (`label` (M,) their object index), so Gaussians the cameras never saw, whose fitted
    colours are arbitrary, do not count."""
    s = colors.sum(axis=1, keepdims=True).clip(min=1e-9)
    chroma = colors[:, :2] / s
    return np.stack([np.median(chroma[label == i], axis=0) for i in range(k)])


def on_hue(colors: np.ndarray, reference: np.ndarray, fraction: float) -> np.ndarray:
    """(M,) bool: which colours (M,3) in [0, 1] have at least `fraction` of the reference chromaticity's (2,)
    saturation along its hue (chromaticity measured from grey, 1/3); all of them for a nearly grey reference."""
    hue = np.asarray(reference, dtype=np.float64) - 1.0 / 3.0
    saturation = float(np.linalg.norm(hue))
    if saturation < 0.02:
        return np.ones(len(colors), dtype=bool)
    chroma = colors[:, :2] / colors.sum(axis=1, keepdims=True).clip(min=1e-9)
    return (chroma - 1.0 / 3.0) @ hue / saturation >= fraction * saturation


def _as_uint8(images: np.ndarray | Tensor) -> np.ndarray:
    """Images as a contiguous uint8 numpy array (float input in [0, 1] is scaled and rounded)."""
    a = images.detach().cpu().numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if a.dtype != np.uint8:
        a = np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(a)


def _on_plane(rays: np.ndarray, origin: np.ndarray, pixels: np.ndarray, height: float) -> np.ndarray:
    """(N,2) x, y where the rays of `pixels` (flat indices) cross the plane z = height (rays that do not
    reach it downwards are dropped)."""
    d = rays[pixels]
    down = d[:, 2] < -1e-9
    d = d[down]
    t = (height - origin[2]) / d[:, 2]
    return origin[:2] + t[:, None] * d[:, :2]


@njit(cache=True, nogil=True)
def _splat_kernel(local, body, radius, rot, pos, Ks, X_CW, near, winner, depth):  # pragma: no cover - numba
    """Depth-tested discs: Gaussian g (local mean on body `body[g]`, placed by rot/pos) covers every pixel of
    camera c whose centre lies within f·radius[g]/z px (at least MIN_RADIUS) of its projected mean; the
    nearest wins (`winner` (C,H,W) its index, `depth` its camera z; earlier index on ties)."""
    n_cam, height, width = winner.shape
    for g in range(local.shape[0]):
        b, lx, ly, lz = body[g], local[g, 0], local[g, 1], local[g, 2]
        wx = rot[b, 0, 0] * lx + rot[b, 0, 1] * ly + rot[b, 0, 2] * lz + pos[b, 0]
        wy = rot[b, 1, 0] * lx + rot[b, 1, 1] * ly + rot[b, 1, 2] * lz + pos[b, 1]
        wz = rot[b, 2, 0] * lx + rot[b, 2, 1] * ly + rot[b, 2, 2] * lz + pos[b, 2]
        for c in range(n_cam):
            x = X_CW[c, 0, 0] * wx + X_CW[c, 0, 1] * wy + X_CW[c, 0, 2] * wz + X_CW[c, 0, 3]
            y = X_CW[c, 1, 0] * wx + X_CW[c, 1, 1] * wy + X_CW[c, 1, 2] * wz + X_CW[c, 1, 3]
            z = X_CW[c, 2, 0] * wx + X_CW[c, 2, 1] * wy + X_CW[c, 2, 2] * wz + X_CW[c, 2, 3]
            if z <= near:
                continue
            u = Ks[c, 0, 0] * x / z + Ks[c, 0, 2]
            v = Ks[c, 1, 1] * y / z + Ks[c, 1, 2]
            r = max(max(Ks[c, 0, 0], Ks[c, 1, 1]) * radius[g] / z, MIN_RADIUS)
            if u + r < 0 or v + r < 0 or u - r > width or v - r > height:
                continue
            for j in range(max(0, math.floor(v - r)), min(height - 1, math.floor(v + r)) + 1):
                dv = j + 0.5 - v
                for i in range(max(0, math.floor(u - r)), min(width - 1, math.floor(u + r)) + 1):
                    du = i + 0.5 - u
                    if du * du + dv * dv <= r * r and z < depth[c, j, i]:
                        depth[c, j, i] = z
                        winner[c, j, i] = g


@njit(cache=True, nogil=True)
def _classify_kernel(
    images, refs, owner, limit, n_objects, n_plain, gate, tol2, min_sum, winner, label, seen, expected
):  # pragma: no cover
    """Per pixel: `expected` = the object index of the winning splatted Gaussian (−1: none or the robot's);
    `seen` = the object `owner[r]` of the reference chromaticity r nearest the image's (within tol2, brightness
    sum ≥ min_sum, pixel not covered by the robot), else −1 (the first reference on ties). References from
    `n_plain` on count only where `gate` (C,H,W) is set and the brightness sum is at most `limit[r]` (an object's
    colour in shade: only where a shadow falls, and only as dark as shade).
    Label `n_objects` is the robot's."""
    n_cam, height, width = winner.shape
    robot = n_objects
    for c in range(n_cam):
        for j in range(height):
            for i in range(width):
                g = winner[c, j, i]
                lab = label[g] if g >= 0 else -1
                expected[c, j, i] = lab if lab < robot else -1
                seen[c, j, i] = -1
                if lab == robot:
                    continue
                r, gg, bb = float(images[c, j, i, 0]), float(images[c, j, i, 1]), float(images[c, j, i, 2])
                s = r + gg + bb
                if s < min_sum:
                    continue
                n_refs = refs.shape[0] if gate[c, j, i] else n_plain
                best = tol2
                for k in range(n_refs):
                    if s > limit[k]:
                        continue
                    dr, dg = r / s - refs[k, 0], gg / s - refs[k, 1]
                    if dr * dr + dg * dg < best:
                        best = dr * dr + dg * dg
                        seen[c, j, i] = owner[k]


def splat_reference(
    local: np.ndarray,
    body: np.ndarray,
    radius: np.ndarray,
    rot: np.ndarray,
    pos: np.ndarray,
    Ks: np.ndarray,
    X_CW: np.ndarray,
    height: int,
    width: int,
) -> np.ndarray:
    """The splat's definition, dense (pixels × Gaussians; for tests): winner (C,H,W) int32, −1 where none."""
    world = np.einsum("nij,nj->ni", rot[body], local) + pos[body]
    out = np.full((len(Ks), height, width), -1, dtype=np.int32)
    vv, uu = np.mgrid[0:height, 0:width] + 0.5
    for c, (K, X) in enumerate(zip(Ks, X_CW)):
        p = world @ X[:3, :3].T + X[:3, 3]
        z = p[:, 2]
        zs = np.where(z > NEAR, z, 1.0)
        u, v = K[0, 0] * p[:, 0] / zs + K[0, 2], K[1, 1] * p[:, 1] / zs + K[1, 2]
        r = np.maximum(max(K[0, 0], K[1, 1]) * radius / zs, MIN_RADIUS)
        inside = (uu[..., None] - u) ** 2 + (vv[..., None] - v) ** 2 <= r * r
        d = np.where(inside & (z > NEAR), z, np.inf)
        first = np.argmin(d, axis=-1)  # the first index among equal depths, as the kernel's strict "<"
        out[c] = np.where(np.isfinite(d.min(axis=-1)), first, -1)
    return out


def classify_reference(
    images: np.ndarray,
    refs: np.ndarray,
    tol2: float,
    min_sum: float,
    winner: np.ndarray,
    label: np.ndarray,
    owner: np.ndarray | None = None,
    n_plain: int | None = None,
    gate: np.ndarray | None = None,
    limit: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The colour test's definition (vectorised; for tests): seen and expected (C,H,W) int8 as the kernel, with
    references `refs` (R,2) of objects `owner` (R,) (default: reference k is object k's), those from `n_plain` on
    only where `gate` (C,H,W) bool is set, each only up to a brightness sum `limit` (R,) (default: none)."""
    owner = np.arange(len(refs)) if owner is None else np.asarray(owner)
    n_plain = len(refs) if n_plain is None else n_plain
    robot = int(owner.max()) + 1
    lab = np.where(winner >= 0, label[np.maximum(winner, 0)], -1)
    img = images.astype(np.float64)
    s = img.sum(axis=-1)
    d2 = ((img[..., None, :2] / np.maximum(s, 1e-12)[..., None, None] - refs) ** 2).sum(axis=-1)
    if gate is not None:
        d2[..., n_plain:] = np.where(gate[..., None], d2[..., n_plain:], np.inf)
    if limit is not None:
        d2 = np.where(s[..., None] > np.asarray(limit), np.inf, d2)
    seen = np.where(d2.min(axis=-1) < tol2, owner[d2.argmin(axis=-1)], -1)
    seen = np.where((s >= min_sum) & (lab != robot), seen, -1)
    expected = np.where(lab < robot, lab, -1)
    return seen.astype(np.int8), expected.astype(np.int8)
