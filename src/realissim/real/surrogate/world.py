"""The surrogate real world, in-process: hidden physics, a 1 kHz arm controller, noisy cameras, disturbances.

`SurrogateWorld` is what the Robot and Camera adapters of the surrogate process wrap (docs/design.md §4).
Per camera frame (`fps`, by default the twin's frame rate) the caller sends joint commands (`command`),
advances (`step_frame`), reads the encoders (`joint_state`) and the cameras (`render_cameras`);
`reset(to)` starts an episode over in place. `oracle()` returns ground truth for evaluation only.
Everything is deterministic for a seed: physics is single-threaded MuJoCo, and the camera noise of frame
k, camera c depends only on (seed, k, c) (see `NoiseBank`), so a world reset to a state renders and
moves exactly as a new world reset to it.

Images come from MuJoCo's OpenGL renderer, offscreen. The GL context is created here, not by
`mujoco.Renderer`: MuJoCo picks its platform from MUJOCO_GL once, when `mujoco` is first imported,
so a process that imported mujoco without MUJOCO_GL=egl (e.g. a test suite) cannot render headless
through `mujoco.Renderer` any more. This module honours MUJOCO_GL when it is set ("egl", "osmesa",
"glfw"), else uses EGL when there is no display (GLFW when there is one), so with EGL the import order
does not matter. OSMesa (needs libosmesa6) is tried if EGL fails, but PyOpenGL fixes its platform on its
first import: on an OSMesa-only machine set MUJOCO_GL=osmesa before anything imports mujoco.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from realissim.assets.mjcf import KEYFRAME_HOME
from realissim.geometry import quat_mul, yaw_quat
from realissim.real.interfaces import OracleState
from realissim.real.surrogate.gap import Disturbance, GapProfile
from realissim.real.surrogate.model import (
    BOARD_GROUP,
    MOTOR_PREFIX,
    ArmController,
    NoiseBank,
    average_samples,
    develop,
    hand_blob,
    surrogate_cameras,
    surrogate_mjcf,
)
from realissim.spec.board import DotBoard
from realissim.spec.errors import SpecError
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.twin.physics import FRAME_RATE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FrameResult:
    """One camera's delivery for one frame: image uint8 (H, W, 3) RGB, captured at `stamp` s (world time).

    `dropped`: no new frame this tick (image and stamp repeat the last delivered frame; do not publish).
    `delayed`: the image is the previous tick's capture (`stamp` says so). `frozen`: the camera is stuck
    and repeats an old image with a fresh stamp (ground truth; a real driver would not say so).
    """

    camera: str
    image: np.ndarray
    stamp: float
    dropped: bool = False
    delayed: bool = False
    frozen: bool = False


def make_gl_context(width: int, height: int) -> Any:
    """A current offscreen OpenGL context (see the module docstring for how the platform is chosen)."""
    wanted = os.environ.get("MUJOCO_GL", "").strip().lower()
    headless = sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if not wanted:
        wanted = "egl" if headless else "glfw"
    errors = []
    for backend in [wanted] + (["osmesa"] if wanted == "egl" else []):
        try:
            if backend == "egl":
                from mujoco.egl import GLContext
            elif backend == "osmesa":
                from mujoco.osmesa import GLContext
            else:
                GLContext = mujoco.GLContext
            context = GLContext(width, height)
            context.make_current()
            return context
        except Exception as err:  # each backend fails differently (ImportError, RuntimeError, GLError, ...)
            errors.append(f"{backend}: {err}")
            log.warning("OpenGL backend %s unavailable: %s", backend, err)
    raise RuntimeError("no OpenGL context for rendering; " + "; ".join(errors))


class _Renderer:
    """MuJoCo's OpenGL renderer on an own offscreen context, set up for speed (no reflections, no MSAA)."""

    def __init__(self, model: mujoco.MjModel, shadows: bool) -> None:
        self._model = model
        self._ctx = make_gl_context(model.vis.global_.offwidth, model.vis.global_.offheight)
        self._con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._scene = mujoco.MjvScene(model, maxgeom=model.ngeom + 100)
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadows
        self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        self._opt = mujoco.MjvOption()
        self._opt.sitegroup[:] = 0
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._pert = mujoco.MjvPerturb()

    def show_group(self, group: int, visible: bool) -> None:
        """Draw the geoms of `group` (0–5) or not."""
        self._opt.geomgroup[group] = int(visible)

    def render(self, data: mujoco.MjData, camera: int, width: int, height: int) -> np.ndarray:
        """uint8 (height, width, 3) RGB image from fixed camera `camera`."""
        self._ctx.make_current()
        self._cam.fixedcamid = camera
        mujoco.mjv_updateScene(
            self._model, data, self._opt, self._pert, self._cam, mujoco.mjtCatBit.mjCAT_ALL, self._scene
        )
        rect = mujoco.MjrRect(0, 0, width, height)
        mujoco.mjr_render(rect, self._scene, self._con)
        out = np.empty((height, width, 3), dtype=np.uint8)
        mujoco.mjr_readPixels(out, None, rect, self._con)
        return out[::-1]  # OpenGL rows run bottom-up

    def close(self) -> None:
        if self._ctx is not None:
            self._ctx.make_current()
            self._con.free()
            self._ctx.free()
            self._ctx = None


