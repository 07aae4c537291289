"""The key light's shadow in the twin: its geometry, the fit at calibration against the surrogate's shadow-casting
light (and none where the light casts none), and the twin's render matching the real shadow at another arm pose."""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest
import torch
from scipy.ndimage import binary_erosion

from realissim.estimate.color_fit import fit_colors
from realissim.estimate.correction import CorrectionConfig, VisualCorrection
from realissim.estimate.search import ObjectSearch, SearchConfig
from realissim.eval.sync.sweep import SWEEP_SEED, sweep_profile
from realissim.geometry import quat_yaw, yaw_quat
from realissim.real.surrogate.gap import GapProfile
from realissim.real.surrogate.world import SurrogateWorld
from realissim.render import rasterize
from realissim.render.gaussians import Gaussians
from realissim.spec.scene import SceneSpec
from realissim.spec.state import StartState
from realissim.tasks.pusht import PushTTask
from realissim.twin.physics import TwinPhysics
from realissim.twin.state import rest_state
from realissim.views.cameras import TwinViews
from realissim.views.shadows import (
    ShadowCaster,
    ShadowFitConfig,
    ShadowLight,
    covariances,
    flatten_onto_table,
    light_direction,
    point_coverage,
)

SMALL = (160, 90)


def _one(mean: tuple[float, float, float], scales: tuple[float, float, float], opacity: float = 1.0) -> Gaussians:
    return Gaussians(
        torch.tensor([mean]), torch.tensor([[1.0, 0.0, 0.0, 0.0]]), torch.tensor([scales]), torch.zeros(1, 3),
        torch.tensor([opacity]),
    )  # fmt: skip


def test_a_gaussian_is_flattened_along_the_light_onto_the_table() -> None:
    d = torch.tensor(light_direction(math.radians(30.0), math.radians(45.0)), dtype=torch.float64)
    g = _one((0.1, -0.2, 0.3), (0.01, 0.02, 0.005))
    g = Gaussians(*(t.double() for t in g.args()))
    flat = flatten_onto_table(g.means, covariances(g.quats, g.scales), g.opacities, d)
    # Its centre moves along the light to z = 0: 0.3 m down at 45° is 0.3 m along the horizontal direction.
    expected = g.means[0] + d * (0.3 / -d[2])
    np.testing.assert_allclose(flat.means[0].numpy(), expected.numpy(), atol=1e-7)
    assert float(flat.means[0, 2]) == pytest.approx(0.0, abs=1e-12)
    # Its covariance is the oblique projection's: sample points, project them, compare the spread.
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(200_000, 3)) * np.array([0.01, 0.02, 0.005]) + g.means[0].numpy()
    dn = d.numpy()
    proj = pts - dn[None] * (pts[:, 2] / dn[2])[:, None]
    cov = covariances(flat.quats, flat.scales)[0].numpy()
    np.testing.assert_allclose(cov[:2, :2], np.cov(proj[:, :2].T), rtol=0.02, atol=1e-7)
    # Gaussians on the table itself cast nothing.
    low = _one((0.0, 0.0, 0.001), (0.01, 0.01, 0.001))
    assert len(flatten_onto_table(low.means, covariances(low.quats, low.scales), low.opacities, d.float())) == 0


def test_point_coverage_counts_only_casters_between_the_point_and_the_light() -> None:
    d = torch.tensor(light_direction(0.0, math.radians(60.0)), dtype=torch.float64)
    caster = _one((0.0, 0.0, 0.2), (0.03, 0.03, 0.03), 0.95)
    cov = covariances(caster.quats.double(), caster.scales.double())
    under = caster.means.double()[0] + d * (0.2 / -float(d[2]))  # where the light through its centre meets z = 0
    points = torch.stack([under, under + torch.tensor([0.3, 0.0, 0.0], dtype=torch.float64),
                          torch.tensor([0.0, 0.0, 0.4], dtype=torch.float64)])  # fmt: skip
    c = point_coverage(points, caster.means.double(), cov, caster.opacities.double(), d)
    assert float(c[0]) > 0.9  # in its shadow
    assert float(c[1]) < 1e-6  # beside it
    assert float(c[2]) < 1e-6  # above it: the caster is not between it and the light


def _start(scene: SceneSpec) -> StartState:
    return PushTTask().sample_start(np.random.default_rng(0))


def _capture(scene: SceneSpec, gap: GapProfile, starts: list[StartState]) -> tuple[list[torch.Tensor], list]:
    with SurrogateWorld(scene, gap, camera_size=SMALL) as world:
        shots = []
        for s in starts:
            world.reset(s)
            shots.append(torch.from_numpy(np.stack([f.image for f in world.render_cameras()])))
        return shots, list(world.true_cameras)


