"""Browser teleoperation: the tip follows the operator's target at a bounded speed; Start / Save / Discard record
episodes into the store; and, in a real headless Chromium, a mouse drag of the target gizmo moves the twin's
pusher and Save writes the episode.

The browser test needs Debian's `chromium` and `chromium-driver` (`scripts/install-browser`); it is skipped
without them. WebGL runs on SwiftShader (software), so no GPU or display is needed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from realissim.data.store import Dataset
from realissim.policy.base import Observation
from realissim.spec.scene import SceneSpec
from realissim.tasks import make
from realissim.teleop import TeleopConfig, TeleopPolicy, TeleopServer
from realissim.teleop.scene import GIZMO_SCALE
from realissim.twin.kinematics import PusherIK

T = TypeVar("T")

DT = 1.0 / 60.0
SPEED = 0.25
PUSH_HEIGHT = 0.015


def _wait(probe: Callable[[], T | None], what: str, timeout: float = 10.0) -> T:
    """Poll `probe` until it returns something other than None or False; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while (value := probe()) is None or value is False:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)
    return value


def _observation(q: np.ndarray, scene: SceneSpec) -> Observation:
    k = len(scene.objects)
    return Observation(np.float64(0.0), q, np.zeros_like(q), q, np.zeros((k, 3)), np.tile([1.0, 0, 0, 0], (k, 1)))


def test_the_commanded_tip_moves_at_most_speed_times_dt_per_frame_and_reaches_the_target(scene: SceneSpec) -> None:
    ik = PusherIK(scene)
    policy = TeleopPolicy(ik, DT, SPEED)
    home = np.asarray(scene.robot.home, dtype=np.float64)
    policy.reset()
    held = policy.act(_observation(home, scene))
    np.testing.assert_allclose(held.q_des[0], home, err_msg="without a target the arm holds its joints")
    assert held.horizon == DT and held.waypoints == 1 and held.progress[0] == 0.0
    target = ik.tip_position(home) + np.array([0.12, 0.08, 0.0])
    target[2] = PUSH_HEIGHT
    policy.target = target
    tips = [ik.tip_position(home)]
    for _ in range(90):
        chunk = policy.act(_observation(home, scene))
        tips.append(policy.commanded_tip)
        tip_of_q = ik.tip_position(chunk.q_des[0])
        assert np.linalg.norm(tip_of_q - tips[-1]) < 1e-3, "the chunk's joints put the tip where commanded"
    steps = np.linalg.norm(np.diff(tips, axis=0), axis=1)
    assert steps.max() <= SPEED * DT + 1e-12
    assert steps[0] == pytest.approx(SPEED * DT), "a distant target is approached at full speed"
    np.testing.assert_allclose(tips[-1], target, atol=1e-9, err_msg="reached within 90 frames (0.16 m at 0.25 m/s)")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TeleopServer]:
    config = TeleopConfig(out=tmp_path / "demos", port=0, tip_speed=SPEED, push_height=PUSH_HEIGHT, seed=7)
    with TeleopServer(config) as running:
        yield running


def _follow(server: TeleopServer, target: np.ndarray, tolerance: float = 2e-3, timeout: float = 5.0) -> np.ndarray:
    """Wait until the twin's tip is within `tolerance` m of `target`; its position."""

    def tip() -> np.ndarray | None:
        s = server.snapshot()
        return s.tip if np.linalg.norm(s.tip - target) < tolerance else None

    return _wait(tip, f"the tip to reach {target.round(3).tolist()}", timeout)


