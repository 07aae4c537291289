"""Visual forces: the twin's objects are pulled towards where the cameras see them (docs/design.md §4).

Per frame (the reference algorithm of Embodied Gaussians): the objects' Gaussians, placed at the twin's
body poses, become free variables (world means and rotations); `iterations` Adam steps reduce the
photometric loss between the twin rendered into every real camera and the real images, with the
robot (at the real arm's measured joints) and the ground rendered for occlusion but never moved. Each
object Gaussian i then gives a force F_i = opacity_i · k_p · (x_i_new − x_i_old) and a torque
(x_i_old − c) × F_i about its body's centre of mass c; their sums are the body's visual wrench, applied
during the next physics frame. The Gaussians return to their attached poses every frame.

`k_p` is set per body from a stiffness: `stiffness / Σ opacity` N/m per Gaussian, so moving all of a
body's Gaussians by Δx gives a force `stiffness · Δx` whatever their number.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import mujoco
import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from realissim.estimate.correction_config import CorrectionConfig
from realissim.estimate.photometric import blur_images, photometric_loss
from realissim.estimate.pose_solver import free_coordinates, solve_pose
from realissim.estimate.vector_adam import VectorAdam
from realissim.render import rasterize
from realissim.render.gaussians import Gaussians
from realissim.twin.physics import TwinPhysics
from realissim.twin.support import planar_wrenches, support_normals, touched
from realissim.views.cameras import TwinViews, ViewWindow


@dataclass(frozen=True)
class CorrectionResult:
    """One frame's correction: wrenches (K,6) [force N, torque N·m] in the world frame at each object's
    centre of mass; the photometric loss (over the optimised window) at the twin's pose and after the correction
    (Adam: at the start of its last step; Gauss–Newton: the least over the poses it rendered); the mean Gaussian
    displacement per object (K,) m; and the time spent, s, in all and per stage (`stages`: forward = rendering and
    loss, backward = their gradients, optimiser = the steps (Gauss–Newton: the solves), summed over the iterations;
    prepare = the rest: placing the Gaussians, the window, the culling and the wrenches)."""

    wrenches: np.ndarray
    loss_before: float
    loss_after: float
    displacement: np.ndarray
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)
    saturated: bool = False
    """Whether some object's force reached `max_force` (and was capped): the pull could not follow the images."""
    eps2d: float = float("nan")
    """px²: the renderer's low-pass this frame's views were rendered with (`CorrectionConfig.rest_eps2d` at rest)."""

    @property
    def residual(self) -> float:
        """The photometric residual the desync detector watches (`loss_after`)."""
        return self.loss_after


