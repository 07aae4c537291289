"""Camera calibration from the dot board: its description, the surrogate drawing it (in process and across the
process boundary), the fit against the surrogate's true cameras, and the runtime calibrating from it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import numpy as np
import pytest

from realissim.estimate.board_calibration import BoardCalibrationConfig, calibrate_from_board, fit_camera_to_board
from realissim.eval.sync.sweep import SWEEP_SEED, sweep_profile
from realissim.geometry import project_points
from realissim.real.surrogate import Surrogate, SurrogateConfig
from realissim.real.surrogate.gap import GapProfile
from realissim.real.surrogate.world import SurrogateWorld
from realissim.runtime import Runtime, RuntimeConfig
from realissim.spec.board import DotBoard
from realissim.spec.errors import SpecError
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.tasks.pusht import PushTTask
from realissim.twin.physics import TwinPhysics
from realissim.twin.state import rest_state
from realissim.views.cameras import TwinViews

SMALL = (160, 90)


def start(scene: SceneSpec) -> StartState:
    """The T part-way over the board, turned 45°; the arm at home."""
    pos, quat = np.array([[0.17, 0.05, 0.0175]]), np.array([[0.92, 0.0, 0.0, 0.39]])
    return StartState.from_arrays(pos, quat, np.asarray(scene.robot.home))


def workspace_points() -> np.ndarray:
    """A grid over PushT's workspace, at the table and at the T's top, world frame, m."""
    g = np.linspace(-0.25, 0.25, 9)
    gx, gy = np.meshgrid(g, g)
    return np.concatenate([np.column_stack([gx.ravel(), gy.ravel(), np.full(gx.size, z)]) for z in (0.0, 0.035)])


def reprojection_px(K: np.ndarray, X: np.ndarray, K_true: np.ndarray, X_true: np.ndarray) -> float:
    """Mean pixel distance between the workspace's projections through a camera and through the true one."""
    uv, _ = project_points(workspace_points(), K, X)
    uv_true, _ = project_points(workspace_points(), K_true, X_true)
    return float(np.linalg.norm(uv - uv_true, axis=1).mean())


def test_board_geometry_and_validation() -> None:
    board = DotBoard()
    dots = board.dots_world()
    assert dots.shape == (board.rows * board.cols, 3)
    assert dots[:, :2].mean(axis=0) == pytest.approx(board.center, abs=1e-12)
    assert np.all(dots[:, 2] == board.thickness)
    assert np.linalg.norm(dots[1] - dots[0]) == pytest.approx(board.spacing)  # neighbours along a row
    turned = board.placed((0.01, -0.02, math.pi / 2))
    assert turned.center == pytest.approx((board.center[0] + 0.01, board.center[1] - 0.02))
    # A quarter turn maps the board's x axis onto world y: row neighbours now differ in y only.
    step = turned.dots_world()[board.cols] - turned.dots_world()[0]
    assert step[:2] == pytest.approx((0.0, board.spacing), abs=1e-12)
    with pytest.raises(SpecError, match="radius"):
        DotBoard(radius=0.05, spacing=0.08)  # the dots would overlap
    with pytest.raises(SpecError, match="rows"):
        DotBoard(rows=1)
    with pytest.raises(SpecError, match="spacing"):
        DotBoard(spacing=math.nan)


@pytest.fixture(scope="module")
def world(scene: SceneSpec) -> Iterator[SurrogateWorld]:
    """The surrogate world in this process, default gap (with its camera and board placement errors)."""
    with SurrogateWorld(scene, GapProfile(), camera_size=SMALL) as w:
        w.reset(start(scene))
        yield w


def test_the_surrogate_draws_the_board_only_while_shown(world: SurrogateWorld, scene: SceneSpec) -> None:
    plain = np.stack([f.image for f in world.render_cameras()])
    world.show_board(True)
    shown = np.stack([f.image for f in world.render_cameras()])
    world.show_board(False)
    again = np.stack([f.image for f in world.render_cameras()])
    np.testing.assert_array_equal(again, plain)
    for c, cam in enumerate(world.true_cameras):
        uv, _ = project_points(DotBoard().dots_world(), cam.K_array, cam.X_WC_array)
        changed = np.abs(shown[c].astype(int) - plain[c].astype(int)).sum(axis=-1) > 60
        # The board covers hundreds of px, and every dot centre lies inside the changed region's bounding box.
        ys, xs = np.nonzero(changed)
        assert changed.sum() > 300, cam.name
        assert xs.min() <= uv[:, 0].min() and uv[:, 0].max() <= xs.max() + 1, cam.name
        assert ys.min() <= uv[:, 1].min() and uv[:, 1].max() <= ys.max() + 1, cam.name
    bare = SurrogateWorld(scene, GapProfile(), camera_size=SMALL, board=None)
    with bare, pytest.raises(RuntimeError, match="board"):
        bare.show_board(True)


