"""The frame loop's configuration, grouped by stage: how the twin renders itself into the real cameras (`views`),
the visual correction (`correction`, `correct_every`), calibration, supervision (the desync detector, the alarm
check, re-acquisition and the holds) and the arm (the follower, the shaping of the twin arm's desired joints, the
lead bound). The measurements behind each default are in docs/decisions.md under the section each docstring names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from realissim.assets.appearance import AppearanceConfig
from realissim.estimate.board_calibration import BoardCalibrationConfig
from realissim.estimate.camera_refine import CameraRefineConfig
from realissim.estimate.color_fit import ColorFitConfig
from realissim.estimate.correction import CorrectionConfig
from realissim.estimate.placement import PlacementConfig
from realissim.estimate.search import SearchConfig
from realissim.estimate.sighting import SightingConfig
from realissim.real.follower import FollowerConfig
from realissim.runtime.desync import LOSS_DISTANCE, DesyncConfig
from realissim.twin.physics import PhysicsConfig
from realissim.views.shadows import ShadowFitConfig


@dataclass(frozen=True)
class ViewsConfig:
    """How the twin renders itself into the real cameras (for the correction, calibration, the sighting and the
    search); the policy's virtual cameras are set elsewhere (`EnvConfig`)."""

    appearance: AppearanceConfig = field(default_factory=AppearanceConfig)
    """How the twin's Gaussians are laid out on its bodies (`assets.appearance`); the real world is unaffected."""
    eps2d: float = 0.05
    """px² added to every projected Gaussian's 2D covariance (`TwinViews.eps2d`); the virtual cameras keep
    `render.common.EPS2D` (0.3). Below 3DGS's 0.3 the twin's edges are as hard as the real cameras' point-sampled
    ones (docs/decisions.md, "The renderer's low-pass")."""


@dataclass(frozen=True)
class CalibrationConfig:
    """`Runtime.calibrate`: camera poses and intrinsics, the key light's shadow, the Gaussians' colours."""

    fit_colors: bool = True
    """Fit the twin's Gaussian colours to the real cameras' images."""
    color_fit: ColorFitConfig = field(default_factory=ColorFitConfig)
    shadows: ShadowFitConfig = field(default_factory=ShadowFitConfig)
    """Look for the key light's shadow in the images (`views.shadows`); where there is one, the twin renders it from
    then on: the arm's shadow on the table and on the objects, every corrected frame."""
    use_board: bool = True
    """Where the world can lay a calibration board on the table (`RealWorld.calibration_board`), find every
    camera's pose and intrinsics from images of it first (`estimate.board_calibration`): its appearance is known in
    advance, so fitted colours cannot absorb the cameras' error. The photometric refinement then runs only for the
    cameras that did not see the board."""
    board: BoardCalibrationConfig = field(default_factory=BoardCalibrationConfig)
    refine_cameras: bool = True
    """Correct the cameras' rotation and intrinsics from the images (without a board, or for the cameras that did
    not see it; docs/decisions.md, "Calibration")."""
    camera_refine: CameraRefineConfig = field(
        default_factory=lambda: CameraRefineConfig(steps=100, lr_rotation=1e-3, lr_translation=1e-9, intrinsics=True)
    )
    """Rotation and intrinsics (focal scale, principal point); from one view translation is nearly degenerate
    with rotation and principal point, so it is left out."""


