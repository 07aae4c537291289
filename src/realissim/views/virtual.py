"""Virtual cameras rendered from the twin, for policies' observations.

A wrist camera rigidly mounted on the arm's flange, and any of the scene's fixed cameras re-imaged at
a policy's resolution (96 × 96 px by default), rendered from the twin's body poses with the Gaussian
rasteriser. Fixed cameras go through `TwinViews` (the ground pre-rendered once as a static layer).
The wrist camera moves with the arm, so the ground is rasterised with everything else, after culling
the Gaussians that provably cannot reach its image (which leaves the image unchanged).

Dependencies point down: this module → `views.cameras`, `views.appearance` → `render`, `geometry`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import mujoco
import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from realissim.assets.appearance import AppearanceConfig
from realissim.assets.panda import FLANGE_SITE
from realissim.geometry import intrinsics_from_fov, look_at, pose_matrix, quat_to_mat
from realissim.render import rasterize
from realissim.render.common import DEFAULT_NEAR, EPS2D, FOV_CLAMP
from realissim.render.gaussians import Gaussians, place
from realissim.spec.scene import SceneSpec
from realissim.views.appearance import SceneAppearance
from realissim.views.cameras import DEFAULT_BACKGROUND, TwinViews

log = logging.getLogger(__name__)

WRIST = "wrist"
"""Name of the wrist camera among the virtual cameras."""
MIN_SIZE = 16
"""Smallest image side, px (one rasteriser tile)."""


@dataclass(frozen=True)
class WristMount:
    """The wrist camera's mount: points in the flange site's frame (`FLANGE_SITE`: origin at the flange,
    z along the pusher rod towards its tip), m, and its vertical field of view."""

    eye: tuple[float, float, float] = (0.06, 0.0, 0.01)
    """Optical centre: 6 cm beside the rod's axis, 1 cm below the flange."""
    target: tuple[float, float, float] = (0.0, 0.0, 0.2)
    """Point on the optical axis: the tip of the default 0.2 m rod, so the table around it is in view."""
    up: tuple[float, float, float] = (1.0, 0.0, 0.0)
    """Direction that appears up in the image (away from the rod, which enters from the bottom)."""
    fovy: float = math.radians(80.0)
    """Vertical field of view, rad."""

    def __post_init__(self) -> None:
        if not 0.0 < self.fovy < math.pi:
            raise ValueError(f"WristMount.fovy: must be in (0, π) rad, got {self.fovy}")

    def X_FC(self) -> np.ndarray:
        """Camera pose (4, 4) in the flange site frame, OpenCV axes."""
        return look_at(self.eye, self.target, self.up)


Backend = Literal["auto", "cpu", "reference"]
"""Rasteriser backends on CPU tensors ("auto": the numba path)."""


class WristCamera:
    """A pinhole camera (`width` × `height` px) rigidly attached to the body that carries `FLANGE_SITE`
    (panda_link7), mounted by a `WristMount`."""

    def __init__(self, model: mujoco.MjModel, mount: WristMount, width: int, height: int) -> None:
        site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, FLANGE_SITE)
        if site < 0:
            raise ValueError(f"model: no site {FLANGE_SITE!r} to mount the wrist camera on")
        self.body = int(model.site_bodyid[site])
        """MuJoCo id of the body the camera is fixed to."""
        self.X_FC = mount.X_FC()
        """(4, 4) camera in the flange site frame."""
        self.X_BC = pose_matrix(model.site_pos[site], model.site_quat[site]) @ self.X_FC
        """(4, 4) camera in the body frame."""
        self.K = intrinsics_from_fov(width, height, mount.fovy)
        """(3, 3) intrinsics, px."""
        self.width, self.height = width, height

    def pose(self, xpos: ArrayLike, xquat: ArrayLike) -> np.ndarray:
        """X_WC = X_WF · X_FC (..., 4, 4) for body poses xpos (..., nbody, 3) m and xquat (..., nbody, 4) wxyz.

        Composed elementwise, so each twin's pose is bit-identical whatever the batch it comes in."""
        p = np.asarray(xpos, dtype=np.float64)[..., self.body, :]
        R_WB = quat_to_mat(np.asarray(xquat, dtype=np.float64)[..., self.body, :])
        R_BC, p_BC = self.X_BC[:3, :3], self.X_BC[:3, 3]
        out = np.zeros((*p.shape[:-1], 4, 4))
        out[..., :3, :3] = sum(R_WB[..., :, k, None] * R_BC[k] for k in range(3))
        out[..., :3, 3] = p + sum(R_WB[..., :, k] * p_BC[k] for k in range(3))
        out[..., 3, 3] = 1.0
        return out


