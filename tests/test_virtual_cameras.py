"""Virtual cameras for policies: the wrist camera's mount, what it sees, parity with TwinViews, batching."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from realissim.assets.appearance import ROD_COLOR
from realissim.assets.panda import FLANGE_SITE, Q_LOWER, Q_UPPER, TIP_SITE
from realissim.assets.pusht import T_NAME
from realissim.geometry import project_points
from realissim.render import rasterize
from realissim.spec.scene import SceneSpec
from realissim.twin.physics import PhysicsConfig, build_model
from realissim.util.images import to_uint8
from realissim.views.cameras import DEFAULT_BACKGROUND, TwinViews
from realissim.views.virtual import WRIST, VirtualCameras, body_poses


@pytest.fixture(scope="module")
def model(scene: SceneSpec) -> mujoco.MjModel:
    return build_model(scene, PhysicsConfig())


@pytest.fixture(scope="module")
def home(model: mujoco.MjModel) -> np.ndarray:
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    return data.qpos.copy()


@pytest.fixture(scope="module")
def cams(scene: SceneSpec, model: mujoco.MjModel) -> VirtualCameras:
    return VirtualCameras(scene, model, (WRIST, "front", "left"))


def _t_at(model: mujoco.MjModel, qpos: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """qpos with the T's centre moved to world xy (m)."""
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, T_NAME)
    adr = model.jnt_qposadr[model.body_jntadr[body]]
    out = qpos.copy()
    out[adr : adr + 2] = xy
    return out


def _random_configs(model: mujoco.MjModel, home: np.ndarray, n: int, seed: int) -> np.ndarray:
    """n qpos (n, nq): arm uniform within its joint limits, the T moved at random on the table."""
    rng = np.random.default_rng(seed)
    qpos = np.repeat(home[None], n, axis=0)
    qpos[:, :7] = rng.uniform(Q_LOWER, Q_UPPER, (n, 7))
    return np.stack([_t_at(model, q, rng.uniform(-0.2, 0.2, 2)) for q in qpos])


def _site_positions(model: mujoco.MjModel, qpos: np.ndarray, name: str) -> np.ndarray:
    """World position (B, 3) of a site, by MuJoCo's own forward kinematics."""
    site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, name)
    data, out = mujoco.MjData(model), []
    for q in qpos:
        data.qpos[:] = q
        mujoco.mj_forward(model, data)
        out.append(data.site_xpos[site].copy())
    return np.array(out)


def test_points_on_the_rod_stay_at_one_pixel_whatever_the_arm_pose(cams, model, home) -> None:
    qpos = np.concatenate([home[None], _random_configs(model, home, 6, seed=1)])
    xpos, xquat = body_poses(model, qpos)
    X_WC = cams.wrist.pose(xpos, xquat)
    tip = _site_positions(model, qpos, TIP_SITE)
    halfway = 0.5 * (tip + _site_positions(model, qpos, FLANGE_SITE))
    for name, points in (("tip", tip), ("halfway", halfway)):
        uv = np.array([project_points(p[None], cams.wrist.K, X)[0][0] for p, X in zip(points, X_WC)])
        np.testing.assert_allclose(uv, np.repeat(uv[:1], len(uv), axis=0), atol=1e-6, err_msg=name)
        assert 0 <= uv[0, 0] < cams.width and 0 <= uv[0, 1] < cams.height, f"{name} at {uv[0]} leaves the image"
    # The default mount aims at the rod's tip: it is the image centre.
    tip_uv = project_points(tip[:1], cams.wrist.K, X_WC[0])[0][0]
    np.testing.assert_allclose(tip_uv, [cams.width / 2, cams.height / 2], atol=1e-6)
    np.testing.assert_allclose(cams.wrist.pose(xpos[2], xquat[2]), X_WC[2])


def _red(image: np.ndarray) -> int:
    """Pixels with the T's red (0.85, 0.25, 0.2)."""
    r, g, b = (image[..., i].astype(int) for i in range(3))
    return int(np.sum((r > 150) & (g < 110) & (b < 110)))


def test_the_wrist_image_shows_the_rod_and_the_t_under_its_tip(cams, model, home) -> None:
    tip = _site_positions(model, home[None], TIP_SITE)[0]
    under = _t_at(model, home, tip[:2] + np.array([0.0, -0.03]))
    far = _t_at(model, home, np.array([0.2, 0.2]))
    xpos, xquat = body_poses(model, np.stack([under, far]))
    images = cams.render_batch(xpos, xquat)[WRIST]
    X_WC = cams.wrist.pose(xpos[1], xquat[1])
    flange = _site_positions(model, home[None], FLANGE_SITE)[0]
    u, v = project_points((0.5 * (tip + flange))[None], cams.wrist.K, X_WC)[0][0].astype(int)
    rod = images[1, v, u].astype(float)
    assert np.abs(rod - 255 * np.array(ROD_COLOR)).max() < 25, f"rod pixel ({u}, {v}) is {rod}"
    under_red, far_red = _red(images[0]), _red(images[1])
    assert far_red == 0, "the T is 40 cm away from the rod, out of the wrist camera's view"
    assert under_red > 0.08 * cams.width * cams.height, f"T under the tip covers only {under_red} px"


