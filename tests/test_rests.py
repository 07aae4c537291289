"""The T's tipped rests: the sides of its hull onto which it can fall and stay, at the heights its exact boxes
would stand at."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from realissim.assets.pusht import TBlock
from realissim.geometry import quat_to_mat
from realissim.spec.scene import SceneSpec
from realissim.twin.physics import PhysicsConfig, TwinPhysics
from realissim.twin.rests import tipped_rests


def test_the_t_can_stand_on_its_bar_its_stem_end_and_its_two_slanted_sides(scene: SceneSpec) -> None:
    model = TwinPhysics(scene, PhysicsConfig()).model
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, scene.objects[0].name)
    lying, rests = tipped_rests(model, body)
    t = TBlock()
    assert lying == pytest.approx(t.height / 2)
    bar, stem = t.boxes()
    downs = {}
    for rest in rests:
        R = quat_to_mat(rest.quat)
        assert np.allclose(R @ R.T, np.eye(3), atol=1e-9) and np.linalg.det(R) == pytest.approx(1.0)
        down = R.T @ (0.0, 0.0, -1.0)  # the body axis pointing down
        assert abs(down[2]) < 1e-9, "tipped onto a side: the extrusion axis stays horizontal"
        downs[tuple(np.round(down[:2], 3))] = rest.height
    top = bar.center[1] + bar.half[1]  # the bar's top face, body +y
    end = -(stem.center[1] - stem.half[1])  # the stem's end, body −y
    assert len(rests) == 4, downs
    assert downs[(0.0, 1.0)] == pytest.approx(top, abs=1e-6)  # the rounded T's spheres reach the face exactly
    assert downs[(0.0, -1.0)] == pytest.approx(end, abs=1e-6)
    slanted = [h for d, h in downs.items() if abs(d[0]) > 0.1]
    assert len(slanted) == 2 and slanted[0] == pytest.approx(slanted[1])
    # The bar's ends are not rests: the centre of mass overhangs them (it lies in the stem, below the bar).
    assert (1.0, 0.0) not in downs and (-1.0, 0.0) not in downs


def test_a_body_without_spheres_has_no_rests_to_find(scene: SceneSpec) -> None:
    model = TwinPhysics(scene, PhysicsConfig()).model
    with pytest.raises(ValueError, match="no sphere geoms"):
        tipped_rests(model, 0)  # the world body: the table is a plane