def body_poses(model: mujoco.MjModel, qpos: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """World poses of every body of B twins from their joint positions qpos (B, nq):
    xpos (B, nbody, 3) m and xquat (B, nbody, 4) wxyz (forward kinematics on a scratch MjData)."""
    q = np.asarray(qpos, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] != model.nq:
        raise ValueError(f"qpos: expected shape (B, {model.nq}), got {q.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError("qpos: contains NaN or inf")
    data = mujoco.MjData(model)
    xpos, xquat = np.empty((len(q), model.nbody, 3)), np.empty((len(q), model.nbody, 4))
    for b, row in enumerate(q):
        data.qpos[:] = row
        mujoco.mj_kinematics(model, data)
        xpos[b], xquat[b] = data.xpos, data.xquat
    return xpos, xquat


def _to_uint8(rgb: Tensor) -> np.ndarray:
    """uint8 (..., H, W, 3) from float RGB in [0, 1] (clipped, rounded as `realissim.util.images.to_uint8`)."""
    arr = rgb.detach().cpu().numpy().astype(np.float64)
    return np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)


class VirtualCameras:
    """Render a twin's virtual cameras (see module docstring): images uint8 (H, W, 3) RGB per camera."""

    def __init__(
        self,
        scene: SceneSpec,
        model: mujoco.MjModel,
        cameras: Sequence[str] = (WRIST,),
        size: tuple[int, int] = (96, 96),
        backend: Backend = "auto",
        mount: WristMount = WristMount(),
        appearance: AppearanceConfig = AppearanceConfig(),
        base_dir: str | Path | None = None,
    ) -> None:
        """Render `cameras` (the scene's fixed cameras by name and/or `WRIST`; images come back under these
        names, in this order) at `size` = (width, height) px for the twin whose `model` was compiled from
        `scene`. ValueError names an unknown or repeated camera, a side below MIN_SIZE px or a backend
        that is not a CPU one."""
        self.names, self.width, self.height = _check_args(scene, cameras, size, backend)
        self.backend = backend
        self.nbody = int(model.nbody)
        self.wrist = WristCamera(model, mount, self.width, self.height)
        fixed = {c.name: c.resized(self.width, self.height) for c in scene.cameras}
        self.fixed_names = tuple(n for n in self.names if n != WRIST)
        self.views: TwinViews | None = None
        """Renders the fixed cameras, in `fixed_names` order (None when none is asked for)."""
        if self.fixed_names:
            cams = [fixed[n] for n in self.fixed_names]
            self.views = TwinViews(scene, model, cams, backend, appearance, base_dir)
        look = SceneAppearance.from_scene(scene, model, base_dir=base_dir, config=appearance)
        every = Gaussians.from_arrays(look.local)
        self.local = every.select(torch.tensor(~look.static))
        """The moving Gaussians (M: robot and objects) in their bodies' frames."""
        self.body_index = torch.tensor(look.body_index[~look.static], dtype=torch.long)
        """(M,) MuJoCo body id of each moving Gaussian."""
        self.ground = every.select(torch.tensor(look.static))
        """The ground's Gaussians (S), on MuJoCo's world body: body frame = world frame, never moving."""
        self._shared = [torch.cat([x, y]) for x, y in zip(self.local.args()[2:], self.ground.args()[2:])]
        self._max_scale = self._shared[0].amax(dim=-1)
        self._K = torch.tensor(self.wrist.K[None], dtype=torch.float32)
        self._background = torch.tensor(DEFAULT_BACKGROUND, dtype=torch.float32)
        log.debug(
            "virtual cameras %s at %dx%d px; wrist camera over %d Gaussians",
            self.names,
            self.width,
            self.height,
            len(self._max_scale),
        )

    def render(self, xpos: ArrayLike, xquat: ArrayLike) -> dict[str, np.ndarray]:
        """Images uint8 (H, W, 3) RGB per camera name for one twin's body poses xpos (nbody, 3) m and
        xquat (nbody, 4) wxyz (MuJoCo's `data.xpos`, `data.xquat`, current)."""
        p, q = _check_poses(xpos, xquat, self.nbody, batched=False)
        return {name: image[0] for name, image in self.render_batch(p[None], q[None]).items()}

    def render_batch(self, xpos: ArrayLike, xquat: ArrayLike) -> dict[str, np.ndarray]:
        """Images uint8 (B, H, W, 3) RGB per camera name for B twins' body poses xpos (B, nbody, 3) m and
        xquat (B, nbody, 4) wxyz; twin b's images equal `render(xpos[b], xquat[b])` bit for bit."""
        p, q = _check_poses(xpos, xquat, self.nbody, batched=True)
        out: dict[str, np.ndarray] = {}
        if self.views is not None:
            fixed = self._render_fixed(p, q)
            out |= {name: fixed[:, c] for c, name in enumerate(self.fixed_names)}
        if WRIST in self.names:
            out[WRIST] = self._render_wrist(p, q)
        return {name: out[name] for name in self.names}

    def world_gaussians(self, xpos: ArrayLike, xquat: ArrayLike) -> Gaussians:
        """Every Gaussian of the scene (M moving, then S ground) in the world frame for one twin's body
        poses xpos (nbody, 3) m and xquat (nbody, 4) wxyz: what the wrist camera renders before culling."""
        p, q = _check_poses(xpos, xquat, self.nbody, batched=False)
        means, quats = self._place(p[None], q[None])
        return Gaussians(means[0], quats[0], *self._shared)

    def _place(self, p: np.ndarray, q: np.ndarray) -> tuple[Tensor, Tensor]:
        """World means (B, M+S, 3) and quats (B, M+S, 4) of every Gaussian, computed elementwise per twin
        (so a twin's values do not depend on its batch)."""
        b, m = p.shape[0], len(self.local)
        index = (self.body_index[None] + self.nbody * torch.arange(b)[:, None]).reshape(-1)
        pos = torch.as_tensor(p.reshape(-1, 3), dtype=torch.float32)
        quat = torch.as_tensor(q.reshape(-1, 4), dtype=torch.float32)
        local_means = self.local.means.expand(b, m, 3).reshape(-1, 3)
        local_quats = self.local.quats.expand(b, m, 4).reshape(-1, 4)
        means, quats = place(local_means, local_quats, index, pos, quat)
        s = len(self.ground)
        means = torch.cat([means.reshape(b, m, 3), self.ground.means.expand(b, s, 3)], dim=1)
        quats = torch.cat([quats.reshape(b, m, 4), self.ground.quats.expand(b, s, 4)], dim=1)
        return means, quats

    def _render_fixed(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """(B, C, H, W, 3) uint8 of the fixed cameras: `TwinViews.render_poses` per twin."""
        views = self.views
        assert views is not None
        return _to_uint8(torch.stack([views.render_poses(p[b], q[b])[0] for b in range(p.shape[0])]))

    def _render_wrist(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """(B, H, W, 3) uint8 of the wrist camera: every Gaussian that can touch the image, in one pass."""
        X_WC = self.wrist.pose(p, q)
        means, quats = self._place(p, q)
        keep = self._touching(means, torch.as_tensor(np.linalg.inv(X_WC), dtype=torch.float32))
        images = []
        with torch.no_grad():
            for b in range(p.shape[0]):
                k = keep[b].nonzero()[:, 0]
                g = (means[b, k], quats[b, k], *(t[k] for t in self._shared))
                X = torch.as_tensor(X_WC[b : b + 1], dtype=torch.float32)
                rgb, _, _ = rasterize(*g, self._K, X, self.width, self.height, self._background, self.backend)
                images.append(rgb[0])
        return _to_uint8(torch.stack(images))

    def _touching(self, means: Tensor, X_CW: Tensor) -> Tensor:
        """(B, N) bool: which Gaussians (world means (B, N, 3)) may cover a pixel of twin b's wrist image.

        A conservative bound on the CPU rasteriser's square footprint (`realissim.render.common`), of
        half-size ceil(3·sqrt(λ + 0.1)) px around the projected centre, where the 2D covariance's largest
        eigenvalue λ ≤ (f/z)²·(1 + cu² + cv²)·s_max² + EPS2D (cu, cv: the largest clamped |x/z|, |y/z|;
        s_max: the largest std-dev); 2 px more cover the ceiling and float32 rounding. A test checks that
        culling leaves the image unchanged."""
        p = torch.einsum("bij,bnj->bni", X_CW[:, :3, :3], means) + X_CW[:, None, :3, 3]
        K = self.wrist.K
        f = max(K[0, 0], K[1, 1])
        cu = (max(K[0, 2], self.width - K[0, 2]) + 0.5 * FOV_CLAMP * self.width) / K[0, 0]
        cv = (max(K[1, 2], self.height - K[1, 2]) + 0.5 * FOV_CLAMP * self.height) / K[1, 1]
        z = p[..., 2].clamp_min(1e-6)
        s = (f / z) * math.sqrt(1.0 + cu * cu + cv * cv) * self._max_scale
        r = 3.0 * torch.sqrt(s * s + EPS2D + 0.1) + 2.0
        u = K[0, 0] * p[..., 0] / z + K[0, 2]
        v = K[1, 1] * p[..., 1] / z + K[1, 2]
        inside = (u + r > 0) & (u - r < self.width) & (v + r > 0) & (v - r < self.height)
        return inside & (p[..., 2] > 0.5 * DEFAULT_NEAR)


def _check_args(
    scene: SceneSpec, cameras: Sequence[str], size: tuple[int, int], backend: str
) -> tuple[tuple[str, ...], int, int]:
    """The camera names and image width, height, or ValueError naming the argument at fault."""
    names = tuple(cameras)
    known = (*(c.name for c in scene.cameras), WRIST)
    if not names:
        raise ValueError(f"cameras: name at least one of {list(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"cameras: unknown camera(s) {unknown}; known: {list(known)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"cameras: repeated camera(s) {repeated}")
    if len(size) != 2:
        raise ValueError(f"size: expected (width, height), got {size!r}")
    width, height = (int(x) for x in size)
    if width < MIN_SIZE or height < MIN_SIZE:
        raise ValueError(f"size: width and height must be ≥ {MIN_SIZE} px, got {width}×{height}")
    if backend not in ("auto", "cpu", "reference"):
        raise ValueError(f"backend: expected 'auto', 'cpu' or 'reference', got {backend!r}")
    return names, width, height


def _check_poses(xpos: ArrayLike, xquat: ArrayLike, nbody: int, batched: bool) -> tuple[np.ndarray, np.ndarray]:
    """Body poses as float64 arrays, or ValueError naming the argument with a wrong shape or value."""
    p, q = np.asarray(xpos, dtype=np.float64), np.asarray(xquat, dtype=np.float64)
    lead = "B, " if batched else ""
    ndim = 3 if batched else 2
    if p.ndim != ndim or p.shape[-2:] != (nbody, 3):
        raise ValueError(f"xpos: expected shape ({lead}{nbody}, 3), got {p.shape}")
    if q.ndim != ndim or q.shape[-2:] != (nbody, 4) or q.shape[:-2] != p.shape[:-2]:
        raise ValueError(f"xquat: expected shape ({lead}{nbody}, 4) matching xpos {p.shape}, got {q.shape}")
    if batched and p.shape[0] < 1:
        raise ValueError("xpos: the batch is empty")
    for name, arr in (("xpos", p), ("xquat", q)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}: contains NaN or inf")
    if np.any(np.linalg.norm(q, axis=-1) < 1e-8):
        raise ValueError("xquat: zero-length quaternion")
    return p, q
