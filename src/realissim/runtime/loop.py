"""The Real-is-Sim frame loop: one wiring, two switches (DESIGN.md §3).

Every frame: read the real cameras and the real arm's joints; if `correct`, compute the visual wrench
on the twin's objects from those images (robot rendered at the real arm's joints); step the twin with
the commanded joint targets and that wrench; if `follow`, stream the twin arm's *actual* joints to the
real robot through the follower; in lock-step, advance the real world one frame. Online is both
switches on, with a surrogate (or hardware); offline is both off, with no real world at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from realissim.real.follower import Follower, FollowerConfig
from realissim.real.interfaces import CameraStalledError
from realissim.real.surrogate.process import Surrogate
from realissim.runtime.desync import DesyncConfig, DesyncDetector
from realissim.spec.scene import SceneSpec
from realissim.twin.camera_refine import CameraRefineConfig, refine_cameras
from realissim.twin.color_fit import ColorFitConfig, fit_colors
from realissim.twin.correction import CorrectionConfig, CorrectionResult, VisualCorrection
from realissim.twin.physics import PhysicsConfig, TwinPhysics
from realissim.twin.state import TwinState
from realissim.twin.support import support_normals
from realissim.twin.views import TwinViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeConfig:
    """The frame loop's switches and parts."""

    follow: bool = True
    """Follower coupling: the real arm follows the twin arm."""
    correct: bool = True
    """Visual correction: camera images pull the twin's objects."""
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    planar_on_support: bool = True
    """While an object rests on static geometry (the table), apply only the in-plane part of its visual wrench
    (force along the surface, torque about its normal): the support already fixes the rest. Measured: a
    calibration bias made the correction press the resting T into the table with a steady 4.3 N, which
    raised its friction above the in-plane pull, and the twin stalled 5.5 mm from the real T."""
    fit_colors: bool = True
    """Before the first frame, fit the twin's Gaussian colours to the real cameras' first images (the twin
    and reality start in the same, known state)."""
    color_fit: ColorFitConfig = field(default_factory=ColorFitConfig)
    desync: DesyncConfig = field(default_factory=DesyncConfig)
    """The desync detector (active with the correction): when it fires, the follower holds the real arm."""
    refine_cameras: bool = True
    """Before the first frame, also correct the cameras' calibration from the first images (see
    `camera_refine`); by measurement it removes most of the bias the default gap's calibration error puts on
    the correction."""
    camera_refine: CameraRefineConfig = field(
        default_factory=lambda: CameraRefineConfig(steps=100, lr_rotation=1e-3, lr_translation=1e-9, intrinsics=True)
    )
    """Rotation and intrinsics (focal scale, principal point) by default. Measured on the 20 s scenario, default
    gap: rotation only 4.8 mm median error; + intrinsics 3.2 mm; + translation 3.8–4.3 mm (from one view
    translation is nearly degenerate with rotation and principal point); with no calibration error 1.2 mm."""
    follower: FollowerConfig = field(default_factory=FollowerConfig)


@dataclass(frozen=True)
class FrameReport:
    """One frame: the twin's state after it, the correction (None when off), and the time each stage
    took, s (keys: sense = reading the arm and the frames from shared memory, correct (with its parts
    correct.prepare, correct.forward, correct.backward, correct.optimiser), physics, follow, world)."""

    state: TwinState
    correction: CorrectionResult | None
    timing: dict[str, float]
    desynced: bool = False
    """The desync detector's verdict after this frame (the follower held the real arm if so)."""


