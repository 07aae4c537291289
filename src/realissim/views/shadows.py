"""The key light's shadows in the twin: fitted at calibration, cast by the twin's own geometry every frame.

The twin's Gaussians carry colours fitted under the real lighting, so shading is baked into them; a cast shadow is
not, because it moves with the arm. Where the real scene has a shadow-casting key light, the arm's shadow darkens
the table and the object under it, which a twin without shadows cannot explain: the correction's photometric pull
and the colour sighting then mistake shade for the object (docs/decisions.md, "The twin renders the arm's
shadow").

Model: one directional light travelling along `ShadowLight.direction` (world frame); a surface point in shadow
has its colour multiplied per channel by `ShadowLight.attenuation` (what the fill and ambient light leave), a
point in partial shadow by 1 − coverage · (1 − attenuation). Shadows are cast onto the table (z = 0), as an image
per camera, by flattening the casters' Gaussians along the light onto the table and rasterising their opacity, and
onto the objects' light-facing Gaussians by evaluating the robot's Gaussians seen along the light at each one.

`fit_shadow_light` finds the direction at calibration from the real images: for each candidate direction the
shadow the twin's arm and objects would cast is rasterised, and the direction whose shadow is darkest against a
ring of table just outside it wins (coarse grid, then a finer one around the best); no shadow, or one too faint
to matter, gives None and the twin renders none.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional

from realissim.render import rasterize
from realissim.render.common import may_cover
from realissim.render.gaussians import Gaussians, quat_rotate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShadowFitConfig:
    """Fitting the key light's shadow at calibration."""

    enabled: bool = True
    """Fit and render shadows where the images show them (False: the twin never renders shadows)."""
    azimuth_step: float = 10.0
    """Step of the coarse search over the light's azimuth, degrees."""
    elevations: tuple[float, ...] = (25.0, 32.5, 40.0, 47.5, 55.0, 62.5, 70.0, 77.5, 85.0)
    """Elevations of the coarse search, degrees above the horizon."""
    refine_step: float = 4.0
    """Step of the first fine search (±2 steps in azimuth and elevation about the coarse best), degrees; each
    further one halves it."""
    refinements: int = 3
    """Fine searches after the coarse one."""
    min_contrast: float = 1.25
    """Lit over shadowed brightness of the table (medians) below which no shadow is rendered: the light casts
    none, or one too faint to matter. Without shadows the best of the candidates scores ~1.0–1.1."""
    min_pixels: int = 40
    """Fewest table pixels (all cameras) in the candidate shadow, and in the ring around it, for it to count."""
    inside: float = 0.7
    """A table pixel counts as in the candidate shadow where the coverage exceeds this ..."""
    outside: float = 0.02
    """... and as lit where it is below this."""
    ring: int = 3
    """Width of the lit ring compared with the shadow, px."""
    shade_faces: bool = True
    """The fitted light also shades the objects' faces by their normals (`ShadowLight.shade_faces`): under a low key
    light a T's sides change with its yaw, and colours fitted at one pose put the images' optimum millimetres off the
    T at another (docs/decisions.md, "Faces shaded by their normals")."""

    def __post_init__(self) -> None:
        if not (self.azimuth_step > 0 and self.refine_step > 0 and self.elevations):
            raise ValueError("azimuth_step and refine_step must be > 0 and elevations non-empty")
        if not all(0 < e < 90 for e in self.elevations):
            raise ValueError(f"elevations: must lie in (0, 90) degrees, got {self.elevations}")
        if not (0 <= self.outside < self.inside <= 1):
            raise ValueError(f"need 0 ≤ outside < inside ≤ 1, got {self.outside}, {self.inside}")