def test_culling_leaves_the_wrist_image_unchanged(cams, model, home) -> None:
    qpos = np.concatenate([home[None], _random_configs(model, home, 3, seed=2)])
    xpos, xquat = body_poses(model, qpos)
    for p, q in zip(xpos, xquat):
        K, X_WC = (torch.tensor(x[None], dtype=torch.float32) for x in (cams.wrist.K, cams.wrist.pose(p, q)))
        background = torch.tensor(DEFAULT_BACKGROUND)
        everything = cams.world_gaussians(p, q)
        with torch.no_grad():
            rgb, _, _ = rasterize(*everything.args(), K, X_WC, cams.width, cams.height, background)
        np.testing.assert_array_equal(cams.render(p, q)[WRIST], to_uint8(rgb[0].numpy()))


@pytest.mark.parametrize("size", [(96, 96), (80, 48)])
def test_a_fixed_virtual_camera_renders_what_twin_views_renders(scene, model, home, size) -> None:
    width, height = size
    names = ("front", "right")
    virtual = VirtualCameras(scene, model, names, (width, height))
    by_name = {c.name: c for c in scene.cameras}
    views = TwinViews(scene, model, cameras=[by_name[n].resized(width, height) for n in names])
    data = mujoco.MjData(model)
    data.qpos[:] = _random_configs(model, home, 1, seed=3)[0]
    mujoco.mj_kinematics(model, data)
    expected, _, _ = views.render(data)
    images = virtual.render(data.xpos, data.xquat)
    assert list(images) == list(names)
    for c, name in enumerate(names):
        assert images[name].shape == (height, width, 3) and images[name].dtype == np.uint8
        np.testing.assert_array_equal(images[name], to_uint8(expected[c].numpy()), err_msg=name)


def test_a_batch_renders_exactly_as_separate_twins_and_repeats_itself(cams, model, home) -> None:
    qpos = np.concatenate([home[None], _random_configs(model, home, 3, seed=4)])
    xpos, xquat = body_poses(model, qpos)
    batch = cams.render_batch(xpos, xquat)
    assert list(batch) == [WRIST, "front", "left"]
    for name, images in batch.items():
        assert images.shape == (4, 96, 96, 3) and images.dtype == np.uint8
        for b in range(4):
            np.testing.assert_array_equal(images[b], cams.render(xpos[b], xquat[b])[name], err_msg=f"{name} {b}")
        assert not np.array_equal(images[0], images[1]), f"{name}: different twins, same image"
    again = cams.render_batch(xpos, xquat)
    for name in batch:
        np.testing.assert_array_equal(again[name], batch[name])


def test_body_poses_are_mujocos_forward_kinematics(model, home) -> None:
    qpos = _random_configs(model, home, 2, seed=5)
    xpos, xquat = body_poses(model, qpos)
    data = mujoco.MjData(model)
    for b, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_forward(model, data)
        np.testing.assert_array_equal(xpos[b], data.xpos)
        np.testing.assert_array_equal(xquat[b], data.xquat)


def test_bad_input_is_refused_with_a_message_naming_it(scene, model, cams, home) -> None:
    with pytest.raises(ValueError, match=r"unknown camera\(s\) \['top'\]"):
        VirtualCameras(scene, model, (WRIST, "top"))
    with pytest.raises(ValueError, match="repeated"):
        VirtualCameras(scene, model, (WRIST, WRIST))
    with pytest.raises(ValueError, match="at least one"):
        VirtualCameras(scene, model, ())
    with pytest.raises(ValueError, match=r"size: width and height must be ≥ 16 px, got 96×8"):
        VirtualCameras(scene, model, size=(96, 8))
    with pytest.raises(ValueError, match=r"size: expected \(width, height\)"):
        VirtualCameras(scene, model, size=(96,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend"):
        VirtualCameras(scene, model, backend="gsplat")  # type: ignore[arg-type]
    xpos, xquat = body_poses(model, home[None])
    nbody = model.nbody
    with pytest.raises(ValueError, match=rf"xpos: expected shape \({nbody}, 3\)"):
        cams.render(xpos, xquat[0])
    with pytest.raises(ValueError, match=r"xquat: expected shape"):
        cams.render(xpos[0], xquat[0, :, :3])
    with pytest.raises(ValueError, match=rf"xpos: expected shape \(B, {nbody}, 3\)"):
        cams.render_batch(xpos[0], xquat[0])
    with pytest.raises(ValueError, match="xquat: expected shape"):
        cams.render_batch(xpos, np.repeat(xquat, 2, axis=0))
    with pytest.raises(ValueError, match="xpos: contains NaN"):
        cams.render(np.full_like(xpos[0], np.nan), xquat[0])
    with pytest.raises(ValueError, match=rf"qpos: expected shape \(B, {model.nq}\)"):
        body_poses(model, home)
