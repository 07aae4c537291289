"""`TeleopServer`: browser teleoperation of the twin (viser), recording demonstrations into an episode store.

The operator drives the SIMULATED arm: dragging the target gizmo on the table plane sets the pusher
tip's target, and a `TeleopPolicy` (rate-limited tip, planar IK with the rod vertical) turns it into the
twin arm's desired joints every frame. Online, the real arm (the surrogate) follows the twin arm and
the cameras correct the twin's objects, as in every other Real-is-Sim episode; offline the twin is the
world. What is recorded is the twin's state at the frame rate (the store's source "teleop").

The page shows the twin as meshes (3D, updated at `scene_hz`), its Gaussian render from one scene
camera and, online, the real camera frames (at `image_hz`), the desync detector's verdict and the
twin-vs-oracle error (evaluation only). Start, Save and Discard record episodes, each from the task's
start sampler. The page binds to loopback unless `host` says otherwise.

Threads: the control thread (`TeleopSession`) owns the environment; two display threads read its
snapshots; viser's callbacks only queue requests for the control thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any

import numpy as np
import viser

from realissim.data.recorder import meta_for_env
from realissim.data.store import DatasetWriter, EpisodeInfo
from realissim.envs.env import Env, EnvConfig
from realissim.real.interfaces import RealWorld
from realissim.spec.scene import CameraSpec
from realissim.tasks import Task, make
from realissim.teleop.config import TeleopConfig
from realissim.teleop.panel import Panel
from realissim.teleop.policy import TeleopPolicy
from realissim.teleop.scene import TwinScene, clamp_to_table
from realissim.teleop.session import Snapshot, TeleopSession
from realissim.twin.kinematics import PusherIK
from realissim.views.virtual import VirtualCameras, body_poses

log = logging.getLogger(__name__)

SOURCE = "teleop"
"""The store's `source` of teleoperated episodes."""
REQUEST_TIMEOUT = 120.0
"""s a button waits for the control thread (a reset online re-calibrates on the first episode)."""


class _Ticker:
    """Calls `fn` every 1/`rate` s in a daemon thread until stopped; failures are logged, not fatal."""

    def __init__(self, name: str, rate: float, fn: Callable[[], None]) -> None:
        self.period, self.fn = 1.0 / rate, fn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.fn()
            except Exception:  # a display failure must not stop teleoperation
                self._failures += 1
                log.log(logging.ERROR if self._failures == 1 else logging.DEBUG, "%s failed (%d times)",
                        self._thread.name, self._failures, exc_info=True)  # fmt: skip


def gap_name(config: TeleopConfig) -> str | None:
    """The store's name of the session's gap profile: None offline, "default", or the profile file's stem."""
    if not config.online:
        return None
    return "default" if config.gap is None else config.gap.stem


