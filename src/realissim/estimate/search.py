"""Re-acquisition: find a lost object again from the camera images alone, and put the twin's object there.

When the twin's object has drifted far from the real one (its render no longer overlaps the object in the
images), the correction's gradients vanish or lead into a local minimum. `ObjectSearch.search` instead
searches the object's planar pose (x, y, yaw) globally: seeded by the colour sighting (`estimate.sighting`) for
position and, for yaw, by the four directions of the seen pixels' principal axes (an asymmetric object such
as the T needs all four) plus a coarse sweep; each candidate is scored by render and compare (the object's
Gaussians at the candidate pose — shaded by the arm's shadow there where the twin renders the key light's —,
robot at the real arm's joints for occlusion, the ground, over one fixed window of every camera around the
sighting; after a least-squares exposure gain per camera and channel, as the correction does, the loss compares
each pixel's chromaticity, which shadows and shading the twin does not render leave nearly unchanged); the best
candidates are refined coarse to fine by pattern
search (±step in x, y and yaw, steps halved per level). Everything is deterministic.

An object that fell onto a side (a real T standing on its bar's top face) is no lying pose: when the lying search
finds nothing, or little, the object's tipped rests (`twin.rests`) are searched the same way, and a tipped pose
that explains the images clearly is reported (`SearchResult.tipped`) instead of a lying one; the twin does not
place it (`SearchConfig.tipped`).

`estimate.placement.place_object` then moves the twin's object to the found pose.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import mujoco
import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from realissim.estimate.photometric import photometric_loss
from realissim.estimate.sighting import ObjectSighting, Sighting, SightingConfig, on_hue
from realissim.geometry import quat_mul, quat_to_mat, quat_yaw, yaw_quat
from realissim.render import rasterize
from realissim.twin.physics import TwinPhysics
from realissim.twin.rests import Rest, tipped_rests
from realissim.views.cameras import TwinViews, ViewWindow
from realissim.views.shadows import ShadowCaster

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchConfig:
    """The global search of an object's planar pose."""

    yaw_sweep: int = 12
    """Coarse yaw candidates, evenly spaced over a full turn (besides the four principal-axis ones)."""
    keep: int = 2
    """Coarse candidates (best first, ≥ `step_yaw` apart in yaw) refined at the first level; the best of them
    is refined further."""
    levels: int = 3
    """Refinement levels; the steps halve from one to the next; a parabola through the last level's scores then
    gives sub-step precision (4 levels without it: the same accuracy for 12 more renders)."""
    step_xy: float = 0.02
    """First level's position step, m."""
    step_yaw: float = math.radians(10.0)
    """First level's yaw step, rad."""
    max_moves: int = 4
    """Pattern-search moves per level at most."""
    window_margin: int = 4
    """Pixels added around the region the object can occupy during the search (its reach around the sighting
    plus the refinement's travel)."""
    min_hue: float = 0.5
    """The object's Gaussians whose colour has less than this fraction of the object's reference saturation along
    its hue are left out of the renders: the colour fit turns some edge Gaussians cyan or grey to cancel their
    neighbours' bleed at the calibration pose, which is wrong once the object has turned (measured:
    docs/decisions.md)."""
    compare: Literal["chromaticity", "intensity"] = "chromaticity"
    """What the score compares, pixel by pixel, after the exposure gain: "chromaticity" each pixel's colour divided
    by its brightness (r, g, b) / (r + g + b + `chroma_floor`), which a shadow or a shading the twin does not
    render leaves nearly unchanged; "intensity" the colours themselves, which a T in the arm's shadow misleads
    (docs/decisions.md, "The search compares chromaticity")."""
    chroma_floor: float = 0.2
    """Added to a pixel's brightness (r + g + b, 0–3) before dividing: dark pixels, whose colour is mostly noise,
    weigh less."""
    loss: Literal["l2", "l1", "huber"] = "huber"
    """Photometric loss of the score, per pixel and channel, averaged over the window."""
    huber_delta: float = 0.1
    """Huber's δ (in the compared units; intensity: 1 = full scale): the ground's texture residuals stay quadratic,
    the object's (≈ 0.4) turn linear (measured: docs/decisions.md)."""
    min_explained: float = 0.05
    """The found pose must lower the window's loss at least by this fraction of the loss with the object absent
    (rendered nowhere), or the search reports that it found nothing reliable; found right, the T explains ≥ 0.3
    even in the arm's shadow (docs/decisions.md, "The search compares chromaticity")."""
    shade: bool = True
    """Where the twin renders the key light's shadow (`TwinViews.shadow`), each candidate's Gaussians are shaded by
    the robot's shadow at the candidate pose, as the correction's render shades the twin's object: scored against
    a lit T, a T in the arm's shadow under a low key light explained the images worse than no T at all
    (docs/decisions.md, "The search shades its candidates"). False: every candidate lit."""
    tipped: bool = True
    """When the object is not found lying, or found lying but explaining little (`tipped_below`), search its tipped
    rests too (`twin.rests`: standing on a side of its hull, where it stays still), coloured one colour all over (the
    faces the cameras never saw face them then). A real object that fell over is then recognised and reported, not
    "found" lying where a lying one explains the images a little better than nothing. The twin does not place a
    tipped object (its sphere layer would balance on a line); the detector goes on holding the arm
    (docs/decisions.md, "A T standing on a side")."""
    tipped_below: float = 0.15
    """... and when the lying pose found explains less than this fraction of the object-absent loss (found lying,
    the T explains 0.24–0.54; a standing T was "found" lying at 0.05–0.09)."""
    tipped_explained: float = 0.15
    """A tipped pose is recognised when it lowers the loss of the tipped search's window by at least this fraction
    of the object-absent loss, ..."""
    tipped_ratio: float = 2.0
    """... and by at least this many times what the best lying pose lowers it."""
    sighting: SightingConfig = field(default_factory=SightingConfig)
    """The colour sighting that seeds the search (when `ObjectSearch` builds its own)."""

    def __post_init__(self) -> None:
        if self.yaw_sweep < 1 or self.keep < 1 or self.levels < 1 or self.max_moves < 1:
            raise ValueError("yaw_sweep, keep, levels, max_moves: must be ≥ 1")
        for name in ("step_xy", "step_yaw", "huber_delta", "chroma_floor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if not 0 <= self.min_hue < 1:
            raise ValueError(f"min_hue: must be in [0, 1), got {self.min_hue}")
        if not 0 <= self.min_explained < 1:
            raise ValueError(f"min_explained: must be in [0, 1), got {self.min_explained}")
        if not 0 <= self.tipped_explained < 1 or not self.tipped_ratio >= 1 or not 0 <= self.tipped_below < 1:
            raise ValueError(f"tipped_explained, tipped_below: must be in [0, 1), tipped_ratio ≥ 1, got "
                             f"{self.tipped_explained}, {self.tipped_below}, {self.tipped_ratio}")  # fmt: skip


@dataclass(frozen=True)
class TippedPose:
    """An object recognised standing on a side (`SearchConfig.tipped`). World frame."""

    rest: str
    """The rest's name (`twin.rests.Rest.name`)."""
    pos: np.ndarray
    """(3,) m: the body origin."""
    quat: np.ndarray
    """(4,) wxyz."""
    yaw: float
    """rad: the yaw about the world's z of the rest's orientation."""
    explained: float
    """Fraction of the tipped window's object-absent loss the pose removes."""
    lying_explained: float
    """... and the fraction the best lying pose removes."""


@dataclass(frozen=True)
class SearchResult:
    """One search for one object. Poses in the world frame; scores are the photometric loss over the search's
    window (lower is better), all under the same measure."""

    found: bool
    """The object was seen and the best pose explains the images (`min_explained`), and better than the best tipped
    pose where the tipped rests were searched (`SearchConfig.tipped`); when False, `pos`/`quat` are not to be
    used."""
    pos: np.ndarray
    """(3,) m: the best position, at the twin's current object height (the twin's position if not seen)."""
    quat: np.ndarray
    """(4,) wxyz: the best orientation, flat on the table at the best yaw (the twin's if not seen)."""
    yaw: float
    """rad, in (−π, π]: the best yaw (NaN if not seen)."""
    score: float
    """Loss at the best pose (NaN if not seen)."""
    current_score: float
    """Loss with the object at the twin's current pose (NaN if not seen)."""
    empty_score: float
    """Loss with the object absent (NaN if not seen)."""
    seconds: float
    """Wall time of the search, s."""
    renders: int
    """Candidate renders made."""
    sighting: ObjectSighting
    """The sighting that seeded the search."""
    tipped: TippedPose | None = None
    """Not found lying, but standing on a side (`SearchConfig.tipped`): where; `found` is then False."""


class ObjectSearch:
    """Global search of the twin's objects' planar poses in the real images (see the module docstring)."""

    def __init__(
        self,
        views: TwinViews,
        model: mujoco.MjModel,
        config: SearchConfig = SearchConfig(),
        sighting: Sighting | None = None,
    ) -> None:
        """`views` renders the twin into the real cameras (calibrated: `fit_colors`, `refine_cameras`); `model` is
        the twin's MuJoCo model; `sighting` (of the same views) is shared if given, else built from
        `config.sighting`."""
        if sighting is not None and sighting.views is not views:
            raise ValueError("sighting: must be of the same TwinViews as the search")
        self.views, self.config, self.model = views, config, model
        self.sighting = sighting if sighting is not None else Sighting(views, model, config.sighting)
        self._rests: dict[int, tuple[float, list[Rest]]] = {}

    def search(self, twin: TwinPhysics, q_real: ArrayLike, images: np.ndarray | Tensor, obj: int = 0) -> SearchResult:
        """Search object `obj` (index in `sighting.object_bodies`, the scene's object order) in the real images
        (C,H,W,3) uint8 RGB, the robot at the real arm's measured joints q_real (J,) rad. Does not change the
        twin."""
        xpos, xquat = self.sighting.poses(twin.data.qpos, twin.layout.robot_qpos, q_real)
        return self.search_poses(xpos, xquat, images, obj)

    def search_poses(
        self, xpos: np.ndarray, xquat: np.ndarray, images: np.ndarray | Tensor, obj: int = 0
    ) -> SearchResult:
        """`search` for body poses xpos (nbody,3) m, xquat (nbody,4) wxyz (robot at the real arm's joints)."""
        start = time.perf_counter()
        seen = self.sighting(xpos, xquat, images)[obj]
        body = int(self.sighting.object_bodies[obj])
        if not seen.seen:
            log.info("search: object %d not seen (pixels per camera %s)", obj, seen.pixels.tolist())
            return _not_seen(xpos[body], xquat[body], start, seen)
        scorer = _Scorer(self, xpos, xquat, images, obj, seen)
        best = self._optimise(scorer, seen)
        score = scorer(best)
        current = scorer.score(scorer.at_body_pose(xpos[body], xquat[body]))
        empty = scorer.score(None)
        found = bool(score <= (1.0 - self.config.min_explained) * empty)
        yaw = math.remainder(best[2], 2 * math.pi)
        pos = np.array([best[0], best[1], seen.height])
        seconds = time.perf_counter() - start
        log.info(
            "search: object %d %s at (%.3f, %.3f) m, yaw %.1f° (score %.5f, current %.5f, empty %.5f; %d renders, "
            "%.0f ms)", obj, "found" if found else "NOT found", pos[0], pos[1], math.degrees(yaw), score, current,
            empty, scorer.renders, 1e3 * seconds,
        )  # fmt: skip
        quat = np.asarray(yaw_quat(yaw), dtype=np.float64)
        renders = scorer.renders
        tipped = None
        if self.config.tipped and score > (1.0 - self.config.tipped_below) * empty:
            t_scorer = self._tipped_search(xpos, xquat, images, obj, seen, body)
            if t_scorer is not None:
                tipped, better = self._recognise(t_scorer, seen, best, obj)
                renders += t_scorer.renders
                seconds = time.perf_counter() - start
                found = found and not better and tipped is None  # a tipped pose explains the same pixels better
        return SearchResult(found, pos, quat, yaw, score, current, empty, seconds, renders, seen, tipped)

    def search_near(
        self, twin: TwinPhysics, q_real: ArrayLike, images: np.ndarray | Tensor, obj: int = 0
    ) -> SearchResult:
        """A local search of object `obj` about the twin's own pose (`search`'s arguments): the pattern search's
        refinement from the twin's x, y, yaw, its second level (half the first steps) to its last and the vertex,
        without the coarse candidates or the tipped rests — a quarter to two thirds of `search`'s renders (it travels
        up to 6 cm at the default steps). What it finds is only
        the best pose near the twin's: an object elsewhere is "found" there only if that pose explains the images
        (`min_explained`), so a caller that trusts it must ask for more (the alarm check asks it to explain a fifth of
        the object-absent loss, and falls back on `search`). Does not change the twin."""
        xpos, xquat = self.sighting.poses(twin.data.qpos, twin.layout.robot_qpos, q_real)
        start = time.perf_counter()
        seen = self.sighting(xpos, xquat, images)[obj]
        body = int(self.sighting.object_bodies[obj])
        if not seen.seen:
            return _not_seen(xpos[body], xquat[body], start, seen)
        scorer = _Scorer(self, xpos, xquat, images, obj, seen)
        p = (float(xpos[body, 0]), float(xpos[body, 1]), float(quat_yaw(xquat[body])))
        current = scorer.score(scorer.at_body_pose(xpos[body], xquat[body]))
        for level in range(min(1, self.config.levels - 1), self.config.levels):
            p = self._refine(scorer, p, level)
        v = self._vertex(scorer, p, self.config.levels - 1)
        p = v if scorer(v) < scorer(p) else p
        score, empty = scorer(p), scorer.score(None)
        found = bool(score <= (1.0 - self.config.min_explained) * empty)
        yaw = math.remainder(p[2], 2 * math.pi)
        seconds = time.perf_counter() - start
        log.info("near search: object %d %s at (%.3f, %.3f) m, yaw %.1f° (score %.5f, current %.5f, empty %.5f; %d "
                 "renders, %.0f ms)", obj, "found" if found else "NOT found", p[0], p[1], math.degrees(yaw), score,
                 current, empty, scorer.renders, 1e3 * seconds)  # fmt: skip
        pos = np.array([p[0], p[1], seen.height])
        quat = np.asarray(yaw_quat(yaw), dtype=np.float64)
        return SearchResult(found, pos, quat, yaw, score, current, empty, seconds, scorer.renders, seen)

    def _tipped_search(
        self,
        xpos: np.ndarray,
        xquat: np.ndarray,
        images: np.ndarray | Tensor,
        obj: int,
        seen: ObjectSighting,
        body: int,
    ) -> _Scorer | None:
        """A scorer over the object's tipped rests (None: it has none)."""
        if body not in self._rests:
            self._rests[body] = tipped_rests(self.model, body)
        lying, rests = self._rests[body]
        if not rests:
            return None
        table = seen.height - lying
        poses = [(np.array([1.0, 0.0, 0.0, 0.0]), seen.height)] + [(r.quat, table + r.height) for r in rests]
        return _Scorer(self, xpos, xquat, images, obj, seen, poses)

    def _recognise(
        self, scorer: _Scorer, seen: ObjectSighting, lying: tuple[float, float, float], obj: int
    ) -> tuple[TippedPose | None, bool]:
        """The best tipped pose if it explains the images clearly (`tipped_explained`, `tipped_ratio`), and whether
        it explains them better than the best lying pose `lying` (both over the tipped search's window)."""
        cfg = self.config
        _, rests = self._rests[int(self.sighting.object_bodies[obj])]
        empty, lying_score = scorer.score(None), scorer(lying)
        r, p = self._descend(scorer, seen, range(1, len(rests) + 1), distinct=False, vertex=False)
        score = scorer(p)  # (at the rest `_descend` left the scorer on)
        scorer.rest = 0
        explained, lying_explained = 1.0 - score / empty, 1.0 - lying_score / empty
        recognised = explained >= cfg.tipped_explained and explained >= cfg.tipped_ratio * max(lying_explained, 0.0)
        log.info("search: object %d %s tipped (%s at (%.3f, %.3f) m, yaw %.1f°: explains %.2f, lying %.2f)", obj,
                 "seen" if recognised else "not seen", rests[r - 1].name, p[0], p[1], math.degrees(p[2]), explained,
                 lying_explained)  # fmt: skip
        better = explained > lying_explained
        if not recognised:
            return None, better
        quat, height = scorer.poses[r]
        yaw = math.remainder(p[2], 2 * math.pi)
        pose = TippedPose(rests[r - 1].name, np.array([p[0], p[1], height]), quat_mul(yaw_quat(yaw), quat), yaw,
                          explained, lying_explained)  # fmt: skip
        return pose, better

    def _optimise(self, scorer: _Scorer, seen: ObjectSighting) -> tuple[float, float, float]:
        """The best lying (x, y, yaw) (`_descend` over the flat rest, candidates apart in yaw, then the vertex)."""
        return self._descend(scorer, seen, (0,), distinct=True, vertex=True)[1]

    def _descend(
        self, scorer: _Scorer, seen: ObjectSighting, rests: Iterable[int], distinct: bool, vertex: bool
    ) -> tuple[int, tuple[float, float, float]]:
        """The best (rest, (x, y, yaw)) over `rests` (indices into `scorer.poses`): coarse candidates at the
        sighting's centroid (its principal yaws and `yaw_sweep` even ones, every rest), the `keep` best (with
        `distinct`, ≥ `step_yaw` apart in yaw within a rest) refined one level, the best of them to the last level;
        with `vertex`, a parabola's vertex then where it scores lower. Leaves `scorer.rest` at the best rest."""
        cfg = self.config
        x, y = (float(v) for v in seen.position)
        yaws = seen.principal_yaws() + [2 * math.pi * i / cfg.yaw_sweep for i in range(cfg.yaw_sweep)]
        coarse: list[tuple[float, int, tuple[float, float, float]]] = []
        for r in rests:
            scorer.rest = r
            coarse += [(scorer((x, y, a)), r, (x, y, a)) for a in yaws]
        kept: list[tuple[float, int, tuple[float, float, float]]] = []
        for c in sorted(coarse, key=lambda c: c[0]):  # (stable: ties keep the candidates' order)
            apart = (k[1] != c[1] or abs(math.remainder(c[2][2] - k[2][2], 2 * math.pi)) >= cfg.step_yaw for k in kept)
            if not distinct or all(apart):
                kept.append(c)
            if len(kept) == cfg.keep:
                break
        refined = []
        for _, r, p in kept:
            scorer.rest = r
            p = self._refine(scorer, p, 0)
            refined.append((scorer(p), r, p))
        _, r, p = min(refined, key=lambda c: c[0])
        scorer.rest = r
        for level in range(1, cfg.levels):
            p = self._refine(scorer, p, level)
        if vertex:
            v = self._vertex(scorer, p, cfg.levels - 1)
            p = v if scorer(v) < scorer(p) else p
        return r, p

    def _vertex(self, scorer: _Scorer, p: tuple[float, float, float], level: int) -> tuple[float, float, float]:
        """The vertex of a parabola through each coordinate's three scores at the last level (already scored):
        sub-step precision for one more render."""
        steps = (self.config.step_xy / 2**level,) * 2 + (self.config.step_yaw / 2**level,)
        out = list(p)
        for i, s in enumerate(steps):
            lo, hi = list(p), list(p)
            lo[i], hi[i] = p[i] - s, p[i] + s
            f_lo, f_0, f_hi = scorer(tuple(lo)), scorer(p), scorer(tuple(hi))  # type: ignore[arg-type]
            curvature = f_lo - 2 * f_0 + f_hi
            if curvature > 0:
                out[i] = p[i] + float(np.clip(0.5 * s * (f_lo - f_hi) / curvature, -s / 2, s / 2))
        return out[0], out[1], out[2]

    def _refine(self, scorer: _Scorer, p: tuple[float, float, float], level: int) -> tuple[float, float, float]:
        """Pattern search at one level: move to the best of the six ±step neighbours while it improves."""
        cfg = self.config
        s, a = cfg.step_xy / 2**level, cfg.step_yaw / 2**level
        steps = [(s, 0, 0), (-s, 0, 0), (0, s, 0), (0, -s, 0), (0, 0, a), (0, 0, -a)]
        for _ in range(cfg.max_moves):
            around = [(p[0] + dx, p[1] + dy, p[2] + dz) for dx, dy, dz in steps]
            best = min(around, key=lambda q: (scorer(q), around.index(q)))
            if scorer(best) >= scorer(p):
                break
            p = best
        return p


class _Scorer:
    """Scores planar poses of one object against the real images over one fixed window (memoised). The
    Gaussians are kept as numpy arrays (means, quats, scales, colours, opacities) so that per candidate only the
    rasteriser runs (and, with `SearchConfig.shade` under a shadow light, the shadow's coverage of the object's
    Gaussians: ~2.5× the search's time): torch's and numba's thread pools taking turns are slow on a busy 2-core
    machine."""

    def __init__(
        self,
        search: ObjectSearch,
        xpos: np.ndarray,
        xquat: np.ndarray,
        images: np.ndarray | Tensor,
        obj: int,
        seen: ObjectSighting,
        poses: list[tuple[np.ndarray, float]] | None = None,
    ) -> None:
        """`poses`: the orientations at yaw 0 (wxyz) and body heights (m) the candidates take, chosen by `rest`
        (None: lying flat at the sighting's height, with the lying search's window)."""
        cfg, views = search.config, search.views
        self.config, self.views = cfg, views
        self.poses = poses if poses is not None else [(np.array([1.0, 0.0, 0.0, 0.0]), seen.height)]
        self.rest = 0
        self.renders = 0
        self._memo: dict[tuple[int, float, float, float], float] = {}
        mine = (views.body_index == int(search.sighting.object_bodies[obj])).cpu().numpy()
        local = [t.detach().cpu().numpy() for t in views.local.args()]
        keep = mine.copy()
        keep[mine] = on_hue(local[3][mine].astype(np.float64), search.sighting.references()[obj], cfg.min_hue)
        if poses is not None:  # tipped: faces the cameras never saw (the bottom) face them; one colour all over,
            # the median of the object's on-hue Gaussians, on every Gaussian of the object
            local[3] = local[3].copy()
            local[3][mine] = np.median(local[3][keep if keep.any() else mine], axis=0)
            keep = mine
        self._local = [a[keep] for a in local]
        shadow = views.shadow
        self._shade: tuple[np.ndarray, Tensor, tuple[Tensor, Tensor, Tensor], ShadowCaster] | None = None
        if cfg.shade and shadow is not None and shadow.light is not None:  # the robot stays at the real arm's pose
            keep_t = torch.from_numpy(keep)
            normals = shadow.body_normals[keep_t].cpu().numpy().astype(np.float64)
            self._shade = (normals, shadow.flat[keep_t].cpu(), shadow.robot_casters(xpos, xquat), shadow)
        if poses is None:
            reach = float(search.sighting.object_radius[obj]) + cfg.step_xy
            z = self._local[0][:, 2]
            heights = seen.height + np.array([z.min(), z.max()])
        else:  # every rest's extent: its planar reach and its heights
            turned = [self._local[0].astype(np.float64) @ quat_to_mat(q).T + (0.0, 0.0, h) for q, h in poses]
            reach = max(float(np.linalg.norm(t[:, :2], axis=1).max()) for t in turned) + cfg.step_xy
            heights = np.array([min(t[:, 2].min() for t in turned), max(t[:, 2].max() for t in turned)])
        self.window = _search_window(views, seen, reach, heights, cfg.window_margin)
        moving = views.moving(xpos, xquat)
        fixed = [t.detach()[torch.as_tensor(~mine, device=t.device)] for t in moving.args()]
        if views.static_layer is None:  # gsplat: the ground is rasterised with everything else
            fixed = [torch.cat([a, b]) for a, b in zip(fixed, views.static.args())]
        touching = self.window.touches(fixed[0], 3.0 * fixed[2].amax(dim=-1))
        self._fixed = [t[touching].cpu().numpy() for t in fixed]
        target = torch.as_tensor(np.asarray(images) if not isinstance(images, Tensor) else images)
        target = target.to(torch.float32) / 255.0 if target.dtype == torch.uint8 else target.to(torch.float32)
        self._seen = self.window.cut(target.cpu()).numpy()
        self._target = self._compared(self._seen)

    def __call__(self, p: tuple[float, float, float]) -> float:
        """Loss with the object at x, y (m), yaw (rad) in the rest `self.rest` of `self.poses` (0 by default: flat
        at the current height)."""
        key = (self.rest, *p)
        if key not in self._memo:
            quat, height = self.poses[self.rest]
            self._memo[key] = self.score(self.at_body_pose(np.array([p[0], p[1], height]),
                                                           quat_mul(yaw_quat(p[2]), quat)))  # fmt: skip
        return self._memo[key]

    def at_body_pose(self, pos: ArrayLike, quat: ArrayLike) -> list[np.ndarray]:
        """The object's Gaussians (numpy arrays, float32) with its body at pos (3,) m, quat (4,) wxyz."""
        means, quats, *rest = self._local
        q = np.asarray(quat, dtype=np.float64)
        q = q / np.linalg.norm(q)
        R = quat_to_mat(q)
        placed = (means @ R.T.astype(np.float32) + np.asarray(pos, dtype=np.float32)).astype(np.float32)
        scales, colors, opacities = rest
        if self._shade is not None:  # shaded by the robot's shadow where it falls at this pose
            normals, flat, casters, shadow = self._shade
            factors = shadow.shade_points(torch.from_numpy(placed), torch.from_numpy(normals @ R.T), flat, casters)
            colors = (colors * factors.numpy()).astype(np.float32)
        return [placed, quat_mul(q, quats).astype(np.float32), scales, colors, opacities]

    def score(self, gaussians: list[np.ndarray] | None) -> float:
        """Loss with the object's Gaussians (None: the object absent) rendered with the fixed ones (the renderer
        checks its inputs at the scorer's first render only: the later ones place the same Gaussians at other finite
        poses)."""
        cfg, views, win = self.config, self.views, self.window
        args = self._fixed if gaussians is None else [np.concatenate([a, b]) for a, b in zip(gaussians, self._fixed)]
        tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(views.device) for a in args]
        with torch.no_grad():
            rgb, _, _ = rasterize(
                *tensors, win.Ks, views.X_WCs, win.width, win.height, views.background, views.backend,
                static=win.static_layer, eps2d=views.eps2d, validate=self.renders == 0,
            )  # fmt: skip
        r, t = rgb.cpu().numpy(), self._seen
        gain = (r * t).sum(axis=(1, 2)) / np.maximum((r * r).sum(axis=(1, 2)), 1e-9)
        fitted = torch.from_numpy(self._compared(r * gain[:, None, None]))
        loss = photometric_loss(fitted, torch.from_numpy(self._target), cfg.loss, cfg.huber_delta)
        self.renders += 1
        return float(loss)

    def _compared(self, rgb: np.ndarray) -> np.ndarray:
        """What the score compares of images (..., 3) in [0, 1] (`SearchConfig.compare`)."""
        if self.config.compare == "intensity":
            return rgb
        return rgb / (rgb.sum(axis=-1, keepdims=True) + self.config.chroma_floor)


def _not_seen(pos: np.ndarray, quat: np.ndarray, start: float, seen: ObjectSighting) -> SearchResult:
    """The result of a search whose object was not seen: not found, at the twin's pose (3,), (4,) m, wxyz; timed
    from `start` (`time.perf_counter()`)."""
    nan = math.nan
    return SearchResult(False, pos.copy(), quat.copy(), nan, nan, nan, nan, time.perf_counter() - start, 0, seen)


def _search_window(
    views: TwinViews, seen: ObjectSighting, reach: float, heights: np.ndarray, margin: int
) -> ViewWindow:
    """The window of every camera covering the object anywhere within `reach` m of the sighting, at any yaw
    (`heights` (2,) m: the lowest and highest its Gaussians' means reach)."""
    angles = np.linspace(0.0, 2 * math.pi, 16, endpoint=False)
    ring = np.stack([np.cos(angles), np.sin(angles)], axis=1) * reach / math.cos(math.pi / 16) + seen.position
    pts = [np.column_stack([ring, np.full(len(ring), z)]) for z in heights]
    return views.window(np.concatenate(pts), margin, multiple=8)