@dataclass(frozen=True)
class ShadowLight:
    """A shadow-casting directional light as the twin renders it."""

    direction: tuple[float, float, float]
    """Unit vector the light travels along, world frame (pointing down: z < 0)."""
    attenuation: tuple[float, float, float]
    """Per-channel factor of a surface point in full shadow, in (0, 1]."""
    contrast: float = math.nan
    """Lit over shadowed table brightness measured at calibration (medians)."""
    shade_faces: bool = False
    """Shade each object surface Gaussian by its normal, not only by the robot's shadow: lit by the key light in
    proportion to the cosine between its normal and the light (Lambert), the rest (fill, ambient) from every side,
    their ratio per channel from `attenuation` on the table (1 / attenuation − 1 at the table's cosine); factors
    relative to an upward face, so the fitted colours stay those of a lit top."""

    def __post_init__(self) -> None:
        d = np.asarray(self.direction, dtype=np.float64)
        if d.shape != (3,) or not np.all(np.isfinite(d)) or abs(np.linalg.norm(d) - 1) > 1e-6 or d[2] >= 0:
            raise ValueError(f"direction: must be a finite unit vector pointing down, got {self.direction}")
        k = np.asarray(self.attenuation, dtype=np.float64)
        if k.shape != (3,) or not np.all((k > 0) & (k <= 1)):
            raise ValueError(f"attenuation: must be 3 factors in (0, 1], got {self.attenuation}")

    def shade(self, coverage: Tensor) -> Tensor:
        """Colour factors (...,3) for shadow coverage (...) in [0, 1]: 1 − coverage · (1 − attenuation)."""
        k = torch.as_tensor(self.attenuation, dtype=coverage.dtype, device=coverage.device)
        return 1.0 - coverage[..., None].clamp(0.0, 1.0) * (1.0 - k)


def light_direction(azimuth: float, elevation: float) -> tuple[float, float, float]:
    """The unit direction (world) a light travels along when it comes from azimuth (rad, from +x towards +y) and
    elevation (rad above the horizon)."""
    c = math.cos(elevation)
    return (-c * math.cos(azimuth), -c * math.sin(azimuth), -math.sin(elevation))