class Runtime:
    """The twin plus, when online, its real world; `frame(q_target)` runs one 60 Hz frame."""

    def __init__(self, scene: SceneSpec, config: RuntimeConfig = RuntimeConfig(), world: Surrogate | None = None):
        """`world` is a started `Surrogate` (lock-step or real-time), required when either switch is on."""
        if (config.follow or config.correct) and world is None:
            raise ValueError("follow/correct need a real world: pass a started Surrogate, or switch both off")
        self.scene, self.config, self.world = scene, config, world
        self.twin = TwinPhysics(scene, config.physics)
        self.correction: VisualCorrection | None = None
        if config.correct:
            assert world is not None
            cams = [c.resized(world.size[0], world.size[1]) for c in scene.cameras]
            views = TwinViews(scene, self.twin.model, cameras=cams)
            self.correction = VisualCorrection(views, self.twin.model, config.correction)
            if config.fit_colors:
                self.twin.reset()
                q_real = world.robot.read().q
                xpos, xquat, _ = self.correction.poses(self.twin.data.qpos, self.twin.layout.robot_qpos, q_real)
                images = torch.from_numpy(np.stack([cam.read().image for cam in world.cameras]))[None]
                fit_colors(views, xpos, xquat, images, config.color_fit)
                if config.refine_cameras:
                    refine_cameras(views, xpos, xquat, images[0], config.camera_refine)
                    fit_colors(views, xpos, xquat, images, config.color_fit)
        self.follower = Follower(world.robot.description, config.follower) if config.follow and world else None
        self.detector = DesyncDetector(config.desync) if self.correction is not None else None
        self._stalled = False
        self._held_target: np.ndarray | None = None
        self.reset()

    def reset(self) -> None:
        """The twin to the scene's initial state; the follower from the real arm's measured joints."""
        self.twin.reset()
        if self.follower is not None and self.world is not None:
            self.follower.reset(self.world.robot.read().q)

    def frame(self, q_target: ArrayLike, correct: bool = True) -> FrameReport:
        """One frame with the policy's desired joints q_target (7,) rad; `correct=False` skips the visual
        correction this frame (a real-time loop catching up with the wall clock). While the desync detector
        says the twin is out of sync, the follower holds the real arm and the twin arm holds too (its
        targets stay those of the frame the detector fired; q_target is ignored until it re-arms, see
        `FrameReport.desynced`), so the policy's motion cannot push the twin's objects where the real ones
        are not. Re-applying the last wrench
        on such frames was measured to destabilise the twin (its damping term is for one frame)."""
        timing: dict[str, float] = {}
        clock = time.perf_counter
        t0 = clock()
        q_real, images = None, None
        if self.world is not None:
            q_real = self.world.robot.read().q
            if self.correction is not None and correct:
                images = self._read_cameras()
        timing["sense"] = clock() - t0
        result = None
        if self.correction is not None and images is not None:
            t0 = clock()
            poses = self.correction.poses(self.twin.data.qpos, self.twin.layout.robot_qpos, q_real)
            now = self.twin.state()
            velocity = np.concatenate([now.object_linvel, now.object_angvel], axis=1)
            support = None
            if self.config.planar_on_support:
                support = support_normals(self.twin.model, self.twin.data, self.correction.object_bodies)
            result = self.correction(*poses, images, velocity, support)
            self.twin.apply_wrenches(result.wrenches)
            if self.detector is not None:
                saturated = bool(
                    np.any(np.linalg.norm(result.wrenches[:, :3], axis=1) >= 0.99 * self.config.correction.max_force)
                )
                self.detector.update(result.loss_after, saturated)
            timing["correct"] = clock() - t0
            timing.update({f"correct.{key}": value for key, value in result.stages.items()})
        t0 = clock()
        if self.desynced:  # hold the twin arm with the real one, so the two stay consistent until re-armed
            if self._held_target is None:  # the servo targets it had when the detector fired
                self._held_target = self.twin.data.ctrl[self.twin.layout.actuators].copy()
            q_target = self._held_target
        else:
            self._held_target = None
        self.twin.set_joint_targets(q_target)
        self.twin.step()
        state = self.twin.state()
        timing["physics"] = clock() - t0
        if self.follower is not None and self.world is not None:
            t0 = clock()
            self.follower.follow(self.world.robot, state.q, hold=self.desynced)
            timing["follow"] = clock() - t0
        if self.world is not None and self.world.config.mode == "lockstep":
            t0 = clock()
            self.world.step()
            timing["world"] = clock() - t0
        return FrameReport(state, result, timing, self.desynced)

    def _read_cameras(self) -> Tensor | None:
        """All cameras' latest frames (C,H,W,3) uint8, or None (no correction this frame) if one has stalled."""
        assert self.world is not None
        try:
            images = torch.from_numpy(np.stack([cam.read().image for cam in self.world.cameras]))
        except CameraStalledError as err:
            if not self._stalled:
                log.warning("correction paused: %s", err)
            self._stalled = True
            return None
        if self._stalled:
            log.info("correction resumed: every camera delivers frames again")
        self._stalled = False
        return images

    @property
    def desynced(self) -> bool:
        """Whether the desync detector currently says the twin is out of sync with reality."""
        return self.detector is not None and self.detector.desynced