@dataclass(frozen=True)
class _Scheduled:
    """A disturbance bound to frames: active for frames [start, start + frames)."""

    disturbance: Disturbance
    start: int
    frames: int

    def active(self, frame: int, camera: str | None = None) -> bool:
        d = self.disturbance
        return self.start <= frame < self.start + self.frames and (camera is None or d.camera in (None, camera))


class SurrogateWorld:
    """The real world stand-in for `scene` under `gap` (see the module docstring).

    `camera_size` (width, height) px renders every camera at that size (intrinsics scaled); `render=False`
    builds no renderer (physics only). `fps` is the camera frame rate; the physics and the arm's
    controller run at the gap's control rate, and frame k ends on the control tick nearest k / fps.
    """

    def __init__(
        self,
        scene: SceneSpec,
        gap: GapProfile = GapProfile(),
        seed: int = 0,
        camera_size: tuple[int, int] | None = None,
        render: bool = True,
        fps: float = FRAME_RATE,
        board: DotBoard | None = DotBoard(),
    ) -> None:
        if not (fps > 0 and math.isfinite(fps)):
            raise ValueError(f"fps must be > 0, got {fps}")
        self.scene, self.gap, self.seed = scene, gap, seed
        self.told_cameras, self.true_cameras = surrogate_cameras(scene, gap, camera_size)
        self.board = board
        """The calibration board the twin is told of (drawn at its pose + `gap.board_error`; None: none)."""
        self.board_visible = False
        """Whether the board lies on the table (`show_board`; a reset leaves it as it is)."""
        self.model = mujoco.MjModel.from_xml_string(surrogate_mjcf(scene, gap, self.true_cameras, board))
        self.data = mujoco.MjData(self.model)
        self._home = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, KEYFRAME_HOME)
        self.frame_dt = 1.0 / fps
        self.control_dt = float(self.model.opt.timestep)
        robot = scene.robot
        jids = [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, j.name) for j in robot.joints]
        self._jq, self._jd = self.model.jnt_qposadr[jids], self.model.jnt_dofadr[jids]
        self._motors = [
            mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_ACTUATOR, MOTOR_PREFIX + n) for n in robot.joint_names
        ]
        bodies = [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, o.name) for o in scene.objects]
        self._oq = [self.model.jnt_qposadr[self.model.body_jntadr[b]] for b in bodies]
        self._od = [self.model.jnt_dofadr[self.model.body_jntadr[b]] for b in bodies]
        self._q_lower = np.array([j.lower for j in robot.joints])
        self._q_upper = np.array([j.upper for j in robot.joints])
        self._offset = np.asarray(gap.arm.joint_offset, dtype=np.float64)
        self.controller = ArmController(gap.arm, [j.effort for j in robot.joints], [j.velocity for j in robot.joints])
        self._lights = self._light_values()
        self._schedule = [self._bind(d, f"disturbances[{i}]", 0) for i, d in enumerate(gap.disturbances)]
        self._live: list[_Scheduled] = []
        sizes = {(c.height, c.width) for c in self.true_cameras}
        self._noise = {size: NoiseBank(seed, (*size, 3)) for size in sizes} if render else {}
        self._renderer = _Renderer(self.model, gap.lighting.shadow_size > 0) if render and scene.cameras else None
        self.reset()

    # -- lifecycle -----------------------------------------------------------------------------------
    def reset(self, to: StartState | None = None) -> None:
        """Start an episode over in place at `to` (default: the scene's own state): objects at rest at their poses
        (quaternions normalised), the arm at rest with its true joints at `to.q` (so the encoders read
        `to.q` + the gap's `joint_offset`) and its controller holding there, time and frame 0.

        Commands sent before the reset, also those still in the controller's latency FIFO, are dropped; live
        disturbances (`disturb`) are cleared, so nothing injected in one episode reaches the next; camera
        history (delayed, dropped, frozen frames) is forgotten. The profile's scheduled disturbances count
        from the reset: they recur at the same times in every episode. Nothing else carries over, so a
        reset world steps and renders exactly as a new world reset to `to`. Raises `SpecError` if `to`
        does not fit the scene (`StartState.check`); the world is then unchanged.
        """
        to = StartState.of_scene(self.scene) if to is None else to
        to.check(self.scene)
        mujoco.mj_resetDataKeyframe(self.model, self.data, self._home)
        self.data.qpos[self._jq] = to.q_array
        for k, (pos, quat) in enumerate(zip(to.object_pos, to.object_quat, strict=True)):
            self.data.qpos[self._oq[k] : self._oq[k] + 3] = pos
            self.data.qpos[self._oq[k] + 3 : self._oq[k] + 7] = quat / np.linalg.norm(quat)
        self.data.qvel[:] = 0.0
        mujoco.mj_forward(self.model, self.data)
        self.controller.reset(to.q_array + self._offset)  # it drives the encoder reading, which has the offset
        self.frame, self._tick, self._live = 0, 0, []
        self._moved: set[int] = set()
        self._frames: list[FrameResult] | None = None
        self._captures: list[FrameResult | None] = [None] * len(self.true_cameras)
        self._delivered: list[FrameResult | None] = [None] * len(self.true_cameras)
        self._apply_moves()

    def close(self) -> None:
        """Release the OpenGL context; the world can still step but no longer render."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def __enter__(self) -> SurrogateWorld:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the robot ---------------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """World time, s (a whole number of control ticks)."""
        return self._tick * self.control_dt

    def command(self, q: ArrayLike) -> np.ndarray:
        """Send a joint position target (J,) rad, acted on after the latency; returns it clipped to the joint
        limits. Raises ValueError for a wrong shape or a non-finite value."""
        q = np.array(q, dtype=np.float64)
        if q.shape != self._q_lower.shape:
            raise ValueError(f"joint target must have shape {self._q_lower.shape}, got {q.shape}")
        bad = np.flatnonzero(~np.isfinite(q))
        if bad.size:
            raise ValueError(f"joint target for {self.scene.robot.joints[bad[0]].name!r} is not finite ({q[bad[0]]})")
        q = np.clip(q, self._q_lower, self._q_upper)
        self.controller.send(q, self._tick)
        return q

    def joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        """What the encoders say: positions (J,) rad (true + calibration offset) and velocities (J,) rad/s."""
        return self.data.qpos[self._jq] + self._offset, self.data.qvel[self._jd].copy()

    def step_frame(self) -> None:
        """Advance one camera frame at the control rate, then apply the disturbances now due."""
        end = round((self.frame + 1) * self.frame_dt / self.control_dt)
        d = self.data
        while self._tick < end:
            q = d.qpos[self._jq]
            d.ctrl[self._motors] = self.controller.torque(self._tick, q + self._offset, d.qvel[self._jd])
            mujoco.mj_step(self.model, d)
            self._tick += 1
        if not (np.all(np.isfinite(d.qpos)) and np.all(np.isfinite(d.qvel))):
            raise RuntimeError(f"surrogate physics diverged at frame {self.frame + 1} (t = {self.time:.3f} s)")
        self.frame += 1
        self._frames = None
        self._apply_moves()

    # -- disturbances ------------------------------------------------------------------------------
    def disturb(self, disturbance: Disturbance) -> None:
        """Inject a disturbance live; it starts at the next frame (or at its `at`, if later)."""
        self._live.append(self._bind(disturbance, "disturbance", self.frame + 1))

    def _bind(self, d: Disturbance, where: str, earliest: int) -> _Scheduled:
        if d.object is not None and d.object not in {o.name for o in self.scene.objects}:
            raise SpecError(f"{where}.object", f"scene {self.scene.name!r} has no object {d.object!r}")
        if d.camera is not None and d.camera not in {c.name for c in self.scene.cameras}:
            raise SpecError(f"{where}.camera", f"scene {self.scene.name!r} has no camera {d.camera!r}")
        start = max(earliest, math.ceil(d.at / self.frame_dt - 1e-6))
        return _Scheduled(d, start, max(1, round(d.duration / self.frame_dt)))

    def _active(self, kind: str, camera: str | None = None) -> list[Disturbance]:
        return [
            s.disturbance
            for s in self._schedule + self._live
            if s.disturbance.kind == kind and s.active(self.frame, camera)
        ]

    def _apply_moves(self) -> None:
        names = [o.name for o in self.scene.objects]
        for s in self._schedule + self._live:
            d = s.disturbance
            if d.kind != "move_object" or s.start > self.frame or id(s) in self._moved:
                continue
            self._moved.add(id(s))
            k = names.index(d.object)
            adr, dof = self._oq[k], self._od[k]
            self.data.qpos[adr : adr + 3] += d.displacement
            quat = quat_mul(yaw_quat(d.rotation), self.data.qpos[adr + 3 : adr + 7])
            self.data.qpos[adr + 3 : adr + 7] = quat / np.linalg.norm(quat)
            self.data.qvel[dof : dof + 6] = 0.0
            log.info(
                "disturbance: moved %s by %s m, %.3f rad at t = %.3f s", d.object, d.displacement, d.rotation, self.time
            )
        mujoco.mj_forward(self.model, self.data)

    # -- cameras -----------------------------------------------------------------------------------
    def _light_values(self) -> dict[str, np.ndarray]:
        m = self.model
        return {
            "diffuse": m.light_diffuse.copy(),
            "ambient": m.light_ambient.copy(),
            "specular": m.light_specular.copy(),
            "headlight": m.vis.headlight.diffuse.copy(),
        }

    def _set_lighting(self, scale: float) -> None:
        m, base = self.model, self._lights
        m.light_diffuse[:] = base["diffuse"] * scale
        m.light_ambient[:] = base["ambient"] * scale
        m.light_specular[:] = base["specular"] * scale
        m.vis.headlight.diffuse[:] = base["headlight"] * scale

    def _capture(self, c: int) -> FrameResult:
        cam = self.true_cameras[c]
        assert self._renderer is not None
        gap = self.gap.camera_gap(cam.name)
        s = gap.pixel_samples
        image = average_samples(self._renderer.render(self.data, c, cam.width * s, cam.height * s), s)
        for d in self._active("occlude", cam.name):
            alpha, color = hand_blob(cam.height, cam.width, d.center, d.size)
            image = np.rint(image * (1.0 - alpha[..., None]) + color * alpha[..., None])
        noise = self._noise[(cam.height, cam.width)].sample(self.frame, c)
        return FrameResult(cam.name, develop(image, gap, noise), self.time)

    def show_board(self, visible: bool) -> None:
        """Lay the calibration board on the table (or take it away): the cameras draw it from the current frame
        on (the frame is rendered again). It has no physics: the objects stay where they are, lying on it as
        far as the cameras see. Raises if this world has no board or no renderer."""
        if self.board is None:
            raise RuntimeError("this surrogate world was built without a calibration board (board=None)")
        if self._renderer is None:
            raise RuntimeError("this surrogate world was built with render=False (or has no cameras, or is closed)")
        self._renderer.show_group(BOARD_GROUP, visible)
        self.board_visible = visible
        self._frames = None

    def render_cameras(self) -> list[FrameResult]:
        """Every camera's delivery for the current frame, in scene order (the same list if asked again)."""
        if self._renderer is None:
            raise RuntimeError("this surrogate world was built with render=False (or has no cameras, or is closed)")
        if self._frames is not None:
            return self._frames
        scale = math.prod(d.intensity for d in self._active("lighting"))
        self._set_lighting(scale)
        frames = []
        for c, cam in enumerate(self.true_cameras):
            last = self._delivered[c]
            if self._active("freeze_camera", cam.name) and last is not None:
                frames.append(dataclasses.replace(last, stamp=self.time, frozen=True, delayed=False))
                continue
            capture = self._capture(c)
            if self._active("drop_frame", cam.name):
                result = dataclasses.replace(last or capture, dropped=True)
            elif self._active("delay_frame", cam.name):
                result = dataclasses.replace(self._captures[c] or capture, delayed=True)
            else:
                result = capture
            self._captures[c] = capture
            if not result.dropped:
                self._delivered[c] = result
            frames.append(result)
        self._set_lighting(1.0)
        self._frames = frames
        return frames

    # -- ground truth ------------------------------------------------------------------------------
    def oracle(self) -> OracleState:
        """Ground truth now (copies). For evaluation only: nothing the twin uses may read it."""
        pos = np.array([self.data.qpos[a : a + 3] for a in self._oq]).reshape(-1, 3)
        quat = np.array([self.data.qpos[a + 3 : a + 7] for a in self._oq]).reshape(-1, 4)
        return OracleState(
            time=self.time,
            object_names=tuple(o.name for o in self.scene.objects),
            object_pos=pos,
            object_quat=quat,
            q=self.data.qpos[self._jq].copy(),
            qd=self.data.qvel[self._jd].copy(),
            q_command=self.controller.q_c.copy(),
        )


__all__ = ["FrameResult", "OracleState", "SurrogateWorld", "make_gl_context"]