def test_offline_the_twin_follows_the_target_and_start_save_discard_record_into_the_store(
    server: TeleopServer,
) -> None:
    frames = server.frames
    _wait(lambda: server.frames > frames + 10, "frames to run")
    with pytest.raises(RuntimeError, match="no episode"):
        server.save_episode().result(10)
    off_table = server.set_target((5.0, -5.0, 0.0))
    half = np.asarray(server.task.scene.ground.size) - 0.01  # less the rod's radius
    np.testing.assert_allclose(off_table, [half[0], -half[1], PUSH_HEIGHT], err_msg="clamped onto the table")
    seed = server.start_episode().result(10)
    assert seed == 7 and server.snapshot().recording
    assert server.snapshot().target is None, "Start forgets the target: the arm holds until the operator drags"
    with pytest.raises(RuntimeError, match="Save or Discard"):
        server.start_episode().result(10)
    start_tip = server.snapshot().tip
    accepted = server.set_target(start_tip + np.array([0.10, 0.06, 0.30]))
    assert accepted[2] == PUSH_HEIGHT, "the target is held at the push height"
    np.testing.assert_allclose(accepted[:2], start_tip[:2] + np.array([0.10, 0.06]))
    tip = _follow(server, accepted)
    assert abs(tip[2] - PUSH_HEIGHT) < 2e-3
    recorded = server.snapshot().episode_frames
    info = server.save_episode().result(10)
    assert info.length >= recorded > 30 and info.seed == 7 and server.saved == 1
    assert not server.snapshot().recording
    server.start_episode().result(10)
    _wait(lambda: server.snapshot().episode_frames > 5, "frames of the second episode")
    server.discard_episode().result(10)
    assert server.saved == 1
    ds = Dataset(server.config.out, include_failed=True)
    assert ds.meta.source == "teleop" and not ds.meta.online and ds.meta.fps == pytest.approx(60.0)
    assert [e.index for e in ds.episodes] == [0], "one saved episode; the discarded one is not in the store"
    episode = ds.episode(0)
    expected_start = make("pusht").sample_start(np.random.default_rng(7))
    np.testing.assert_allclose(episode.object_pos[0], expected_start.object_pos, atol=2e-3)
    assert np.linalg.norm(episode.tip[-1] - accepted) < 3e-3, "the recorded tip ends at the target"
    np.testing.assert_allclose(np.diff(episode.time), DT, rtol=1e-6, err_msg="every frame at 60 Hz")


# -- the real browser -----------------------------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
BROWSER_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--window-size=800,600",
)
"""Headless Chromium with WebGL on SwiftShader (CPU), which three.js needs to build the scene."""
SLIDER_OFFSET = GIZMO_SCALE / 7 * 1.7
"""Where viser's gizmo (drei's PivotControls, unscaled) puts the centre of its xy-plane square: at (o, o, 0) in the
gizmo's frame (drei src/web/pivotControls/PlaneSlider.tsx: position pos1·1.7 with pos1 = scale / 7)."""


CANVAS_RECT = """
const c = Array.from(document.querySelectorAll("canvas")).sort((a, b) => b.width * b.height - a.width * a.height)[0];
if (!c || !c.width) return null;
if (!(c.getContext("webgl2") || c.getContext("webgl"))) return "no WebGL";
const r = c.getBoundingClientRect();
return {left: r.left, top: r.top, width: r.width, height: r.height};
"""
"""JavaScript: the page rectangle (CSS px) of the largest drawn canvas (three.js's WebGL one), or null before it is
drawn."""


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (run scripts/install-browser)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _to_page(camera: Any, rect: dict[str, float], point: np.ndarray) -> tuple[int, int]:
    """Page pixel (x, y) of world `point` (3,) m seen by the browser's camera (viser's CameraHandle: pose in
    OpenCV axes, vertical field of view) on a canvas at `rect` (CSS px)."""
    from viser.transforms import SO3

    R_WC = SO3(np.asarray(camera.wxyz)).as_matrix()
    p = R_WC.T @ (np.asarray(point) - np.asarray(camera.position))
    f = 0.5 * rect["height"] / np.tan(0.5 * camera.fov)
    u = rect["left"] + 0.5 * rect["width"] + f * p[0] / p[2]
    v = rect["top"] + 0.5 * rect["height"] + f * p[1] / p[2]
    return round(u), round(v)