def test_the_board_fit_finds_the_true_cameras_within_a_fraction_of_a_pixel(
    world: SurrogateWorld, scene: SceneSpec
) -> None:
    """The default gap's calibration errors put the told cameras ~1 px from the true ones over the workspace; the
    board (itself placed ~1 mm and 0.15° off) brings every camera within 0.35 px."""
    world.show_board(True)
    images = np.stack([f.image for f in world.render_cameras()])
    world.show_board(False)
    twin = TwinPhysics(scene)
    twin.reset(rest_state(start(scene)))
    views = TwinViews(scene, twin.model, cameras=world.told_cameras)
    fits = calibrate_from_board(views, DotBoard(), twin.data.xpos, twin.data.xquat, images)
    Ks, Xs = views.Ks.double().numpy(), views.X_WCs.double().numpy()
    for c, (told, true) in enumerate(zip(world.told_cameras, world.true_cameras, strict=True)):
        assert fits[c].used, fits[c].reason
        before = reprojection_px(told.K_array, told.X_WC_array, true.K_array, true.X_WC_array)
        after = reprojection_px(Ks[c], Xs[c], true.K_array, true.X_WC_array)
        assert before > 0.8 and after < 0.35, (told.name, before, after)


def test_a_camera_told_two_pixels_off_is_found_by_the_shift_search(scene: SceneSpec) -> None:
    """Sweep profile 03's front camera is told ~1.8 px (21 mm on the table) from the true one: from the contact
    scenario's first start, the fit from the told camera alone falls into the dots' gaps (white and black swapped)
    and is refused; the shift search before it starts the fit in the right basin."""
    first = PushTTask().sample_start(np.random.default_rng(0))
    with SurrogateWorld(scene, sweep_profile(SWEEP_SEED, 3), camera_size=SMALL) as w:
        w.reset(first)
        w.show_board(True)
        images = np.stack([f.image for f in w.render_cameras()])
        told, true = w.told_cameras, w.true_cameras
    assert told[0].name == "front"
    assert reprojection_px(told[0].K_array, told[0].X_WC_array, true[0].K_array, true[0].X_WC_array) > 1.5
    twin = TwinPhysics(scene)
    twin.reset(rest_state(first))
    for shift in (0.0, BoardCalibrationConfig().shift_search):
        views = TwinViews(scene, twin.model, cameras=told)
        config = BoardCalibrationConfig(shift_search=shift)
        fits = calibrate_from_board(views, DotBoard(), twin.data.xpos, twin.data.xquat, images, config)
        Ks, Xs = views.Ks.double().numpy(), views.X_WCs.double().numpy()
        errors = [reprojection_px(Ks[c], Xs[c], t.K_array, t.X_WC_array) for c, t in enumerate(true)]
        if shift == 0.0:
            assert not fits[0].used and "white − black" in fits[0].reason
        else:
            assert all(f.used for f in fits), [f.reason for f in fits]
            assert max(errors) < 0.35, errors


def test_a_camera_that_does_not_see_the_board_keeps_its_calibration(world: SurrogateWorld) -> None:
    told = world.told_cameras[0]
    no_board = world.render_cameras()[0].image  # the board is not on the table
    fit = fit_camera_to_board(DotBoard(), told.K_array, told.X_WC_array, no_board)
    assert not fit.used and "white − black" in fit.reason and not fit.correction.any()
    away = told.X_WC_array.copy()
    away[:3, :3] = away[:3, :3] @ np.diag([1.0, -1.0, -1.0])  # turned to look up, away from the table
    fit = fit_camera_to_board(DotBoard(), told.K_array, away, no_board)
    assert not fit.used and "0 whole dots" in fit.reason
    # Told 3° (up to 17 mm at its corners) from how it lies: no camera takes the board's word (the correction it
    # would take is far beyond a calibration error). A board off by a whole dot spacing cannot be told apart (the
    # grid repeats): the board must be laid to within a centimetre or so (docs/decisions.md).
    moved = DotBoard().placed((0.0, 0.0, 0.05))
    world.show_board(True)
    shown = [f.image for f in world.render_cameras()]
    world.show_board(False)
    for c, cam in enumerate(world.told_cameras):
        assert not fit_camera_to_board(moved, cam.K_array, cam.X_WC_array, shown[c]).used, cam.name


