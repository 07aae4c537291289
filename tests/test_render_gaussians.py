"""Gaussians attached to bodies: differentiable placement agrees with MuJoCo's body poses."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from realissim.render import gsplat_available, rasterize
from realissim.render.gaussians import Gaussians, place
from realissim.render.synthetic import cameras, random_gaussians
from realissim.spec.scene import SceneSpec
from realissim.twin.physics import PhysicsConfig, build_model
from realissim.views.appearance import SceneAppearance


def test_place_matches_scene_appearance(scene: SceneSpec) -> None:
    model = build_model(scene, PhysicsConfig())
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    data.qpos[:] = model.qpos0 + 0.3 * rng.standard_normal(model.nq)
    mujoco.mj_forward(model, data)
    appearance = SceneAppearance.from_scene(scene, model)
    local = Gaussians.from_arrays(appearance.local, torch.float64)
    means, quats = place(
        local.means,
        local.quats,
        torch.tensor(appearance.body_index),
        torch.as_tensor(data.xpos),
        torch.as_tensor(data.xquat),
    )
    expected = appearance.world_from_data(data)
    np.testing.assert_allclose(means.numpy(), expected.means, atol=1e-12)
    # Quaternions are equal up to sign.
    dots = np.abs(np.sum(quats.numpy() * expected.quats, axis=1))
    np.testing.assert_allclose(dots, 1.0, atol=1e-12)


def test_place_is_differentiable() -> None:
    g = torch.Generator().manual_seed(0)
    local_means = torch.randn(6, 3, generator=g, dtype=torch.float64)
    local_quats = torch.nn.functional.normalize(torch.randn(6, 4, generator=g, dtype=torch.float64), dim=-1)
    body_index = torch.tensor([0, 0, 1, 1, 2, 2])
    pos = torch.randn(3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    quat = torch.nn.functional.normalize(torch.randn(3, 4, generator=g, dtype=torch.float64), dim=-1)
    quat.requires_grad_()

    def fn(p, q, m):
        return place(m, local_quats, body_index, p, q)

    assert torch.autograd.gradcheck(fn, (pos, quat, local_means.requires_grad_()))


@pytest.mark.skipif(not gsplat_available(), reason="gsplat with a CUDA device is not available")
def test_gsplat_matches_reference() -> None:
    w, h = 96, 72
    Ks, X_WCs = cameras(2, w, h)
    scene = [t.cuda().requires_grad_() for t in random_gaussians(500, seed=4)]
    out = rasterize(*scene, Ks.cuda(), X_WCs.cuda(), w, h, backend="gsplat")
    ref_scene = [t.detach().cpu().double().requires_grad_() for t in scene]
    ref = rasterize(*ref_scene, Ks.double(), X_WCs.double(), w, h, backend="reference")
    # gsplat tests whole tiles and clamps alpha at 0.999 rather than 0.99: footprint-edge pixels differ slightly.
    for got, want in zip(out[:2], ref[:2]):
        diff = (got.double().cpu() - want).abs()
        assert diff.max() < 2e-2 and diff.mean() < 1e-3
    sum(o.sum() for o in out[:2]).backward()
    sum(r.sum() for r in ref[:2]).backward()
    for a, b in zip(scene, ref_scene):
        rel = ((a.grad.double().cpu() - b.grad).norm() / b.grad.norm()).item()
        assert rel < 2e-2