def _quat_matrices(q: Tensor) -> Tensor:
    """Rotation matrices (N,3,3) of unit quaternions (N,4) wxyz."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        dim=-2,
    )


def covariances(quats: Tensor, scales: Tensor) -> Tensor:
    """Covariances (N,3,3) m² of Gaussians with rotations quats (N,4) wxyz and std-devs scales (N,3) m."""
    R = _quat_matrices(quats)
    return (R * scales[:, None, :] ** 2) @ R.transpose(1, 2)


def flatten_onto_table(
    means: Tensor, cov: Tensor, opacities: Tensor, direction: Tensor, height: float = 0.0, above: float = 0.002
) -> Gaussians:
    """The shadows of world-frame Gaussians (means (N,3) m, covariances (N,3,3) m², opacities (N,)) cast along
    `direction` (3,) onto the plane z = `height` m: each Gaussian above the plane by more than `above` m mapped by
    the oblique projection x ↦ x − d (x_z − h) / d_z, means and covariances (a 0.1 mm thickness keeps them 3D;
    the in-plane axes in closed form). Colours are black."""
    d = direction.to(means)
    keep = means[:, 2] > height + above
    means, cov, opac = means[keep], cov[keep], opacities[keep]
    e_z = torch.tensor([0.0, 0.0, 1.0]).to(d)
    P = torch.eye(3, dtype=means.dtype, device=means.device)[:2] - torch.outer(d[:2], e_z) / d[2]
    A = P @ cov @ P.T  # (N,2,2): the shadow's covariance in the plane
    a, b, c = A[:, 0, 0], A[:, 0, 1], A[:, 1, 1]
    theta = 0.5 * torch.atan2(2 * b, a - c)
    mid, rad = 0.5 * (a + c), torch.sqrt((0.5 * (a - c)) ** 2 + b * b)
    scales = torch.stack([(mid + rad).clamp_min(1e-10).sqrt(), (mid - rad).clamp_min(1e-10).sqrt(),
                          torch.full_like(a, 1e-4)], dim=-1)  # fmt: skip
    zero = torch.zeros_like(theta)
    quats = torch.stack([torch.cos(0.5 * theta), zero, zero, torch.sin(0.5 * theta)], dim=-1)
    flat = means - d[None, :] * ((means[:, 2] - height) / d[2])[:, None]
    return Gaussians(flat, quats, scales, torch.zeros_like(flat), opac)


def rasterize_coverage(flat: Gaussians, Ks: Tensor, X_WCs: Tensor, width: int, height: int, backend: str) -> Tensor:
    """(C,H,W) accumulated opacity of flattened shadow Gaussians in each camera."""
    if len(flat) == 0:
        return torch.zeros(len(Ks), height, width)
    with torch.no_grad():
        _, alpha, _ = rasterize(*flat.args(), Ks, X_WCs, width, height, None, backend)  # type: ignore[arg-type]
    return alpha


def table_coverage(
    means: Tensor,
    cov: Tensor,
    opacities: Tensor,
    direction: Tensor,
    Ks: Tensor,
    X_WCs: Tensor,
    width: int,
    height: int,
    backend: str = "auto",
    scale: float = 0.5,
) -> Tensor:
    """(C,H,W) in [0, 1]: how much of the key light casters (world means (N,3) m, covariances (N,3,3) m², opacities
    (N,)) block at the table point each pixel of each camera (intrinsics Ks (C,3,3), poses X_WCs (C,4,4)) sees,
    rasterised at `scale` × the image size and interpolated up (a shadow's edge is soft; half size costs a
    quarter). Shadows that reach no pixel (of a window, say) are not rasterised."""
    flat = flatten_onto_table(means, cov, opacities, direction)
    flat = flat.select(may_cover(flat.means, 3.0 * flat.scales.amax(dim=-1), Ks, X_WCs, width, height))
    if scale >= 1.0:
        return rasterize_coverage(flat, Ks, X_WCs, width, height, backend)
    w, h = max(1, round(width * scale)), max(1, round(height * scale))
    K = Ks.clone()
    K[:, 0] *= w / width
    K[:, 1] *= h / height
    small = rasterize_coverage(flat, K, X_WCs, w, h, backend)
    return functional.interpolate(small[:, None], size=(height, width), mode="bilinear", align_corners=False)[:, 0]


def light_axes(direction: Tensor) -> Tensor:
    """(2,3): two unit axes normal to `direction` (3,) and to each other (light space)."""
    d = direction
    helper = torch.tensor([1.0, 0.0, 0.0] if abs(float(d[0])) < 0.9 else [0.0, 1.0, 0.0], dtype=d.dtype)
    u = torch.linalg.cross(d, helper)
    u = u / u.norm()
    return torch.stack([u, torch.linalg.cross(d, u)])


def point_coverage(
    points: Tensor, means: Tensor, cov: Tensor, opacities: Tensor, direction: Tensor, gap: float = 0.004
) -> Tensor:
    """(P,) in [0, 1]: how much of the key light casters (world means (N,3) m, covariances (N,3,3) m², opacities
    (N,)) block at world points (P,3): 1 − ∏ (1 − opacity · G) over the casters nearer the light than the point by
    more than `gap` m, G each one's density seen along the light (its covariance projected onto the plane normal
    to `direction`)."""
    dt = torch.float64
    if len(points) == 0 or len(means) == 0:
        return torch.zeros(len(points), dtype=points.dtype)
    d = direction.to(dt)
    Q = light_axes(d)
    pts, cm = points.to(dt), means.to(dt)
    c2, p2 = cm @ Q.T, pts @ Q.T
    C = Q @ cov.to(dt) @ Q.T + 1e-10 * torch.eye(2, dtype=dt)
    a, b, c = C[:, 0, 0], C[:, 0, 1], C[:, 1, 1]
    reach = 3.0 * torch.sqrt(0.5 * (a + c) + torch.sqrt((0.5 * (a - c)) ** 2 + b * b))
    lo, hi = p2.min(dim=0).values, p2.max(dim=0).values
    near = ((c2 + reach[:, None]) > lo).all(dim=1) & ((c2 - reach[:, None]) < hi).all(dim=1)
    if not bool(near.any()):
        return torch.zeros(len(points), dtype=points.dtype)
    c2, a, b, c, t_c = c2[near], a[near], b[near], c[near], cm[near] @ d
    det = (a * c - b * b).clamp_min(1e-20)
    opac = opacities.to(dt)[near].clamp(0.0, 0.999)
    dx, dy = p2[:, None, 0] - c2[None, :, 0], p2[:, None, 1] - c2[None, :, 1]  # (P,N)
    m = (c[None] * dx * dx - 2 * b[None] * dx * dy + a[None] * dy * dy) / det[None]
    before = t_c[None, :] < (pts @ d)[:, None] - gap
    block = torch.where(before, opac[None] * torch.exp(-0.5 * m), torch.zeros_like(m))
    return (1.0 - torch.exp(torch.log1p(-block.clamp(max=0.999)).sum(dim=1))).to(points.dtype)


class ShadowCaster:
    """Casts a `ShadowLight`'s shadows from a twin's moving Gaussians (see the module docstring).

    Built once from the moving Gaussians in their bodies' frames; then, for body poses, gives the table's
    coverage per camera pixel (`table`) and colour factors for the objects' Gaussians (`object_factors`: the
    robot's Gaussians as casters, `robot_casters`, shading the objects' surface Gaussians, `shade_points`; a search
    keeps the casters and shades one object at many poses)."""

    def __init__(
        self, local: Gaussians, body_index: Tensor, object_mask: Tensor, light: ShadowLight | None = None
    ) -> None:
        """`local`: the moving Gaussians in their bodies' frames; `body_index` (M,) their MuJoCo bodies;
        `object_mask` (M,) bool the objects' (the rest are the robot's); `light` the shadow-casting light (None:
        geometry only, for `fit_shadow_light`)."""
        self.light = light
        self.direction = torch.tensor(light.direction if light else (0.0, 0.0, -1.0), dtype=torch.float32)
        self.local = local
        self.body_index = body_index
        self.object_mask = object_mask
        self._cov = covariances(local.quats, local.scales)  # body frame
        ordered, axis = torch.sort(local.scales, dim=-1)
        thin = torch.nn.functional.one_hot(axis[:, 0], 3).to(local.means)
        self._normal = quat_rotate(local.quats, thin)  # body frame; surface Gaussians' thin axis points outward
        self._flat = ordered[:, 0] < 0.5 * ordered[:, 1]

    def _world(self, xpos: np.ndarray, xquat: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
        pos = torch.as_tensor(np.asarray(xpos), dtype=torch.float32)
        R = _quat_matrices(torch.as_tensor(np.asarray(xquat), dtype=torch.float32))
        Rb = R[self.body_index]
        means = (Rb @ self.local.means[:, :, None])[:, :, 0] + pos[self.body_index]
        normals = (Rb @ self._normal[:, :, None])[:, :, 0]
        return means, Rb, normals

    def world_covariances(self, xpos: np.ndarray, xquat: np.ndarray) -> tuple[Tensor, Tensor]:
        """World means (M,3) m and covariances (M,3,3) m² of the moving Gaussians at body poses xpos, xquat."""
        means, Rb, _ = self._world(xpos, xquat)
        return means, Rb @ self._cov @ Rb.transpose(1, 2)

    def table(self, xpos: np.ndarray, xquat: np.ndarray, Ks: Tensor, X_WCs: Tensor, width: int, height: int,
              backend: str = "auto", scale: float = 0.5) -> Tensor:  # fmt: skip
        """(C,H,W): the shadow's coverage of the table point each pixel sees, for body poses xpos (nbody,3) m and
        xquat (nbody,4) wxyz (the robot's and the objects' Gaussians cast it; `table_coverage`)."""
        if self.light is None:
            raise ValueError("this ShadowCaster has no light: construct it with one to cast shadows")
        means, cov = self.world_covariances(xpos, xquat)
        opacities = self.local.opacities
        return table_coverage(means, cov, opacities, self.direction, Ks, X_WCs, width, height, backend, scale)

    def object_factors(self, xpos: np.ndarray, xquat: np.ndarray) -> Tensor:
        """(M,3) colour factors of the moving Gaussians for body poses xpos, xquat: the objects' Gaussians facing
        the light are shaded by the robot's shadow on them; every other Gaussian keeps its colour (1)."""
        means, Rb, normals = self._world(xpos, xquat)
        out = torch.ones(len(means), 3)
        if self.light is None:
            return out
        on = self.object_mask
        out[on] = self.shade_points(means[on], normals[on], self.flat[on], self._casters(means, Rb))
        return out

    def robot_casters(self, xpos: np.ndarray, xquat: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
        """The robot's Gaussians at body poses xpos (nbody,3) m, xquat (nbody,4) wxyz, as shadow casters: world means
        (N,3) m, covariances (N,3,3) m², opacities (N,). For `shade_points`; fixed while only an object moves (a
        search of its pose)."""
        means, Rb, _ = self._world(xpos, xquat)
        return self._casters(means, Rb)

    def _casters(self, means: Tensor, Rb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """`robot_casters` from every moving Gaussian's world mean (M,3) and its body's rotation (M,3,3)."""
        cast = ~self.object_mask
        return means[cast], Rb[cast] @ self._cov[cast] @ Rb[cast].transpose(1, 2), self.local.opacities[cast]

    def shade_points(
        self, points: Tensor, normals: Tensor, flat: Tensor, casters: tuple[Tensor, Tensor, Tensor]
    ) -> Tensor:
        """(P,3) colour factors of surface Gaussians at world `points` (P,3) m with outward world `normals` (P,3) and
        `flat` (P,) bool (only flat ones have a normal): those facing the light are shaded by the `casters`'
        shadow (`robot_casters`), 1 − coverage · (1 − attenuation); the rest keep their colour (1). With
        `ShadowLight.shade_faces`, every flat one is also lit by its normal: (1 + r·lit) / (1 + r·up), lit its cosine to
        the light (≥ 0) × the part out of the shadow, up the table's cosine, r the key over the rest per channel (1 /
        attenuation − 1 over up); an upward one gets the same factor either way."""
        out = torch.ones(len(points), 3)
        if self.light is None:
            return out
        cosine = normals.to(self.direction) @ -self.direction
        receive = flat & (cosine > 0.2)  # flat and facing the light
        up = float(-self.direction[2])  # the table's cosine to the light
        # The key light each one receives, as a cosine; without `shade_faces` every face counts as an upward one.
        lit = cosine.clamp_min(0.0) if self.light.shade_faces else torch.full_like(cosine, up)
        means, cov, opacities = casters
        if bool(receive.any()) and len(means):
            coverage = point_coverage(points[receive], means, cov, opacities, self.direction).clamp(0.0, 1.0)
            lit[receive] = lit[receive] * (1.0 - coverage)
        # Key over fill and ambient per channel, from the full shadow's attenuation of the table: k = 1 / (1 + r·up).
        ratio = (1.0 / torch.as_tensor(self.light.attenuation, dtype=out.dtype) - 1.0) / up
        shaded = flat if self.light.shade_faces else receive
        out[shaded] = (1.0 + ratio * lit[shaded, None]) / (1.0 + ratio * up)
        return out

    @property
    def body_normals(self) -> Tensor:
        """(M,3) each moving Gaussian's outward normal in its body's frame (its thinnest axis; see `flat`)."""
        return self._normal

    @property
    def flat(self) -> Tensor:
        """(M,) bool: the Gaussians flat enough to have a normal (surface Gaussians)."""
        return self._flat


def _ring(mask: Tensor, width: int) -> Tensor:
    """Pixels within `width` px of `mask` (C,H,W) bool, the mask itself included."""
    return functional.max_pool2d(mask[:, None].float(), 2 * width + 1, stride=1, padding=width)[:, 0] > 0


def _contrast(
    coverage: Tensor, table: Tensor, luminance: Tensor, config: ShadowFitConfig
) -> tuple[float, Tensor, Tensor]:
    """(lit / shadowed median brightness, the shadowed pixels, the lit ring's pixels) for one candidate's coverage
    (C,H,W), over the `table` pixels (C,H,W) bool; 0 when either set is smaller than `min_pixels`."""
    inside = table & (coverage > config.inside)
    ring = table & (coverage < config.outside) & _ring(coverage > 0.5 * (config.inside + config.outside), config.ring)
    if int(inside.sum()) < config.min_pixels or int(ring.sum()) < config.min_pixels:
        return 0.0, inside, ring
    shadowed = float(luminance[inside].median())
    lit = float(luminance[ring].median())
    return lit / max(shadowed, 1e-6), inside, ring


def _agreement(coverage: Tensor, table: Tensor, log_luminance: Tensor) -> float:
    """Correlation, over the `table` pixels, between a candidate's coverage (C,H,W) and the darkness (−log
    brightness) of the image: how well its shadow's whole shape, edges included, lines up with the dark."""
    c, d = coverage[table], -log_luminance[table]
    c, d = c - c.mean(), d - d.mean()
    return float((c * d).sum() / (c.norm() * d.norm()).clamp_min(1e-12))


def fit_shadow_light(
    geometry: ShadowCaster,
    xpos: np.ndarray,
    xquat: np.ndarray,
    table: Tensor,
    images: Tensor,
    Ks: Tensor,
    X_WCs: Tensor,
    config: ShadowFitConfig = ShadowFitConfig(),
    backend: str = "auto",
) -> ShadowLight | None:
    """The key light whose shadow best explains the real images (C,H,W,3) in [0, 1] (or uint8) of the twin's
    moving bodies at poses xpos (nbody,3) m, xquat (nbody,4) wxyz (the robot at the real arm's joints): `geometry`
    is a `ShadowCaster` of those bodies (its light, if any, is ignored); `table` (C,H,W) bool marks the pixels where the
    table is in view and nothing the twin knows of stands in front of it; cameras Ks (C,3,3), X_WCs (C,4,4).
    Returns None when no candidate's shadow is darker than its surroundings by `min_contrast` (logged)."""
    if not config.enabled:
        return None
    img = images.to(torch.float32) / 255.0 if images.dtype == torch.uint8 else images.to(torch.float32)
    luminance = img.mean(dim=-1)
    h, w = luminance.shape[1:]
    means, cov = geometry.world_covariances(xpos, xquat)
    opacities = geometry.local.opacities

    def coverage(azimuth: float, elevation: float) -> Tensor:
        d = torch.tensor(light_direction(azimuth, elevation), dtype=torch.float32)
        return table_coverage(means, cov, opacities, d, Ks, X_WCs, w, h, backend)

    log_luminance = luminance.clamp_min(1e-3).log()

    def score(azimuth: float, elevation: float) -> float:
        return _agreement(coverage(azimuth, elevation), table, log_luminance)

    candidates = [
        (math.radians(a), math.radians(e))
        for e in config.elevations
        for a in np.arange(-180.0, 180.0, config.azimuth_step)
    ]
    best = candidates[int(np.argmax([score(*ae) for ae in candidates]))]
    step = math.radians(config.refine_step)
    for _ in range(config.refinements):
        candidates = [
            (best[0] + i * step, min(max(best[1] + j * step, math.radians(5)), math.radians(88)))
            for i in range(-2, 3)
            for j in range(-2, 3)
        ]
        best = candidates[int(np.argmax([score(*ae) for ae in candidates]))]
        step /= 2
    azimuth, elevation = best
    contrast = _contrast(coverage(azimuth, elevation), table, luminance, config)[0]
    if contrast < config.min_contrast:
        log.info("no shadow: the best candidate light's shadow is %.2f× darker than its surroundings (need %.2f)",
                 contrast, config.min_contrast)  # fmt: skip
        return None
    _, inside, ring = _contrast(coverage(azimuth, elevation), table, luminance, config)
    k = (img[inside].median(dim=0).values / img[ring].median(dim=0).values.clamp_min(1e-6)).clamp(0.05, 1.0)
    light = ShadowLight(
        light_direction(azimuth, elevation),
        tuple(float(x) for x in k),  # type: ignore[arg-type]
        contrast,
        config.shade_faces,
    )
    log.info("shadow: key light from azimuth %.1f°, elevation %.1f°; shadow %.2f× darker (rgb × %.2f %.2f %.2f)",
             math.degrees(azimuth), math.degrees(elevation), contrast, *light.attenuation)  # fmt: skip
    return light