def _drag(driver: Any, start: tuple[int, int], end: tuple[int, int], steps: int = 12) -> None:
    """A real left-button mouse drag (pointer down, moves, up) between two page pixels."""
    from selenium.webdriver.common.actions import interaction
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.pointer_input import PointerInput

    actions = ActionBuilder(driver, mouse=PointerInput(interaction.POINTER_MOUSE, "mouse"), duration=40)
    actions.pointer_action.move_to_location(*start).pointer_down()
    for k in range(1, steps + 1):
        x = start[0] + (end[0] - start[0]) * k / steps
        y = start[1] + (end[1] - start[1]) * k / steps
        actions.pointer_action.move_to_location(round(x), round(y))
    actions.pointer_action.pointer_up()
    actions.perform()


def _labelled(driver: Any, text: str) -> bool:
    from selenium.webdriver.common.by import By

    return bool(driver.find_elements(By.XPATH, f"//*[contains(text(), '{text}')]"))


def _button(driver: Any, label: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.XPATH, f"//button[normalize-space(.)='{label}']")


@pytest.mark.slow
def test_in_chromium_dragging_the_target_moves_the_twins_pusher_and_save_stores_the_episode(
    browser: Any, server: TeleopServer
) -> None:
    assert server.viser is not None and server.scene is not None
    browser.get(server.url)
    client = _wait(lambda: next(iter(server.viser.get_clients().values()), None), "the page to connect", 30)
    _wait(lambda: client.camera.update_timestamp > 0, "the page to report its camera", 30)
    canvas = _wait(lambda: browser.execute_script(CANVAS_RECT), "the 3D canvas")
    assert canvas != "no WebGL", "three.js needs WebGL: check the SwiftShader flags"
    # The GUI panel (with the twin's render) may be laid out after the 3D canvas is drawn: wait for it.
    _wait(lambda: _labelled(browser, "twin (Gaussian render)"), "the page to show the twin's Gaussian render", 30)

    _button(browser, "Start").click()
    _wait(lambda: server.snapshot().recording, "Start to begin an episode")
    _wait(lambda: _button(browser, "Save").is_enabled(), "the page to enable Save")
    before = server.snapshot()
    gizmo = np.asarray(server.scene.gizmo.position, dtype=np.float64)
    np.testing.assert_allclose(gizmo[:2], before.tip[:2], atol=1e-6, err_msg="Start puts the gizmo over the tip")
    assert before.target is None, "no target before the drag: the arm holds"

    move = np.array([0.09, 0.07, 0.0])
    grab = gizmo + np.array([SLIDER_OFFSET, SLIDER_OFFSET, 0.0])
    eye = client.camera.position.copy()
    _drag(browser, _to_page(client.camera, canvas, grab), _to_page(client.camera, canvas, grab + move))
    np.testing.assert_allclose(client.camera.position, eye, atol=1e-6, err_msg="the drag orbited the camera instead")

    _wait(lambda: (t := server.snapshot().target) is not None and np.linalg.norm(t - gizmo) > 0.05,
          "the drag to set the target")  # fmt: skip
    time.sleep(0.3)  # the last (throttled) drag message
    target = server.snapshot().target
    assert target is not None
    np.testing.assert_allclose(target, gizmo + move, atol=4e-3, err_msg="the target lands where the mouse went")
    toward = (target - before.tip) / np.linalg.norm(target - before.tip)
    _wait(lambda: float(np.dot(server.snapshot().tip - before.tip, toward)) > 0.01,
          "the twin's pusher tip to move 1 cm towards the target", 5)  # fmt: skip
    assert np.linalg.norm(server.snapshot().tip - target) < np.linalg.norm(before.tip - target) - 0.01

    _button(browser, "Save").click()
    _wait(lambda: server.saved == 1, "Save to write the episode")
    episodes = Dataset(server.config.out, include_failed=True).episodes
    assert len(episodes) == 1 and episodes[0].length > 30 and episodes[0].seed == 7
    recorded = Dataset(server.config.out, include_failed=True).episode(0)
    assert np.dot(recorded.tip[-1] - recorded.tip[0], toward) > 0.01, "the stored tip moved towards the target"