@pytest.mark.slow
def test_the_key_light_is_fitted_where_it_casts_a_shadow_and_the_twin_renders_it_at_another_pose(
    scene: SceneSpec,
) -> None:
    """Sweep profile 05's key light casts shadows: calibration finds its direction within 5° and a shadow at most
    half as bright; the twin, its colours fitted with the shadow, then renders the arm's shadow where the arm has
    moved to: where the real table went from lit to shadowed or back, it errs less than half as much as a twin that
    baked the calibration-time shadow into its table. The default gap casts none: no shadow is fitted."""
    first = _start(scene)
    moved = dataclasses.replace(first, q=tuple(np.asarray(first.q) + np.array([0.35, 0.2, 0.0, -0.25, 0.0, 0.2, 0.0])))
    twin = TwinPhysics(scene)
    poses = []
    for s in (first, moved):
        twin.reset(rest_state(s))
        poses.append((twin.data.xpos.copy(), twin.data.xquat.copy()))
    gap = sweep_profile(SWEEP_SEED, 5)
    assert gap.lighting.shadow_size > 0
    shots, cameras = _capture(scene, gap, [first, moved])
    # Table pixels whose real shadow state changed between the two poses (lit ↔ shadowed), a pixel in from every
    # edge: where a twin that baked the first pose's shadow must be wrong.
    lum = [shot.float().mean(dim=-1) / 255 for shot in shots]
    errors = {}
    for shadows in (True, False):
        views = TwinViews(scene, twin.model, cameras=cameras)
        light = views.fit_shadow(*poses[0], shots[0], ShadowFitConfig(enabled=shadows))
        if shadows:
            assert light is not None
            truth = np.asarray(gap.lighting.key_direction) / np.linalg.norm(gap.lighting.key_direction)
            angle = math.degrees(math.acos(float(np.clip(np.dot(truth, light.direction), -1, 1))))
            assert angle < 5.0, angle
            assert max(light.attenuation) < 0.5 and light.contrast > 2.0
        fit_colors(views, *poses[0], shots[0][None])
        views.cast_shadows(*poses[1])
        rgb, _, _ = views.render_poses(*poses[1])
        in_front = [rasterize(*views.moving(*p).args(), views.Ks, views.X_WCs, *SMALL, None, views.backend)[1]
                    for p in poses]  # fmt: skip
        assert views._lit_layer is not None
        table = (in_front[0] < 0.05) & (in_front[1] < 0.05) & (views._lit_layer.alpha > 0.95)
        lit = float(lum[1][table].median())
        changed = ((lum[0] < 0.6 * lit) ^ (lum[1] < 0.6 * lit)) & table
        changed = torch.from_numpy(np.stack([binary_erosion(c) for c in changed.numpy()]))
        assert int(changed.sum()) > 100
        errors[shadows] = float((rgb - shots[1].float() / 255).abs().mean(dim=-1)[changed].mean())
    assert errors[True] < 0.5 * errors[False], errors

    plain, cameras = _capture(scene, GapProfile(), [first])
    views = TwinViews(scene, twin.model, cameras=cameras)
    assert views.fit_shadow(*poses[0], plain[0]) is None
    assert views.shadow is None