class TeleopServer:
    """A teleoperation session served to browsers: `start()`, then open `url`; `stop()` (or use `with`)."""

    def __init__(self, config: TeleopConfig) -> None:
        self.config = config
        self.task: Task[Any] = make(config.task)
        self.world: RealWorld | None = None
        self.env: Env | None = None
        self.writer: DatasetWriter | None = None
        self.session: TeleopSession | None = None
        self.viser: viser.ViserServer | None = None
        self.scene: TwinScene | None = None
        self.panel: Panel | None = None
        self._cameras: VirtualCameras | None = None
        self._rendered_qpos: np.ndarray | None = None
        self._stack = contextlib.ExitStack()

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> TeleopServer:
        """Start the world (online), the environment, the store, the control thread and the web page."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        log.info("teleoperation (%s, %s) at %s", self.config.task, "online" if self.world else "offline", self.url)
        return self

    def _start(self) -> None:
        config, task = self.config, self.task
        if config.online:
            from realissim.real.surrogate import Surrogate, SurrogateConfig

            surrogate = SurrogateConfig(
                gap=config.gap, seed=config.seed, mode="realtime", camera_size=config.image_size
            )
            self.world = self._stack.enter_context(Surrogate(task.scene, surrogate))
        self.env = Env(task, EnvConfig(sleep=False), self.world)  # as collected: the twin as it runs online
        meta = meta_for_env(self.env, SOURCE, gap_name(config), config.record_images)
        self.writer = self._stack.enter_context(DatasetWriter(config.out, meta))
        policy = TeleopPolicy(PusherIK(task.scene), config.chunk_frames * self.env.dt, config.tip_speed)
        self.session = TeleopSession(config, task, self.env, policy, self.writer)
        self.session.start()
        self._stack.callback(self.session.stop)
        self._serve(self._view_camera())

    def _view_camera(self) -> CameraSpec:
        cameras = {c.name: c for c in self.task.scene.cameras}
        if not cameras:
            raise ValueError(f"task {self.config.task!r}: its scene has no camera to render the twin from")
        name = self.config.view_camera or next(iter(cameras))
        if name not in cameras:
            raise ValueError(f"view_camera: unknown camera {name!r}; the scene has {list(cameras)}")
        return cameras[name]

    def _serve(self, camera: CameraSpec) -> None:
        config, env = self.config, self.env
        assert env is not None
        model = env.runtime.twin.model
        self._cameras = VirtualCameras(self.task.scene, model, [camera.name], config.image_size)
        self.viser = viser.ViserServer(host=config.host, port=config.port, label="realissim teleop", verbose=False)
        self._stack.callback(self.viser.stop)
        self.scene = TwinScene(self.viser, self.task.scene, model, camera)
        real = [c.name for c in self.world.cameras] if self.world is not None else []
        self.panel = Panel(self.viser, camera.name, real, config.image_size, [o.name for o in self.task.scene.objects])
        self.scene.on_drag(self._drag)
        self.panel.start.on_click(lambda event: self._button(event, "Start", self.start_episode, recording=True))
        self.panel.save.on_click(lambda event: self._button(event, "Save", self.save_episode, recording=False))
        self.panel.discard.on_click(lambda event: self._button(event, "Discard", self.discard_episode, recording=False))
        self._place_target_over_tip(self._wait_snapshot())
        tickers = [
            _Ticker("teleop-scene", config.scene_hz, self._show_scene),
            _Ticker("teleop-images", config.image_hz, self._show_images),
        ]
        for ticker in tickers:
            ticker.start()
            self._stack.callback(ticker.stop)

    def stop(self) -> None:
        """Stop everything started (an episode being recorded is dropped); idempotent."""
        self._stack.close()

    def __enter__(self) -> TeleopServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what tests and callers use ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The page's address, http://host:port/."""
        assert self.viser is not None, "start() the server first"
        return f"http://{self.viser.get_host()}:{self.viser.get_port()}/"

    @property
    def frames(self) -> int:
        """Frames the environment has run."""
        return 0 if self.session is None else self.session.frames

    @property
    def saved(self) -> int:
        """Episodes saved by this server."""
        return 0 if self.session is None else self.session.saved

    def snapshot(self) -> Snapshot:
        """The latest state (twin tip, target, recording, ...)."""
        assert self.session is not None, "start() the server first"
        return self._wait_snapshot()

    def set_target(self, point: np.ndarray | tuple[float, float, float]) -> np.ndarray:
        """Set the tip target as a drag would (onto the push plane, inside the table); returns the accepted
        target (3,) m and moves the gizmo there."""
        accepted = self._drag(np.asarray(point, dtype=np.float64))
        if self.scene is not None:
            self.scene.place_target(accepted)
        return accepted

    def start_episode(self) -> Future[Any]:
        """Reset to the next sampled start and record (the Start button)."""
        assert self.session is not None, "start() the server first"
        return self.session.start_episode()

    def save_episode(self) -> Future[EpisodeInfo]:
        """Write the recorded episode to the store (the Save button)."""
        assert self.session is not None, "start() the server first"
        return self.session.save_episode()

    def discard_episode(self) -> Future[None]:
        """Drop the recorded episode (the Discard button)."""
        assert self.session is not None, "start() the server first"
        return self.session.discard_episode()

    # -- callbacks and display ---------------------------------------------------------------------------

    def _drag(self, point: np.ndarray) -> np.ndarray:
        """The operator's target from a gizmo position (3,) m: on the push plane, inside the table (the rod
        inside its edge)."""
        assert self.session is not None
        radius = 0.0 if self.task.scene.robot.pusher is None else self.task.scene.robot.pusher.radius
        accepted = clamp_to_table(point, self.task.scene, self.config.push_height, radius)
        self.session.set_target(accepted)
        return accepted

    def _button(
        self, event: viser.GuiEvent[Any], label: str, request: Callable[[], Future[Any]], recording: bool
    ) -> None:
        """Run a button's request on the control thread, then show `recording` (whether an episode is being
        recorded after it) and tell the operator the outcome."""
        try:
            result = request().result(REQUEST_TIMEOUT)
        except Exception as err:  # shown to the operator
            self._notify(event, f"{label} failed", str(err), "red")
            return
        assert self.panel is not None
        self.panel.show_recording(recording)
        if recording:
            self._place_target_over_tip(self._wait_snapshot())
            self._notify(event, "Recording", f"from the task's start of seed {result}")
        elif isinstance(result, EpisodeInfo):
            self._notify(event, "Saved", f"episode {result.index}: {result.length} frames, success {result.success}")

    def _notify(self, event: viser.GuiEvent[Any], title: str, body: str, color: str | None = None) -> None:
        log.info("%s: %s", title, body)
        if event.client is not None:
            event.client.add_notification(title, body, auto_close_seconds=5.0, color=color)  # type: ignore[arg-type]

    def _place_target_over_tip(self, snapshot: Snapshot) -> None:
        assert self.scene is not None
        self.scene.place_target(clamp_to_table(snapshot.tip, self.task.scene, self.config.push_height, 0.0))

    def _wait_snapshot(self, timeout: float = 30.0) -> Snapshot:
        """The latest snapshot, waiting for the first frame if needed."""
        assert self.session is not None
        deadline = time.monotonic() + timeout
        while (snapshot := self.session.snapshot()) is None:
            if self.session.error is not None or time.monotonic() > deadline:
                raise RuntimeError("the control thread produced no frame") from self.session.error
            time.sleep(0.01)
        return snapshot

    def _show_scene(self) -> None:
        assert self.scene is not None
        self.scene.show_twin(self._wait_snapshot().qpos)

    def _show_images(self) -> None:
        """The text, and the images when there is something new: the twin moved, or real frames came."""
        assert self._cameras is not None and self.panel is not None and self.env is not None
        snapshot = self._wait_snapshot()
        self.panel.show_state(snapshot, self.env.dt)
        rendered = self._rendered_qpos
        if snapshot.real_images is None and rendered is not None and np.allclose(rendered, snapshot.qpos, atol=1e-6):
            return  # rendering costs ~0.1 s of CPU that the control thread and the browser may need
        xpos, xquat = body_poses(self.env.runtime.twin.model, snapshot.qpos[None])
        twin = next(iter(self._cameras.render(xpos[0], xquat[0]).values()))
        self.panel.show_images(twin, snapshot.real_images)
        self._rendered_qpos = snapshot.qpos


def run_teleop(config: TeleopConfig) -> int:
    """Serve teleoperation until Ctrl-C; 0 on a clean stop, 1 if the control thread failed."""
    with TeleopServer(config) as server:
        log.info("open %s in a browser (Ctrl-C stops)", server.url)
        try:
            while server.session is not None and server.session.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            log.info("stopping")
        failed = server.session is not None and server.session.error is not None
    return 1 if failed else 0
