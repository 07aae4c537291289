"""The visual correction's settings (`estimate.correction.VisualCorrection`): the optimiser, the loss, the pull and
its damping and integral, the window, the cameras per correction, the sharper views at rest (docs/design.md §4;
the measurements behind each default in docs/decisions.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class CorrectionConfig:
    """The visual-force correction."""

    iterations: int = 5
    """With solver "adam" (or mode "gaussians"): Adam steps per frame: five, not three, since the twin's views render
    with hard edges (`ViewsConfig.eps2d` 0.05), whose narrower basin a push outruns in three (docs/decisions.md, "The
    renderer's low-pass"). Each step costs a render and its backward pass; the smaller footprints of that low-pass
    pay for the two extra ones."""
    lr_means: float = 1.5e-3
    """Adam learning rate of the Gaussians' means, m."""
    adam_eps: float = 1e-6
    """Adam's ε: large enough that a residual at float rounding does not move the Gaussians (docs/decisions.md)."""
    optimiser: Literal["adam", "vector_adam"] = "vector_adam"
    """"adam": torch's Adam, per coordinate; "vector_adam": one second moment per row (a body's translation,
    its rotation vector, a Gaussian's mean), so each step follows the gradient's direction (docs/decisions.md)."""
    lr_quats: float = 1e-3
    """Adam learning rate of the Gaussians' rotations (quaternion components)."""
    stiffness: float = 1000.0
    """Force per metre of uniform displacement of a body's Gaussians, N/m: enough to beat static friction, not
    so much that it oscillates (docs/decisions.md)."""
    loss: Literal["l2", "l1", "huber"] = "huber"
    """Photometric loss per pixel and channel, averaged; Huber with δ at the noise level had the smallest sync
    error (docs/decisions.md)."""
    huber_delta: float = 0.01
    """Where the Huber loss turns from quadratic to linear (intensity units, 1 = full scale); about the
    cameras' noise level (the default gap's σ is 2/255)."""
    shadow_compare: Literal["intensity", "chromaticity"] = "chromaticity"
    """What the loss compares while the twin renders a key light's shadow (`TwinViews.shadow`, found at
    calibration): "chromaticity" each pixel's colour over its brightness, (r, g, b) / (r + g + b + `chroma_floor`),
    as the search does; "intensity" the colours. Without a shadow the loss always compares intensity. An object
    in the arm's shadow is dark on a dark table, where intensity held it off the truth (docs/decisions.md, "The
    twin renders the arm's shadow")."""
    chroma_floor: float = 0.2
    """With `shadow_compare` "chromaticity": added to the brightness sum (intensity units), so that dark pixels'
    chromaticity, mostly noise, weighs less."""
    blur: float = 0.0
    """σ of a Gaussian blur, px, applied alike to the render and the real window before the loss (0: none). Real
    cameras that point-sample hard edges alias them; the blur takes the staircase out of both images."""
    exposure: bool = True
    """Compensate a global brightness change per camera and channel: each frame, the gain that best maps the
    render at the twin's pose onto the real window (least squares) scales the render in the loss."""
    max_force: float = 20.0
    """Largest visual force on a body, N (larger ones are scaled down, torque with them)."""
    mode: Literal["gaussians", "rigid"] = "rigid"
    """"gaussians": the reference (every object Gaussian a free variable, forces from their displacements);
    "rigid": one translation and rotation per body — it follows a push the reference never does
    (docs/decisions.md)."""
    lr_rotation: float = 0.005
    """rigid: Adam learning rate of each body's rotation vector, rad."""
    solver: Literal["adam", "gauss_newton"] = "gauss_newton"
    """rigid: how each body's pose is found (Gauss–Newton since 2026-12-07 (D): half the cost, and it finds the
    offset itself where Adam's bounded steps found at most ~7.5 mm). "adam": `iterations` first-order steps, each a
    render and its backward pass; "gauss_newton": Levenberg–Marquardt on the pose's free coordinates (the in-plane x,
    y and the turn about the support normal for a resting body, all six otherwise) with the Jacobian by forward
    differences of renders at the twin's pose, reused for `gn_iterations` steps (each one render): no backward pass
    (docs/decisions.md, "Gauss–Newton on the pose")."""
    gn_iterations: int = 2
    """solver "gauss_newton": steps after the Jacobian; each but the last is checked with one render (a step that
    made the loss worse is halved back towards the best pose seen)."""
    gn_fd_step: tuple[float, float] = (1e-3, 0.01)
    """solver "gauss_newton": the forward-difference steps, m for translations and rad for rotations."""
    gn_smoothing: float = 1.0
    """solver "gauss_newton": σ, px, of a Gaussian blur both images are compared through (composed with `blur`'s).
    With the views' hard edges a pixel changes only when an edge crosses its centre, and a forward-difference
    Jacobian sees no farther than its own step: unsmoothed, two steps found 3.7 mm of a 12 mm offset; through σ 1 px,
    9.8 mm (docs/decisions.md, "Gauss–Newton on the pose")."""
    gn_damping: float = 1e-3
    """solver "gauss_newton": Marquardt's λ, relative to the normal matrix's diagonal."""
    gn_max_step: tuple[float, float] = (0.008, 0.08)
    """solver "gauss_newton": the most one step may move a body, m and rad: a trust region (the renders are linear in
    the pose only over a few px), about as far as Adam's five steps went, so a gross loss is left to the search."""
    rot_stiffness: float = 8.0
    """rigid: torque per radian of rotation found, N·m/rad."""
    damping_ratio: float = 1.0
    """rigid: damping of the visual pull relative to critical (2·sqrt(k·m), 2·sqrt(k_rot·I) with the smallest
    principal inertia), against the body's velocity; without it the sign-like pull oscillates."""
    integral: float = 10.0
    """rigid: integral action, 1/s: each frame's found translation and rotation also accumulate (leaking
    with time constant `integral_leak`) into a pull of stiffness × integral × accumulated × the physics frame
    (divided, like the spring, by the square of the frames a wrench is held: `VisualCorrection`), so a
    disagreement that persists (the twin's contact pushing its object where the real one is not) meets a
    growing force instead of the few newtons Adam's bounded steps give (docs/decisions.md). 0: off."""
    integral_leak: float = 0.5
    """rigid: time constant of the integral's leak, s."""
    integral_discharge: tuple[float, float] | None = None
    """rigid: empty an object's integral (translation and rotation apart) once the object moves along its pull faster
    than this (m/s, rad/s) and fast enough to cover the error found this frame within the frame: the sum has done
    its work, and held on, it throws an object the moment what held it lets go. None: never (it moved the
    contact-rich tails around rather than shrinking them: docs/decisions.md, "What sets the contact-rich tails")."""
    release_integral: bool = True
    """rigid: empty an object's integral when its contact with the arm (or another object) ends in the twin (the
    contact was there at the last correction and is gone now): the sum built up against that contact, and held on,
    it throws the object the moment the contact lets go (docs/decisions.md, "Released contacts")."""
    held_exponent: float = 2.0
    """A wrench held for n frames has its spring and integral divided by n to this power: 2 keeps k·T²/m, what decides
    whether the held explicit feedback on a free object is stable, what it is when every frame is corrected
    (docs/decisions.md, "Held wrenches"); 1 keeps each correction's impulse instead."""
    cameras_per_frame: int | None = None
    """Render into this many of the cameras per correction, taking them in turn (None: all of them). Each camera
    costs its share of a correction's rendering; in turn, every camera still speaks every few corrections."""
    shade_recast: float = 0.01
    """With a shadow light: the objects' colours shaded by the arm's shadow (`TwinViews.moving`) are computed again
    once a body (the arm at the real arm's joints, or an object) moved more than this since they last were, m (0:
    every correction). Under a shadow the loss compares chromaticity, which the shading barely moves, and it costs
    2–3 ms a correction (docs/decisions.md, "The shadow's cost")."""
    crop_margin: int | None = 16
    """Optimise over a window of each image around the objects (their projections at the twin's pose, grown by
    this many px; None: whole images): far pixels carry no gradient to them (docs/decisions.md)."""
    planar_on_support: bool = True
    """While an object rests on static geometry (the table), keep only the in-plane part of its wrench (force
    along the surface, torque about its normal): the support already fixes the rest (docs/decisions.md)."""
    support_margin: float = 0.005
    """An object within this distance of static geometry counts as resting on it, m, contact or not, so a T that
    hops a millimetre is not pulled into the table (docs/decisions.md, "Support within a margin")."""
    rest_eps2d: float | None = 0.01
    """px²: the renderer's low-pass in the correction's views while the twin's objects rest (each slower than
    `rest_speed` for `rest_frames` frames); None: always the views' own (`TwinViews.eps2d`, 0.05 in the runtime).
    Sharper edges place a resting object more precisely, but narrow the loss's basin, which a push outruns: hence
    only at rest (docs/decisions.md, "Sharper at rest"), and only where every frame is corrected (`held_frames` 1;
    corrected every other frame it did not help: docs/decisions.md, "Held wrenches")."""
    rest_speed: float = 0.03
    """With `rest_eps2d`: m/s, the twin's objects' speed (of their origins) below which they count as still."""
    rest_frames: int = 6
    """With `rest_eps2d`: consecutive still frames before the sharper views are used."""
    rest_shift: float = 0.002
    """With `rest_eps2d`: m; a frame whose correction found an object more than this away in the plane ends the
    rest (the next frame renders with the views' own low-pass again): a real object pushed away from a still twin
    one (an unseen hand) should meet the wider basin (a guard: at rest the shift found is 0.1–1 mm)."""

    def __post_init__(self) -> None:
        if self.gn_iterations < 1:
            raise ValueError(f"gn_iterations: must be ≥ 1, got {self.gn_iterations}")
        if not self.gn_smoothing >= 0:
            raise ValueError(f"gn_smoothing: must be ≥ 0 px, got {self.gn_smoothing}")
        if not (min(self.gn_fd_step) > 0 and min(self.gn_max_step) > 0 and self.gn_damping >= 0):
            raise ValueError(
                f"gn_fd_step, gn_max_step: must be > 0, gn_damping ≥ 0; got {self.gn_fd_step}, {self.gn_max_step}, "
                f"{self.gn_damping}"
            )
        if self.iterations < 1:
            raise ValueError(f"iterations: must be ≥ 1, got {self.iterations}")
        if self.rest_eps2d is not None and not self.rest_eps2d >= 0:
            raise ValueError(f"rest_eps2d: must be None or ≥ 0 px², got {self.rest_eps2d}")
        if not self.rest_speed >= 0 or self.rest_frames < 0 or not self.rest_shift >= 0:
            raise ValueError(
                f"rest_speed, rest_frames, rest_shift: must be ≥ 0, got {self.rest_speed}, {self.rest_frames}, "
                f"{self.rest_shift}"
            )
        if self.integral_discharge is not None and not (
            len(self.integral_discharge) == 2 and all(v >= 0 for v in self.integral_discharge)
        ):
            raise ValueError(f"integral_discharge: must be None or two speeds ≥ 0, got {self.integral_discharge}")
        if not self.support_margin >= 0:
            raise ValueError(f"support_margin: must be ≥ 0 m, got {self.support_margin}")
        if self.cameras_per_frame is not None and self.cameras_per_frame < 1:
            raise ValueError(f"cameras_per_frame: must be ≥ 1 or None, got {self.cameras_per_frame}")
        if not self.shade_recast >= 0:
            raise ValueError(f"shade_recast: must be ≥ 0 m, got {self.shade_recast}")
        if self.crop_margin is not None and self.crop_margin < 0:
            raise ValueError(f"crop_margin: must be ≥ 0 or None, got {self.crop_margin}")
        if not self.blur >= 0:
            raise ValueError(f"blur: must be ≥ 0 px, got {self.blur}")
        for name in ("lr_means", "lr_quats", "adam_eps", "stiffness", "huber_delta", "max_force"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