@pytest.mark.slow
def test_the_runtime_calibrates_from_the_board_across_the_process_boundary(scene: SceneSpec) -> None:
    """`Runtime.calibrate` lays the surrogate's board on the table, fits the cameras to it, takes it away and fits
    the colours to the board-free images; the twin's cameras end within 0.35 px of the true ones."""
    gap = GapProfile()
    with SurrogateWorld(scene, gap, camera_size=SMALL, render=False) as reference:
        true = reference.true_cameras
    with Surrogate(scene, SurrogateConfig(camera_size=SMALL)) as real:
        runtime = Runtime(scene, RuntimeConfig(), real)
        runtime.reset(start(scene))
        before = np.stack([cam.read().image for cam in real.cameras])
        runtime.calibrate()
        after = np.stack([cam.read().image for cam in real.cameras])
        assert runtime.correction is not None
        assert [fit.name for fit in runtime.board_fits] == [cam.name for cam in real.cameras]
        assert all(fit.used and fit.dots >= 6 for fit in runtime.board_fits), runtime.board_fits
        views = runtime.correction.views
        Ks, Xs = views.Ks.double().numpy(), views.X_WCs.double().numpy()
        for c, cam in enumerate(true):
            assert reprojection_px(Ks[c], Xs[c], cam.K_array, cam.X_WC_array) < 0.35, cam.name
    # The board was taken away again: the frame is the plain scene's (the same frame, drawn again without it).
    np.testing.assert_array_equal(after, before)
    no_board = dataclasses.replace(SurrogateConfig(camera_size=SMALL), board=None)
    with Surrogate(scene, no_board) as bare:
        assert bare.calibration_board is None
        with pytest.raises(RuntimeError, match="board"):
            bare.show_board(True)


@pytest.mark.slow
def test_a_shadow_across_the_board_does_not_leave_a_camera_uncalibrated(scene: SceneSpec) -> None:
    """A key light 40° up casts the arm's shadow across the board: the white level is no longer a plane over the
    image, and the left camera's fit, rejected for its residual, kept its told calibration (1.9 px off over the
    workspace). Fitted again to the image divided by its local white level, every camera is used and within
    0.35 px of the truth (0.07 px measured)."""
    base = sweep_profile(4242, 2)
    key = (math.cos(math.radians(20)) * math.cos(math.radians(40)), math.sin(math.radians(20)) * math.cos(
        math.radians(40)), -math.sin(math.radians(40)))  # fmt: skip
    lighting = dataclasses.replace(base.lighting, key_direction=key, key_color=(0.7, 0.68, 0.7), shadow_size=1024)
    first = PushTTask().sample_start(np.random.default_rng(0))
    with SurrogateWorld(scene, dataclasses.replace(base, lighting=lighting), camera_size=SMALL) as world:
        world.reset(first)
        world.show_board(True)
        images = np.stack([f.image for f in world.render_cameras()])
        told, true = list(world.told_cameras), list(world.true_cameras)
    twin = TwinPhysics(scene)
    twin.reset(rest_state(first))
    for local in (False, True):
        views = TwinViews(scene, twin.model, cameras=told)
        config = BoardCalibrationConfig(local_white=local)
        fits = calibrate_from_board(views, DotBoard(), twin.data.xpos, twin.data.xquat, images, config)
        Ks, Xs = views.Ks.double().numpy(), views.X_WCs.double().numpy()
        errors = [reprojection_px(Ks[c], Xs[c], t.K_array, t.X_WC_array) for c, t in enumerate(true)]
        if local:
            assert all(f.used for f in fits) and max(errors) < 0.35, ([f.reason for f in fits], errors)
        else:
            assert not fits[1].used and "residual RMS" in fits[1].reason and errors[1] > 1.0, (fits[1], errors)