def test_faces_are_lit_by_their_cosine_to_the_light_and_an_upward_one_as_before() -> None:
    """`shade_faces`: a face turned towards the light is brighter than an upward one by (1 + r·cos) / (1 + r·up), one
    turned away is as dark as full shadow (the attenuation), and an upward face in a caster's shadow gets exactly
    the factor it got without the option."""
    d = light_direction(0.0, math.radians(35.0))  # from +x, 35° up: travelling along −x, down
    faces = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])  # up, towards the light, away
    flat = torch.ones(4, dtype=torch.bool)
    # Three object Gaussians far from the caster, and an upward one right under it (in its shadow).
    points = torch.tensor([[0.5, 0.0, 0.02], [0.5, 0.1, 0.02], [0.5, 0.2, 0.02], [0.0, 0.0, 0.02]])
    normals = torch.cat([faces, faces[:1]])
    up, cosine = math.sin(math.radians(35.0)), math.cos(math.radians(35.0))
    caster = _one((0.18 * cosine / up, 0.0, 0.2), (0.03, 0.03, 0.03), 0.99)  # between the 4th and the light
    k = (0.3, 0.4, 0.5)
    casters = (caster.means, covariances(caster.quats, caster.scales), caster.opacities)
    shaded = {}
    for option in (True, False):
        light = ShadowLight(d, k, shade_faces=option)
        g = Gaussians(points, torch.tensor([[1.0, 0, 0, 0]] * 4), torch.full((4, 3), 0.01), torch.zeros(4, 3),
                      torch.ones(4))  # fmt: skip
        shadow = ShadowCaster(g, torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.bool), light)
        shaded[option] = shadow.shade_points(points, normals, flat, casters)
    r = (1.0 / torch.tensor(k) - 1.0) / up
    on = shaded[True]
    np.testing.assert_allclose(on[0].numpy(), 1.0, atol=1e-6)  # upward and lit: as fitted
    np.testing.assert_allclose(on[1].numpy(), ((1 + r * cosine) / (1 + r * up)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(on[2].numpy(), k, rtol=1e-5)  # facing away: the fill and ambient alone
    assert float(on[3].min()) < 0.9  # in the caster's shadow ...
    np.testing.assert_allclose(on[3].numpy(), shaded[False][3].numpy(), rtol=1e-5)  # ... exactly as before
    np.testing.assert_allclose(shaded[False][:3].numpy(), 1.0)  # without the option, only a shadow shades


@pytest.mark.slow
def test_faces_shaded_by_their_normals_carry_the_fitted_colours_to_a_turned_t(scene: SceneSpec) -> None:
    """Under a low key light (35° up, warm, with a blue fill) the T's sides change brightness and hue as it turns,
    and colours fitted at one pose put the images' optimum millimetres off the T at another. Calibrated at one pose,
    then with the T turned and moved to three others, the pull the correction finds at the T's true pose (how far
    the images' optimum lies from it) is clearly smaller with `shade_faces` (each face lit by its cosine to the
    fitted light) than with the colours as fitted (measured 2.7, 2.4, 6.6 mm against 2.6, 3.2, 9.9)."""
    first = _start(scene)
    pos, quat = np.asarray(first.objects[0].pos), np.asarray(first.objects[0].quat)
    starts = [first]
    for turn, dx, dy in ((60.0, 0.03, -0.02), (120.0, -0.02, 0.03), (-90.0, 0.0, 0.04)):
        yaw = float(quat_yaw(quat)) + math.radians(turn)
        moved = (pos + np.array([dx, dy, 0.0]))[None]
        starts.append(StartState.from_arrays(moved, np.asarray(yaw_quat(yaw))[None], np.asarray(first.q)))
    twin = TwinPhysics(scene)
    poses = []
    for s in starts:
        twin.reset(rest_state(s))
        poses.append((twin.data.xpos.copy(), twin.data.xquat.copy(), twin.data.xipos.copy()))
    low = {"key_direction": (-0.41, -0.71, -0.57), "key_color": (0.8, 0.68, 0.6), "fill_color": (0.17, 0.33, 0.36)}
    lighting = dataclasses.replace(GapProfile().lighting, shadow_size=1024, **low)  # type: ignore[arg-type]
    shots, cameras = _capture(scene, dataclasses.replace(GapProfile(), lighting=lighting), starts)
    offsets = {}
    for faces in (True, False):
        views = TwinViews(scene, twin.model, cameras=cameras)
        light = views.fit_shadow(*poses[0][:2], shots[0], ShadowFitConfig(shade_faces=faces))
        assert light is not None and light.shade_faces == faces
        fit_colors(views, *poses[0][:2], shots[0][None])
        config = CorrectionConfig(solver="adam", iterations=40, integral=0.0, rest_eps2d=None)
        correction = VisualCorrection(views, twin.model, config, frame_dt=twin.dt)
        found = [correction(*pose, shot).wrenches[0, :2] / config.stiffness for pose, shot in zip(poses[1:], shots[1:])]
        offsets[faces] = [1e3 * float(np.linalg.norm(f)) for f in found]
    assert np.mean(offsets[True]) < 0.85 * np.mean(offsets[False]), offsets


def test_shadow_light_validation() -> None:
    with pytest.raises(ValueError, match="direction"):
        ShadowLight((0.0, 0.0, 1.0), (0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="attenuation"):
        ShadowLight(light_direction(0.0, 1.0), (0.0, 0.5, 0.5))
    with pytest.raises(ValueError, match="elevations"):
        ShadowFitConfig(elevations=(95.0,))
    shade = ShadowLight(light_direction(0.0, 1.0), (0.25, 0.5, 1.0)).shade(torch.tensor([0.0, 1.0, 0.5]))
    np.testing.assert_allclose(shade.numpy(), [[1, 1, 1], [0.25, 0.5, 1.0], [0.625, 0.75, 1.0]])


@pytest.mark.slow
def test_the_search_shades_its_candidates_where_the_arm_casts_its_shadow(scene: SceneSpec) -> None:
    """A low key light (45° up) casts the arm's shadow over a third of the T. The twin, calibrated with the T lit
    elsewhere, searches for it there: with its candidates shaded by the arm's shadow (`SearchConfig.shade`), the
    found T explains clearly more of the images (measured 0.24 of the object-absent loss against 0.10 lit) and lies
    within 12 mm of the truth (8 mm measured). On a corner profile the lit candidates explained less than no T at
    all, so the search found nothing and the arm was held to the episode's end (docs/decisions.md)."""
    base = GapProfile()
    light = light_direction(math.radians(160.0), math.radians(45.0))
    gap = dataclasses.replace(base, lighting=dataclasses.replace(base.lighting, key_direction=light, shadow_size=1024))
    first = _start(scene)
    twin = TwinPhysics(scene)
    twin.reset(rest_state(first))
    hand = twin.data.xpos[mujoco.mj_name2id(twin.model, mujoco.mjtObj.mjOBJ_BODY, "panda_link7")]
    under = hand[:2] - hand[2] / light[2] * np.asarray(light[:2])  # the hand's shadow on the table
    real = np.array([under[0] - 0.03, under[1], first.objects[0].pos[2]])
    second = StartState.from_arrays(real[None], np.array([yaw_quat(0.3)]), np.asarray(first.q))
    poses = []
    for s in (first, second):
        twin.reset(rest_state(s))
        poses.append((twin.data.xpos.copy(), twin.data.xquat.copy()))
    shots, cameras = _capture(scene, gap, [first, second])
    views = TwinViews(scene, twin.model, cameras=cameras)
    assert views.fit_shadow(*poses[0], shots[0]) is not None
    fit_colors(views, *poses[0], shots[0][None])
    assert views.shadow is not None
    factors = views.shadow.object_factors(*poses[1])[views.shadow.object_mask].mean(dim=-1)
    assert float((factors < 0.7).float().mean()) > 0.3  # a third of the T's Gaussians in the arm's shadow
    twin.reset(rest_state(first))  # the twin's T where it was: lost
    explained = {}
    for shade in (True, False):
        search = ObjectSearch(views, twin.model, SearchConfig(shade=shade))
        found = search.search(twin, np.asarray(second.q), shots[1].numpy())
        explained[shade] = 1.0 - found.score / found.empty_score
        if shade:
            assert found.found and np.linalg.norm(found.pos[:2] - real[:2]) < 0.012, (found.pos, real)
    assert explained[True] > explained[False] + 0.08, explained


def test_a_shadow_is_cast_again_only_once_a_body_moved_more_than_the_tolerance(scene: SceneSpec) -> None:
    """`cast_shadows` and the objects' shading in `moving` keep their last result while no body moved more than the
    tolerance (the correction's `shade_recast` for the shading), and give what a fresh cast gives once one did."""
    twin = TwinPhysics(scene)
    twin.reset(rest_state(_start(scene)))
    views = TwinViews(scene, twin.model, cameras=[c.resized(*SMALL) for c in scene.cameras])
    light = ShadowLight(light_direction(math.radians(160.0), math.radians(45.0)), (0.5, 0.55, 0.6))
    views.set_shadow(light)
    joints = twin.layout.robot_qpos

    def poses(shift: float) -> tuple[np.ndarray, np.ndarray]:
        data = mujoco.MjData(twin.model)
        data.qpos[:] = twin.data.qpos
        data.qpos[joints[0]] += shift  # the arm turned about its base
        mujoco.mj_kinematics(twin.model, data)
        return data.xpos.copy(), data.xquat.copy()

    here, near, far = poses(0.0), poses(0.005), poses(0.1)
    assert views.cast_shadows(*here)
    first = views.static_layer
    assert not views.cast_shadows(*here)  # the same poses: nothing to cast, at tolerance 0 too
    assert views.cast_shadows(*near)  # moved a few mm: cast again at tolerance 0 …
    assert not views.cast_shadows(*here, tolerance=0.05)  # … but not within 5 cm
    assert views.cast_shadows(*far, tolerance=0.05)  # a 0.1 rad turn moves the hand ~6 cm
    cached = views.static_layer
    assert cached is not first and cached is not None
    fresh = TwinViews(scene, twin.model, cameras=[c.resized(*SMALL) for c in scene.cameras])
    fresh.set_shadow(light)
    fresh.cast_shadows(*far)
    assert fresh.static_layer is not None
    torch.testing.assert_close(cached.rgb, fresh.static_layer.rgb)
    assert float((first.rgb - cached.rgb).abs().max()) > 0.05  # the shadow did move
    shaded = views.moving(*here).colors
    assert torch.equal(views.moving(*near, shade_tolerance=0.05).colors, shaded)  # kept
    torch.testing.assert_close(views.moving(*far, shade_tolerance=0.05).colors, fresh.moving(*far).colors)