class VisualCorrection:
    """Computes visual wrenches on a twin's objects from camera images (see the module docstring)."""

    def __init__(
        self,
        views: TwinViews,
        model: mujoco.MjModel,
        config: CorrectionConfig = CorrectionConfig(),
        *,
        frame_dt: float,
        held_frames: int = 1,
    ) -> None:
        """`views` renders the twin into the real cameras (their told intrinsics and poses, at the image size
        the cameras deliver); `model` is the twin's MuJoCo model; `frame_dt` s the physics frame a wrench acts
        over (the twin's frame period): damping is capped at m/frame_dt (I/frame_dt) so the explicit damping
        force stays stable. `held_frames` physics frames make up `frame_dt` (the runtime's `correct_every`: the
        wrench is applied again on the frames between two corrections); the visual spring's stiffness (and its
        integral's) is divided by its square, so one correction moves a free object as far as one frame's does
        when every frame is corrected. The spring is an explicit feedback held for the whole period T =
        held_frames × the physics frame: on an object sliding free of friction it is stable only while k·T²/m < 2
        (damping at its cap), 1.1 at one frame for the T (0.25 kg, k 1000 N/m); divided by held_frames alone it
        was 2.2 at two, and a T pulled loose by the integral fell into a growing two-frame oscillation
        (docs/decisions.md, "Held wrenches")."""
        if not frame_dt > 0:
            raise ValueError(f"frame_dt: must be > 0, got {frame_dt}")
        if held_frames < 1:
            raise ValueError(f"held_frames: must be ≥ 1, got {held_frames}")
        self.views, self.model, self.config = views, model, config
        self._physics_dt = frame_dt / held_frames
        self.damp_in_wrench = True
        """Whether the wrench includes the damping against the objects' velocity (rigid mode). A correction running
        beside the loop leaves it out: its velocities are a few frames old by the time the wrench acts, and the loop
        damps with the current ones instead (`damping_wrench`)."""
        self.set_held_frames(held_frames, frame_dt)
        self._kin = mujoco.MjData(model)
        mask = views.object_mask
        self._obj = torch.nonzero(mask).squeeze(-1)
        self._rest = torch.nonzero(~mask).squeeze(-1)
        obj_bodies = views.body_index[self._obj]
        self.object_bodies = np.unique(obj_bodies.cpu().numpy())
        """MuJoCo body ids of the corrected objects, in the order of the wrenches' rows."""
        self._slot = torch.as_tensor(np.searchsorted(self.object_bodies, obj_bodies.cpu().numpy()))
        opac = views.local.opacities[self._obj].double()
        total = torch.zeros(len(self.object_bodies), dtype=torch.float64).index_add_(0, self._slot, opac)
        self._gain = (config.stiffness / total.clamp_min(1e-9))[self._slot] * opac  # (n,) N/m per Gaussian
        mass = model.body_mass[self.object_bodies][:, None]
        inertia = model.body_inertia[self.object_bodies].min(axis=1, keepdims=True)
        lin = np.minimum(2 * config.damping_ratio * np.sqrt(config.stiffness * mass), mass / frame_dt)
        rot = np.minimum(2 * config.damping_ratio * np.sqrt(config.rot_stiffness * inertia), inertia / frame_dt)
        self._damping = np.concatenate([np.repeat(lin, 3, axis=1), np.repeat(rot, 3, axis=1)], axis=1)
        """(K,6) damping per body: N·s/m on linear and N·m·s/rad on angular velocity."""
        self._accumulated = np.zeros((len(self.object_bodies), 6))
        """rigid: the leaky sum of found translations (m) and rotations (rad), (K,6)."""
        self._touching = np.zeros(len(self.object_bodies), dtype=bool)
        """Whether each object touched the arm or another object at the last correction (`release_integral`)."""
        self._still = 0
        """Consecutive frames the objects were still and found where the twin has them (`rest_eps2d`)."""
        self._turn = 0
        """With `cameras_per_frame`: the first camera of the next correction."""

    @property
    def held_frames(self) -> int:
        """Physics frames one wrench is held for (see `__init__`)."""
        return self._held_frames

    def set_held_frames(self, held_frames: int, frame_dt: float | None = None) -> None:
        """Scale the spring and the integral for a wrench held `held_frames` physics frames from now on (see
        `__init__`; `frame_dt` the period, s, default `held_frames` physics frames): a correction beside the loop
        sets the period it measures. The damping keeps the cap of `__init__`'s period."""
        if held_frames < 1:
            raise ValueError(f"held_frames: must be ≥ 1, got {held_frames}")
        cfg = self.config
        self._held_frames = held_frames
        self._frame_dt = self._physics_dt * held_frames if frame_dt is None else frame_dt
        self._spring_scale = 1.0 / held_frames**cfg.held_exponent
        self._rigid_gains = self._spring_scale * np.array([cfg.stiffness] * 3 + [cfg.rot_stiffness] * 3)
        """rigid (6,): the pull per metre found (N/m) and per radian turned (N·m/rad), for the frames held; the
        integral's pull uses it too."""
        self._sharpen = cfg.rest_eps2d is not None and held_frames == 1
        """Whether `rest_eps2d` applies (see there)."""

    def damping_wrench(self, velocity: ArrayLike) -> np.ndarray:
        """Rigid mode's damping (K,6) against the objects' velocity (K,6) [linear m/s, angular rad/s], world frame:
        what the wrench includes when `damp_in_wrench`."""
        return -np.asarray(velocity, dtype=np.float64) * self._damping

    def damped(self, pull: ArrayLike, twin: TwinPhysics) -> np.ndarray:
        """A wrench found without damping (`damp_in_wrench` False) as it acts now: `pull` (K,6) plus the damping
        against the objects' current velocity in `twin`, its in-plane part while an object rests on static geometry
        (`planar_on_support`, from `twin`'s contacts now), capped at `max_force`; world frame, at the COMs."""
        now = twin.state()
        wrench = np.asarray(pull, dtype=np.float64) + self.damping_wrench(
            np.concatenate([now.object_linvel, now.object_angvel], axis=1)
        )
        if self.config.planar_on_support:
            support = support_normals(self.model, twin.data, self.object_bodies, self.config.support_margin)
            wrench = planar_wrenches(wrench, support)
        norm = np.linalg.norm(wrench[:, :3], axis=1, keepdims=True)
        return wrench * np.minimum(1.0, self.config.max_force / np.maximum(norm, 1e-12))

    def reset(self) -> None:
        """Forget what accumulated over the frames (a new episode)."""
        self._accumulated[:] = 0.0
        self._touching[:] = False
        self._still = 0
        self._turn = 0

    def correct(self, twin: TwinPhysics, q_real: ArrayLike, images: Tensor) -> CorrectionResult:
        """This frame's correction of `twin` (not applied): the robot placed at the real arm's measured joints
        q_real (J,) rad (the cameras show the real arm, which lags the twin's), the real images (C,H,W,3)
        uint8 or float in [0, 1], the objects' velocities for damping and, with `planar_on_support`, their
        support from the twin's contacts; with `release_integral`, the twin's contacts also say whose contact with
        the arm (or another object) has ended since the last call, and that object's integral is emptied."""
        xpos, xquat, xipos = self.poses(twin.data.qpos, twin.layout.robot_qpos, q_real)
        if self.config.integral > 0 and self.config.release_integral:
            touching = touched(self.model, twin.data, self.object_bodies)
            self._accumulated[self._touching & ~touching] = 0.0
            self._touching = touching
        now = twin.state()
        velocity = np.concatenate([now.object_linvel, now.object_angvel], axis=1)
        support = (
            support_normals(self.model, twin.data, self.object_bodies, self.config.support_margin)
            if self.config.planar_on_support
            else None
        )
        return self(xpos, xquat, xipos, images, velocity, support)

    def poses(
        self, qpos: ArrayLike, robot_qpos: ArrayLike, q_real: ArrayLike
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Body poses xpos (nbody,3), xquat (nbody,4) and centres of mass xipos (nbody,3) for the twin's
        qpos with the robot's joints (at qpos indices `robot_qpos`) replaced by the real arm's q_real."""
        self._kin.qpos[:] = qpos
        self._kin.qpos[np.asarray(robot_qpos)] = q_real
        mujoco.mj_kinematics(self.model, self._kin)
        return self._kin.xpos.copy(), self._kin.xquat.copy(), self._kin.xipos.copy()

    def __call__(
        self,
        xpos: np.ndarray,
        xquat: np.ndarray,
        xipos: np.ndarray,
        images: Tensor,
        velocity: np.ndarray | None = None,
        support: np.ndarray | None = None,
    ) -> CorrectionResult:
        """Wrenches for body poses (see `poses`) given the real images (C,H,W,3) float in [0, 1] (or uint8);
        `velocity` (K,6) [linear m/s, angular rad/s] of the objects, world frame, feeds rigid mode's damping;
        `support` (K,3), the normals of what each object rests on (`twin.support.support_normals`; zero rows
        for none), keeps only the in-plane part of a resting object's wrench. Forces are then capped at
        `max_force`. With `rest_eps2d`, `velocity` also says whether the objects rest (None: they do not)."""
        start = time.perf_counter()
        stages = dict.fromkeys(("prepare", "forward", "backward", "optimiser"), 0.0)
        cfg, views = self.config, self.views
        eps2d = views.eps2d
        if self._sharpen:
            assert cfg.rest_eps2d is not None
            speed = None if velocity is None else np.linalg.norm(np.asarray(velocity)[:, :3], axis=1)
            still = speed is not None and bool(np.all(speed < cfg.rest_speed))
            self._still = self._still + 1 if still else 0
            eps2d = cfg.rest_eps2d if still and self._still >= cfg.rest_frames else eps2d
        target = images.to(torch.float32) / 255.0 if images.dtype == torch.uint8 else images.to(torch.float32)
        expected = (len(views.cameras), views.height, views.width, 3)
        if tuple(target.shape) != expected:
            raise ValueError(f"images: expected shape {expected}, got {tuple(target.shape)}")
        views.cast_shadows(xpos, xquat)  # the arm's shadow where the real arm is (no-op without a shadow light)
        g = views.moving(xpos, xquat, cfg.shade_recast)
        fixed = Gaussians(*(t[self._rest] for t in g.args()))
        if views.static_layer is None:  # gsplat: the ground is rasterised with everything else
            fixed = Gaussians(*(torch.cat([a, b]) for a, b in zip(fixed.args(), views.static.args())))
        means0, quats0 = g.means[self._obj].detach(), g.quats[self._obj].detach()
        if cfg.crop_margin is None:
            window = views.full_window()
        else:
            window = views.window(means0.double().numpy(), cfg.crop_margin)
            target = window.cut(target)
        background = views.background
        n_cams = len(views.cameras)
        if cfg.cameras_per_frame is not None and cfg.cameras_per_frame < n_cams:
            chosen = [(self._turn + i) % n_cams for i in range(cfg.cameras_per_frame)]
            self._turn = (self._turn + cfg.cameras_per_frame) % n_cams
            window, target = window.select(chosen), target[chosen]
            background = background[chosen] if background.ndim == 2 else background
        if cfg.crop_margin is not None:
            keep = window.touches(fixed.means, 3.0 * fixed.scales.amax(dim=-1))
            fixed = Gaussians(*(t[keep] for t in fixed.args()))
        rest = [t[self._obj] for t in (g.scales, g.colors, g.opacities)]
        if cfg.mode == "rigid":
            wrenches, moved, planar, (before, after) = self._rigid(
                means0, quats0, rest, fixed, xipos, target, window, velocity, stages, eps2d, background, support
            )
            if self._sharpen and bool(np.any(planar > cfg.rest_shift)):
                self._still = 0  # found away: the next frame renders with the wider basin
        else:
            means = means0.clone().requires_grad_()
            quats = quats0.clone().requires_grad_()
            groups = [{"params": [means], "lr": cfg.lr_means}, {"params": [quats], "lr": cfg.lr_quats}]
            before, after = self._optimise(
                groups, lambda: [means, quats, *rest], fixed, target, window, stages, eps2d, background
            )
            wrenches, moved = self._wrenches(means.detach().double() - means0.double(), means0.double(), xipos)
            wrenches = self._spring_scale * wrenches
        if support is not None:
            wrenches = planar_wrenches(wrenches, support)
        norm = np.linalg.norm(wrenches[:, :3], axis=1, keepdims=True)
        saturated = bool(np.any(norm >= 0.99 * cfg.max_force))  # at the cap, to rounding
        wrenches = wrenches * np.minimum(1.0, cfg.max_force / np.maximum(norm, 1e-12))
        seconds = time.perf_counter() - start
        stages["prepare"] = seconds - stages["forward"] - stages["backward"] - stages["optimiser"]
        return CorrectionResult(wrenches, before, after, moved, seconds, stages, saturated, eps2d)

    def _compared(self, images: Tensor) -> Tensor:
        """What the loss compares of images (C,H,W,3): their chromaticity while the twin renders a shadow and
        `shadow_compare` says so (see there), else the images themselves."""
        if self.views.shadow is not None and self.config.shadow_compare == "chromaticity":
            return images / (images.sum(dim=-1, keepdim=True) + self.config.chroma_floor)
        return images

    def _comparison(
        self, fixed: Gaussians, target: Tensor, window: ViewWindow, background: Tensor, eps2d: float, sigma: float
    ) -> tuple[Tensor, Callable[[list[Tensor]], Tensor]]:
        """What the loss compares, (C,H,W,3): the real window `target` blurred by σ `sigma` px (`_compared`), and a
        function giving the same of the objects' render from their Gaussian arguments (rendered with `fixed` over
        `background` with the low-pass `eps2d` px²; with `exposure`, scaled by the gain fitted at its first call, the
        twin's pose, and kept for the frame's later calls; the renderer checks its inputs at the first call only: the
        later ones move the same Gaussians by finite steps). Differentiable."""
        cfg, views = self.config, self.views
        gain: Tensor | None = None
        first = True

        def rendered(objects: list[Tensor]) -> Tensor:
            nonlocal gain, first
            args = [torch.cat([a, b]) for a, b in zip(objects, fixed.args())]
            rgb, _, _ = rasterize(
                *args, window.Ks, window.X_WCs, window.width, window.height, background, views.backend,
                static=window.static_layer, eps2d=eps2d, validate=first,
            )  # fmt: skip
            first = False
            if cfg.exposure:
                if gain is None:
                    r = rgb.detach()
                    gain = ((r * target).sum(dim=(1, 2)) / (r * r).sum(dim=(1, 2)).clamp_min(1e-9))[:, None, None]
                rgb = rgb * gain
            return self._compared(blur_images(rgb, sigma))

        return self._compared(blur_images(target, sigma)), rendered

    def _optimise(
        self,
        groups: list[dict],
        objects: Callable[[], list[Tensor]],
        fixed: Gaussians,
        target: Tensor,
        window: ViewWindow,
        stages: dict[str, float],
        eps2d: float,
        background: Tensor,
    ) -> tuple[float, float]:
        """`iterations` Adam steps on `groups`; `objects()` gives the objects' Gaussian arguments from the
        current parameters; rendered with the low-pass `eps2d` px² over `background`; the time spent is added to
        `stages`. Returns the photometric loss at the start of the first step (the twin's pose) and of the last (no
        extra render after the last step: docs/decisions.md)."""
        cfg = self.config
        optimiser = (
            torch.optim.Adam(groups, eps=cfg.adam_eps) if cfg.optimiser == "adam" else VectorAdam(groups, cfg.adam_eps)
        )
        losses = []
        clock = time.perf_counter
        seen, rendered = self._comparison(fixed, target, window, background, eps2d, cfg.blur)
        for _ in range(cfg.iterations):
            t0 = clock()
            loss = photometric_loss(rendered(objects()), seen, cfg.loss, cfg.huber_delta)
            losses.append(float(loss.detach()))
            t1 = clock()
            optimiser.zero_grad()
            loss.backward()
            t2 = clock()
            optimiser.step()
            t3 = clock()
            stages["forward"] += t1 - t0
            stages["backward"] += t2 - t1
            stages["optimiser"] += t3 - t2
        return losses[0], losses[-1]

    def _rigid(
        self,
        means0: Tensor,
        quats0: Tensor,
        rest: list[Tensor],
        fixed: Gaussians,
        xipos: np.ndarray,
        target: Tensor,
        window: ViewWindow,
        velocity: np.ndarray | None,
        stages: dict[str, float],
        eps2d: float,
        background: Tensor,
        support: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[float, float]]:
        """Rigid mode: one translation (K,3) m and rotation vector (K,3) rad per body, about its COM, found by
        `solver`; returns wrenches (K,6) (uncapped), translations found (K,) m and their planar (x, y) parts (K,) m,
        and the losses before and after (see `CorrectionResult`)."""
        cfg, k = self.config, len(self.object_bodies)
        com = torch.as_tensor(xipos[self.object_bodies], dtype=torch.float32)[self._slot]
        arm = means0 - com
        eye = torch.eye(3, dtype=torch.float32)

        def place(shift: Tensor, rotvec: Tensor) -> list[Tensor]:
            """The objects' Gaussian arguments with each body moved by `shift` (K,3) m and turned by `rotvec` (K,3)
            rad about its COM. Small rotation per frame: second-order Rodrigues for points (I + [r]× + [r]×²/2 per
            body), first-order quaternion ((1, r/2) normalised, left-multiplied as a 4×4 matrix per body): per body
            small matrices, then one product per Gaussian argument (this runs for every render of a correction)."""
            rx, ry, rz = rotvec.unbind(-1)
            zero = torch.zeros_like(rx)
            skew = torch.stack([zero, -rz, ry, rz, zero, -rx, -ry, rx, zero], dim=-1).reshape(k, 3, 3)
            turn = eye + skew + 0.5 * (skew @ skew)
            dq = torch.cat([torch.ones_like(rotvec[:, :1]), 0.5 * rotvec], dim=-1)
            w, x, y, z = (dq / dq.norm(dim=-1, keepdim=True)).unbind(-1)
            left = torch.stack([w, -x, -y, -z, x, w, -z, y, y, z, w, -x, z, -y, x, w], dim=-1).reshape(k, 4, 4)
            moved = torch.einsum("nij,nj->ni", turn[self._slot], arm) + com + shift[self._slot]
            return [moved, torch.einsum("nij,nj->ni", left[self._slot], quats0), *rest]

        if cfg.solver == "gauss_newton":
            step, losses = self._gauss_newton(place, fixed, target, window, stages, eps2d, background, support)
        else:
            # Horizontal (x, y) and vertical (z) parts are separate parameters: with "vector_adam" the horizontal
            # step follows the gradient's direction while the vertical one (where the table holds the object) keeps
            # its own scale and cannot dilute it.
            shift_xy, shift_z = torch.zeros(k, 2, requires_grad=True), torch.zeros(k, 1, requires_grad=True)
            rot_xy, rot_z = torch.zeros(k, 2, requires_grad=True), torch.zeros(k, 1, requires_grad=True)
            groups = [
                {"params": [shift_xy, shift_z], "lr": cfg.lr_means},
                {"params": [rot_xy, rot_z], "lr": cfg.lr_rotation},
            ]

            def objects() -> list[Tensor]:
                return place(torch.cat([shift_xy, shift_z], dim=-1), torch.cat([rot_xy, rot_z], dim=-1))

            losses = self._optimise(groups, objects, fixed, target, window, stages, eps2d, background)
            found = torch.cat([shift_xy, shift_z], dim=-1).detach().double().numpy()
            turned = torch.cat([rot_xy, rot_z], dim=-1).detach().double().numpy()
            step = np.concatenate([found, turned], axis=1)
        found = step[:, :3]
        wrench = self._rigid_gains * step
        if cfg.integral > 0:
            self._accumulated = self._accumulated * np.exp(-self._frame_dt / cfg.integral_leak) + step
            if cfg.integral_discharge is not None and velocity is not None:
                v = np.asarray(velocity, dtype=np.float64)
                for part, least in zip((slice(0, 3), slice(3, 6)), cfg.integral_discharge):
                    acc = self._accumulated[:, part]  # an empty sum has no direction: `along` is 0 there
                    along = np.sum(v[:, part] * acc, axis=1) / np.maximum(np.linalg.norm(acc, axis=1), 1e-12)
                    error = np.linalg.norm(step[:, part], axis=1)
                    self._accumulated[(along > least) & (along * self._frame_dt >= error), part] = 0.0
            pull = self._rigid_gains * cfg.integral * self._physics_dt * self._accumulated
            limit = np.array([cfg.max_force] * 3 + [np.inf] * 3)
            wrench += np.clip(pull, -limit, limit)
        if velocity is not None and self.damp_in_wrench:
            wrench -= np.asarray(velocity, dtype=np.float64) * self._damping
        return wrench, np.linalg.norm(found, axis=1), np.linalg.norm(found[:, :2], axis=1), losses

    def _gauss_newton(
        self,
        place: Callable[[Tensor, Tensor], list[Tensor]],
        fixed: Gaussians,
        target: Tensor,
        window: ViewWindow,
        stages: dict[str, float],
        eps2d: float,
        background: Tensor,
        support: np.ndarray | None,
    ) -> tuple[np.ndarray, tuple[float, float]]:
        """solver "gauss_newton": each body's pose change (K,6) [translation m, rotation vector rad], world frame, by
        Levenberg–Marquardt (`pose_solver.solve_pose`) on its free coordinates (`pose_solver.free_coordinates`: a
        body resting on a support, a nonzero row of `support` (K,3), has three), both images compared through a blur
        of σ `gn_smoothing` (composed with `blur`'s); and the loss at the twin's pose and the least over the poses
        rendered."""
        cfg = self.config
        basis = free_coordinates(support, len(self.object_bodies), cfg.gn_fd_step)
        sigma = float(np.hypot(cfg.gn_smoothing, cfg.blur))
        seen, rendered = self._comparison(fixed, target, window, background, eps2d, sigma)

        def residual(change: np.ndarray) -> Tensor:
            moved = torch.as_tensor(change, dtype=torch.float32)
            with torch.no_grad():
                return (rendered(place(moved[:, :3], moved[:, 3:])) - seen).reshape(-1).double()

        return solve_pose(residual, basis, cfg, stages)

    def _wrenches(self, delta: Tensor, x_old: Tensor, xipos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-body wrenches (K,6) (uncapped) and mean displacement (K,) m from Gaussian displacements (n,3)."""
        k = len(self.object_bodies)
        forces = self._gain[:, None] * delta
        com = torch.as_tensor(xipos[self.object_bodies], dtype=torch.float64)[self._slot]
        torques = torch.linalg.cross(x_old - com, forces, dim=-1)
        wrench = torch.zeros(k, 6, dtype=torch.float64)
        wrench[:, :3].index_add_(0, self._slot, forces)
        wrench[:, 3:].index_add_(0, self._slot, torques)
        counts = torch.zeros(k, dtype=torch.float64).index_add_(0, self._slot, torch.ones_like(self._gain))
        moved = torch.zeros(k, dtype=torch.float64).index_add_(0, self._slot, delta.norm(dim=-1)) / counts
        return wrench.numpy(), moved.numpy()
