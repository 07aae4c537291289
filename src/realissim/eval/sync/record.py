"""A closed-loop run as a rerun recording (`.rrd`): the twin's 3D state beside the truth, real camera images
beside the twin rendered into the same cameras, and the error and correction curves.

One recording can hold several runs (e.g. correction on and off), each under its own entity prefix, on a
shared "time" timeline (s). Open it with `rerun runs/demo/demo.rrd` (the viewer ships with rerun-sdk).

Entities per run `<run>/`:
- `world/twin/<object>`, `world/truth/<object>`: each object's collision spheres at its pose (truth is the
  oracle's, for evaluation only); `world/twin/arm`: the twin arm's joint chain.
- `cameras/<camera>/real`, `cameras/<camera>/twin`: images every `image_every` frames (JPEG).
- `error/position_mm`, `error/yaw_deg`, `correction/force_N`, `correction/loss`, `desync`: every frame.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np
import rerun as rr

from realissim.assets import panda
from realissim.envs.env import Env, FrameInfo
from realissim.eval.episode import EpisodeObserver
from realissim.eval.sync.metrics import pose_errors
from realissim.real.interfaces import CameraStalledError
from realissim.spec.scene import SceneSpec
from realissim.util.images import to_uint8
from realissim.views.cameras import TwinViews

log = logging.getLogger(__name__)

TRUTH_COLOR = (40, 200, 90, 110)
"""RGBA of the oracle's object poses in the 3D view (semi-transparent green)."""


@dataclass
class RunRecorder(EpisodeObserver):
    """An episode observer (online `Env`) that logs one run under `prefix`; keeps the last images it logged."""

    recording: rr.RecordingStream
    scene: SceneSpec
    prefix: str
    image_every: int = 15
    last_real: np.ndarray | None = None
    """(C,H,W,3) uint8: the real images of the last image frame."""
    last_twin: np.ndarray | None = None
    """(C,H,W,3) uint8: the twin rendered into the same cameras at that frame."""
    _views: TwinViews | None = field(default=None, init=False, repr=False)
    _arm_bodies: np.ndarray | None = field(default=None, init=False, repr=False)
    _tip: int = field(default=-1, init=False, repr=False)

    def on_frame(self, frame: FrameInfo) -> None:
        env, report = frame.env, frame.report
        assert isinstance(env, Env) and env.world is not None and env.world.oracle is not None and report is not None
        rec, p = self.recording, self.prefix
        rec.set_time("time", duration=float(frame.time))
        state = report.state
        truth = env.world.oracle.read()  # evaluation only: the recording shows the truth beside the twin
        if self._arm_bodies is None:
            self._static(env)
        for k, obj in enumerate(self.scene.objects):
            rec.log(f"{p}/world/twin/{obj.name}", _pose(state.object_pos[k], state.object_quat[k]))
            rec.log(f"{p}/world/truth/{obj.name}", _pose(truth.object_pos[k], truth.object_quat[k]))
        pos_err, yaw_err = pose_errors(state.object_pos[0], state.object_quat[0], truth.object_pos[0],
                                         truth.object_quat[0])  # fmt: skip
        data = env.runtime.twin.data
        arm = data.xpos[self._arm_bodies]
        if self._tip >= 0:
            arm = np.vstack([arm, data.site_xpos[self._tip]])
        rec.log(f"{p}/world/twin/arm", rr.LineStrips3D([arm], radii=0.012, colors=[(200, 200, 210)]))
        rec.log(f"{p}/error/position_mm", rr.Scalars(1e3 * pos_err))
        rec.log(f"{p}/error/yaw_deg", rr.Scalars(float(np.degrees(yaw_err))))
        correction = report.correction
        if correction is not None:
            rec.log(f"{p}/correction/force_N", rr.Scalars(float(np.linalg.norm(correction.wrenches[:, :3]))))
            rec.log(f"{p}/correction/loss", rr.Scalars(correction.loss_after))
        rec.log(f"{p}/desync", rr.Scalars(float(report.desynced)))
        if (frame.frame - 1) % self.image_every == 0:
            self._images(env, float(frame.time))

    def _static(self, env: Env) -> None:
        """Objects' sphere geometry (logged once, moved by the per-frame transforms) and the arm's bodies."""
        model = env.runtime.twin.model
        joints = [model.actuator_trnid[a, 0] for a in env.runtime.twin.layout.actuators]
        links = [int(model.jnt_bodyid[j]) for j in joints]
        self._arm_bodies = np.array([int(model.body_parentid[links[0]]), *links])  # from the arm's base
        self._tip = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, panda.TIP_SITE)  # -1 without a pusher
        for obj in self.scene.objects:
            centers, radii = np.asarray(obj.spheres.centers), np.asarray(obj.spheres.radii)
            color = tuple(int(255 * c) for c in obj.color)
            twin = rr.Points3D(centers, radii=radii, colors=[color])
            self.recording.log(f"{self.prefix}/world/twin/{obj.name}/shape", twin, static=True)
            self.recording.log(
                f"{self.prefix}/world/truth/{obj.name}/shape",
                rr.Points3D(centers, radii=radii, colors=[TRUTH_COLOR]),
                static=True,
            )

    def _images(self, env: Env, t: float) -> None:
        """Real camera images and the twin rendered into the same cameras (told calibration)."""
        world, runtime = env.world, env.runtime
        assert world is not None
        if self._views is None:
            correction = runtime.correction
            if correction is not None:  # its colours are fitted to the real cameras
                self._views = correction.views
            else:
                size = (world.cameras[0].width, world.cameras[0].height)
                cams = [c.resized(*size) for c in self.scene.cameras]
                self._views = TwinViews(self.scene, runtime.twin.model, cameras=cams)
        try:
            real = np.stack([cam.read().image for cam in world.cameras])
        except CameraStalledError as err:  # the recording skips this frame's images
            log.warning("recording: no camera images at t=%.2f s (%s)", t, err)
            return
        twin = np.stack([to_uint8(img) for img in self._views.render(runtime.twin.data)[0].numpy()])
        self.last_real, self.last_twin = real, twin
        for c, cam in enumerate(self.scene.cameras):
            base = f"{self.prefix}/cameras/{cam.name}"
            self.recording.log(f"{base}/real", rr.Image(real[c]).compress(jpeg_quality=85))
            self.recording.log(f"{base}/twin", rr.Image(twin[c]).compress(jpeg_quality=85))


class Recording:
    """A rerun recording streamed to an `.rrd` file; `run(prefix)` gives an observer for one run."""

    def __init__(self, path: str | Path, scene: SceneSpec, image_every: int = 15) -> None:
        """`image_every`: log camera images every this many frames (15: 4 Hz)."""
        if image_every < 1:
            raise ValueError(f"image_every: must be ≥ 1, got {image_every}")
        self.path, self.scene, self.image_every = Path(path), scene, image_every
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.recording = rr.RecordingStream("realissim")
        self.recording.save(self.path)

    def run(self, prefix: str) -> RunRecorder:
        return RunRecorder(self.recording, self.scene, prefix, self.image_every)

    def close(self) -> None:
        """Flush and finish the file."""
        self.recording.flush()
        self.recording.disconnect()


def _pose(pos: np.ndarray, quat_wxyz: np.ndarray) -> rr.Transform3D:
    w, x, y, z = (float(v) for v in quat_wxyz)
    return rr.Transform3D(translation=[float(v) for v in pos], quaternion=rr.Quaternion(xyzw=[x, y, z, w]))
