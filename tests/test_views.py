"""The twin seen through cameras (TwinViews) and the PNG writer."""

from __future__ import annotations

import struct
import zlib

import mujoco
import numpy as np
import pytest
import torch

from realissim.assets.pusht import T_NAME, TBlock
from realissim.geometry import project_points
from realissim.render import rasterize
from realissim.spec.scene import SceneSpec
from realissim.twin.physics import PhysicsConfig, build_model
from realissim.util.images import encode_png, grid, to_uint8, write_png
from realissim.views.cameras import TwinViews


def _decode_png(data: bytes) -> np.ndarray:
    """Minimal decoder for the files `encode_png` writes (8-bit RGB, filter 0)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        chunks[kind] = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    w, h = struct.unpack(">II", chunks[b"IHDR"][:8])
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 1 + 3 * w)
    assert np.all(rows[:, 0] == 0)
    return rows[:, 1:].reshape(h, w, 3)


def test_png_round_trip_and_grid(tmp_path) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    b = to_uint8(rng.random((5, 7, 3)))
    image = grid([[a, b], [b]], gap=1)
    assert image.shape == (11, 15, 3)
    write_png(tmp_path / "x.png", image)
    np.testing.assert_array_equal(_decode_png((tmp_path / "x.png").read_bytes()), image)
    with pytest.raises(ValueError, match="rgb"):
        to_uint8(np.full((2, 2, 3), np.nan))
    with pytest.raises(ValueError, match="image"):
        encode_png(np.zeros((2, 2), np.uint8))


@pytest.fixture(scope="module")
def twin(scene: SceneSpec):
    model = build_model(scene, PhysicsConfig())
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    mujoco.mj_forward(model, data)
    return model, data


def _small_cameras(scene: SceneSpec, scale: int = 4):
    return [cam.resized(cam.width // scale, cam.height // scale) for cam in scene.cameras]


def test_static_ground_layer_matches_rendering_everything(scene: SceneSpec, twin) -> None:
    model, data = twin
    views = TwinViews(scene, model, cameras=_small_cameras(scene))
    rgb, alpha, _ = views.render(data)
    moving = views.moving(data.xpos, data.xquat)
    args = [torch.cat([a, b]) for a, b in zip(moving.args(), views.static.args())]
    full_rgb, full_alpha, _ = rasterize(*args, views.Ks, views.X_WCs, views.width, views.height, views.background)
    # The T's bottom Gaussians touch the table, where centre-depth order and per-pixel order can differ.
    assert (rgb - full_rgb).abs().mean() < 2e-3
    assert (alpha - full_alpha).abs().max() < 1e-2


def test_the_t_appears_where_it_is_and_follows_it(scene: SceneSpec, twin) -> None:
    model, data = twin
    views = TwinViews(scene, model, cameras=_small_cameras(scene))
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, T_NAME)
    bar = TBlock().boxes()[0]  # the top bar; a point on its top face near one end, away from the pusher rod
    point = np.array([bar.center[0] + 0.6 * bar.half[0], bar.center[1], bar.center[2] + bar.half[2]])
    on_t = data.xpos[body] + data.xmat[body].reshape(3, 3) @ point
    rgb, _, depth = views.render(data)
    for c, cam in enumerate(views.cameras):
        uv, z = project_points(on_t[None], cam.K_array, cam.X_WC_array)
        u, v = int(uv[0, 0]), int(uv[0, 1])
        r, g, b = rgb[c, v, u].tolist()
        assert r > 0.5 and r > 2 * g and r > 2 * b, (
            f"camera {c}: T not red at its projection ({r:.2f}, {g:.2f}, {b:.2f})"
        )
        assert depth[c, v, u].item() == pytest.approx(z[0], abs=0.02)
    moved = mujoco.MjData(model)
    moved.qpos[:] = data.qpos
    adr = model.jnt_qposadr[model.body_jntadr[body]]
    moved.qpos[adr : adr + 2] += [0.0, 0.2]
    mujoco.mj_forward(model, moved)
    rgb2, _, _ = views.render(moved)
    assert not torch.allclose(rgb, rgb2)


def test_a_window_renders_exactly_those_pixels_of_the_full_image(scene: SceneSpec, twin) -> None:
    model, data = twin
    views = TwinViews(scene, model, cameras=_small_cameras(scene, 3))
    g = views.moving(data.xpos, data.xquat)
    full, _, _ = views.render(data)
    window = views.window(g.means[views.object_mask].numpy(), margin=10)
    assert window.width % 16 == 0 and window.height % 16 == 0
    assert window.width < views.width and window.height < views.height
    assert len(set(zip(window.x0, window.y0))) == len(views.cameras)  # each camera its own window
    keep = window.touches(g.means, 3.0 * g.scales.amax(dim=-1))
    assert 0 < int(keep.sum()) < len(keep)  # robot Gaussians far from the T are culled
    kept = [t[keep] for t in g.args()]
    with torch.no_grad():
        cut, _, _ = rasterize(
            *kept, window.Ks, window.X_WCs, window.width, window.height, views.background, static=window.static_layer
        )
    np.testing.assert_allclose(cut.numpy(), window.cut(full).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="leaves"):
        views.static_layer.crop(window.x0, window.y0, views.width + 16, window.height)