@dataclass(frozen=True)
class SupervisionConfig:
    """What watches the twin against the images (`runtime.supervision.Supervisor`): the desync detector, the
    search's check of each alarm, re-acquisition of a lost object, the early search, and the holds."""

    desync: DesyncConfig = field(default_factory=DesyncConfig)
    """The desync detector (active with the correction): while it fires, both arms hold."""
    sighting: SightingConfig = field(default_factory=SightingConfig)
    """Where the cameras see each object (every corrected frame, ~1 ms): evidence for the detector."""
    reacquire: bool = True
    """While the detector says out of sync: search the objects in the images and put the twin's there."""
    search: SearchConfig = field(default_factory=SearchConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    retry_frames: int = 6
    """While out of sync, a search that did not place the object is tried again after this many frames ..."""
    recheck_frames: int = 45
    """... and one that did, after this many (when the detector has still not re-armed: the placement did not
    bring the twin back in sync)."""
    confirm_fraction: float = 0.9
    """The twin's object is moved only when its pose explains less than this fraction of what the found pose
    explains (loss removed from the object-absent loss); else the search confirms the twin's pose."""
    alarm_check: float | None = LOSS_DISTANCE
    """Before the detector fires, the search looks for the objects in this frame's images: when it finds every
    object within this distance of the twin's (m, planar) and within `alarm_check_yaw`, the evidence came from a
    near-loss the correction is still following and no alarm is raised (`DesyncDetector.update(check=…)`). An
    object not found confirms the alarm. 2 cm: a loss's own definition; the search is accurate to ~5 mm. None:
    fire on the evidence alone (docs/decisions.md, "The search checks an alarm")."""
    alarm_check_yaw: float = math.radians(10.0)
    """With `alarm_check`: the largest yaw difference (rad) between the found pose and the twin's that vetoes an
    alarm (a T turned about its centre is lost too, though its centre is not)."""
    alarm_check_near: float | None = 0.2
    """With `alarm_check`: each object is first searched near the twin's pose only (`ObjectSearch.search_near`, a
    quarter to two thirds of the renders): found there within `alarm_check` and `alarm_check_yaw` of the twin's pose,
    explaining at least this fraction of the object-absent loss, it raises no alarm and the global search is skipped
    (found right, the T explains 0.24–0.86; a T standing on a side "found" lying 0.05–0.09). Otherwise the global
    search decides, and a re-acquisition places from its pose. None: always the global search (docs/decisions.md,
    "The alarm check looks near first")."""
    early_search: float = 0.0
    """In sync: once the detector's evidence has come this far towards firing (`DesyncDetector.suspicion`, e.g.
    0.5), search the objects without holding the arm and place one the images clearly show elsewhere
    (`confirm_fraction`), the twin arm first moved to the real one and the detector's counts started afresh. Each
    search costs its frame ~0.15 s on 2 cores. 0: off; off by default because the policy succeeded less often
    with it online (docs/decisions.md, "The early search")."""
    early_hold: int = 0
    """Frames both arms hold after an early placement, as while the detector fires. 0: none."""
    early_every: int = 30
    """Frames between two early searches at least."""
    rest_while_held: bool = True
    """From the frame the detector fires until a search places or confirms the objects, the correction's wrench is
    not applied: the twin's objects stay where they were lost (the correction still runs: its residual is the
    detector's evidence). False: the correction keeps pulling, towards whatever the photometric loss finds nearest
    (docs/decisions.md, "A lost object rests until a search places or confirms it")."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.early_search < 1.0:
            raise ValueError(f"early_search: must be in [0, 1) (a fraction of the evidence that fires), got "
                             f"{self.early_search}")  # fmt: skip
        if self.early_hold < 0:
            raise ValueError(f"early_hold: must be ≥ 0 frames, got {self.early_hold}")
        if self.early_every < 1:
            raise ValueError(f"early_every: must be ≥ 1, got {self.early_every}")
        if self.alarm_check is not None and not self.alarm_check > 0:
            raise ValueError(f"alarm_check: must be > 0 m or None, got {self.alarm_check}")
        if self.alarm_check_near is not None and not 0 < self.alarm_check_near < 1:
            raise ValueError(f"alarm_check_near: must be in (0, 1) or None, got {self.alarm_check_near}")
        if not self.alarm_check_yaw > 0:
            raise ValueError(f"alarm_check_yaw: must be > 0 rad, got {self.alarm_check_yaw}")
        if self.retry_frames < 1 or self.recheck_frames < 1:
            raise ValueError(f"retry_frames, recheck_frames: must be ≥ 1, got {self.retry_frames}, "
                             f"{self.recheck_frames}")  # fmt: skip


@dataclass(frozen=True)
class ArmConfig:
    """The arm while the real one follows the twin's: the follower, and what shapes and bounds the twin arm's
    desired joints before its servos (offline, with no follower, nothing does)."""

    follower: FollowerConfig = field(default_factory=FollowerConfig)
    """The follower; its command period is set to the twin's frame period."""
    limits: float | None = 0.8
    """Shape the desired joints by a Ruckig trajectory within this fraction of the robot's published velocity,
    acceleration and jerk limits (the follower plans within `follower.limit_margin` of them, so it keeps up). None:
    not shaped; the real arm then falls behind a twin arm faster than its limits (docs/decisions.md, "The lead
    bound")."""
    max_lead: float | None = 0.01
    """Shorten each frame's step of the desired joints so the desired tip leads the real arm's measured tip by at
    most this, m (`runtime.lead`); None: no bound. Use with `limits`: bounded but not shaped, the real arm
    overshoots a twin arm that stops abruptly (docs/decisions.md, "The lead bound")."""
    lead_path_s: float | None = None
    """With `max_lead`: the bounded desired joints follow the policy's targets in order while at most this far
    behind them, s; None: straight for the latest target (`runtime.lead`)."""
    lead_lag_frames: float = 0.0
    """With `max_lead`: the bound grows by the real tip's travel over the last frame × this (the follower's natural
    lag, in frames); 0: a fixed bound (`runtime.lead`)."""

    def __post_init__(self) -> None:
        if self.lead_path_s is not None and not self.lead_path_s > 0:
            raise ValueError(f"lead_path_s: must be > 0 s or None, got {self.lead_path_s}")
        if not self.lead_lag_frames >= 0:
            raise ValueError(f"lead_lag_frames: must be ≥ 0, got {self.lead_lag_frames}")


@dataclass(frozen=True)
class RuntimeConfig:
    """The frame loop: its two switches, the twin's physics, and each stage's settings."""

    follow: bool = True
    """Follower coupling: the real arm follows the twin arm."""
    correct: bool = True
    """Visual correction: camera images pull the twin's objects."""
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    """The twin's physics; its frame rate is the loop's."""
    views: ViewsConfig = field(default_factory=ViewsConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    correct_every: int = 1
    """Run the visual correction on every n-th frame only and hold its wrench on the frames between (scaled so the
    impulse is the same). The correction is most of an online frame's cost (docs/decisions.md, "Held wrenches").
    The desync detector's counts are per corrected frame, so its times in seconds stay the same."""
    correct_beside: bool | None = None
    """Run the correction and its supervision in a thread of their own beside the frame loop, on a replica of the
    twin (`runtime.beside`): physics, the follower and the policy's targets keep the frame rate whatever the
    correction costs; each result is applied when it arrives, its wrench held for the frames measured between two
    corrections (the spring, integral and detector scaled to that period) and damped with the objects' velocity
    then. None: beside when the world runs on the wall clock, inline in lock-step (deterministic)."""
    beside_cameras: int | None = 1
    """With the correction beside the loop: cameras rendered per correction, in turn (`CorrectionConfig.
    cameras_per_frame`; None: the correction's own setting). One camera costs about two thirds of three's (22 vs
    35 ms here, with the surrogate beside): corrections at ~28 instead of ~21 Hz, and a tighter twin for it
    (docs/decisions.md, "The correction beside the loop")."""
    beside_min_held: int = 2
    """With the correction beside the loop: the fewest frames a wrench is held for, and scaled for (its spring and
    integral divided by their square). A result applied beside the loop is at least a frame old; held and scaled for
    one frame, the full spring acting on an error a frame or two old set the T oscillating when corrections came
    faster than one every two frames (docs/decisions.md, "The correction beside the loop")."""
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    supervision: SupervisionConfig = field(default_factory=SupervisionConfig)
    arm: ArmConfig = field(default_factory=ArmConfig)

    def __post_init__(self) -> None:
        if self.correct_every < 1:
            raise ValueError(f"correct_every: must be ≥ 1, got {self.correct_every}")
        if self.beside_min_held < 1:
            raise ValueError(f"beside_min_held: must be ≥ 1 frame, got {self.beside_min_held}")
        if self.beside_cameras is not None and self.beside_cameras < 1:
            raise ValueError(f"beside_cameras: must be ≥ 1 or None, got {self.beside_cameras}")
