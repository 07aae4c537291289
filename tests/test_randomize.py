"""Dynamics randomisation: draws in their ranges and reproducible, applied to a compiled model so the twin's T
really slides differently, restored exactly; `realissim collect --randomize` records each episode's draw."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

from realissim.apps.collect import CollectConfig
from realissim.assets.pusht import T_NAME
from realissim.cli import main
from realissim.data.schema import DYNAMICS_KEY
from realissim.data.store import Dataset
from realissim.geometry import quat_yaw
from realissim.spec import SceneSpec
from realissim.twin import TwinPhysics
from realissim.twin.randomize import DynamicsRandomization, ObjectDraw, ObjectDynamics, draw_dynamics


def test_draws_stay_in_their_ranges_and_repeat_with_the_seed() -> None:
    config = DynamicsRandomization(friction=(0.5, 1.5), mass=(0.8, 1.2), com_offset=0.01)
    draws = [draw_dynamics(config, ["a", "b"], np.random.default_rng(s)) for s in range(200)]
    flat = [d for pair in draws for d in pair]
    friction = np.array([d.friction_scale for d in flat])
    mass = np.array([d.mass_scale for d in flat])
    com = np.array([d.com_offset for d in flat])
    assert friction.min() >= 0.5 and friction.max() <= 1.5 and friction.max() - friction.min() > 0.8
    assert mass.min() >= 0.8 and mass.max() <= 1.2
    assert np.linalg.norm(com[:, :2], axis=1).max() <= 0.01 and np.all(com[:, 2] == 0)
    assert draws[3] == draw_dynamics(config, ["a", "b"], np.random.default_rng(3))
    assert draws[3] != draws[4]
    only_b = draw_dynamics(DynamicsRandomization(objects=("b",)), ["a", "b"], np.random.default_rng(0))
    assert [d.name for d in only_b] == ["b"]
    with pytest.raises(ValueError, match="no object named"):
        draw_dynamics(DynamicsRandomization(objects=("c",)), ["a", "b"], np.random.default_rng(0))
    with pytest.raises(ValueError, match="friction"):
        DynamicsRandomization(friction=(1.2, 0.8))


def _slide(twin: TwinPhysics, frames: int = 30) -> tuple[float, float]:
    """Push the T from rest on the table with 2 N along +x through its body origin (the described centre of its
    shape); its travel (m) and yaw change (rad)."""
    twin.reset()
    body = mujoco.mj_name2id(twin.model, mujoco.mjtObj.mjOBJ_BODY, T_NAME)
    qadr = int(twin.model.jnt_qposadr[twin.model.body_jntadr[body]])
    for _ in range(10):  # settle on the table
        twin.step()
    x0, yaw0 = twin.data.qpos[qadr], quat_yaw(twin.data.qpos[qadr + 3 : qadr + 7])
    force = np.array([2.0, 0.0, 0.0])
    for _ in range(frames):
        lever = twin.data.xpos[body] - twin.data.xipos[body]  # from the centre of mass to the origin
        twin.apply_wrench(T_NAME, force, np.cross(lever, force))
        twin.step()
    return float(twin.data.qpos[qadr] - x0), float(quat_yaw(twin.data.qpos[qadr + 3 : qadr + 7]) - yaw0)


def test_applied_dynamics_change_how_the_t_slides_and_restore_exactly(scene: SceneSpec) -> None:
    twin = TwinPhysics(scene)
    nominal_fields = [twin.model.body_mass.copy(), twin.model.geom_friction.copy(), twin.model.body_ipos.copy()]
    dynamics = ObjectDynamics(twin.model, [T_NAME])
    travel, yaw = _slide(twin)
    dynamics.apply((ObjectDraw(T_NAME, friction_scale=0.6),))
    slippery, _ = _slide(twin)
    dynamics.apply((ObjectDraw(T_NAME, friction_scale=1.5),))
    grippy, _ = _slide(twin)
    assert slippery > 1.2 * travel and grippy < 0.85 * travel  # friction governs the T's contact with the table
    dynamics.apply((ObjectDraw(T_NAME, com_offset=(0.0, 0.01, 0.0)),))
    _, turned = _slide(twin)
    assert abs(turned - yaw) > 0.01  # an off-centre mass turns a sliding T
    dynamics.apply((ObjectDraw(T_NAME, mass_scale=2.0),))
    body = mujoco.mj_name2id(twin.model, mujoco.mjtObj.mjOBJ_BODY, T_NAME)
    assert twin.model.body_mass[body] == pytest.approx(2.0 * nominal_fields[0][body])
    assert twin.model.body_subtreemass[body] == pytest.approx(twin.model.body_mass[body])  # constants recomputed
    dynamics.restore()
    for before, after in zip(nominal_fields, [twin.model.body_mass, twin.model.geom_friction, twin.model.body_ipos]):
        np.testing.assert_array_equal(before, after)
    assert _slide(twin) == (travel, yaw)  # nominal again, bit for bit


@pytest.mark.slow
def test_collect_randomize_records_each_episodes_draw(tmp_path: Path) -> None:
    out = tmp_path / "demos"
    args = ["collect", "--episodes", "2", "--out", str(out), "--max-seconds", "1.0", "--seed", "3", "--randomize",
            "--randomize-friction", "0.7", "0.9", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    episodes = Dataset(out, include_failed=True).all_episodes
    draws = [e.extra[DYNAMICS_KEY][T_NAME] for e in episodes]
    assert all(0.7 <= d["friction_scale"] <= 0.9 for d in draws)
    assert draws[0] != draws[1]
    with pytest.raises(ValueError, match="randomize"):
        CollectConfig(randomize=True, online=True)


def test_the_experts_push_model_takes_the_same_draw(scene: SceneSpec) -> None:
    from realissim.expert.push_model import PushModel

    planner = PushModel(scene)
    dynamics = ObjectDynamics(planner.model, [T_NAME])
    body = mujoco.mj_name2id(planner.model, mujoco.mjtObj.mjOBJ_BODY, T_NAME)
    geoms = planner.model.geom_bodyid == body
    before = planner.model.geom_friction[geoms, 0].copy()
    dynamics.apply((ObjectDraw(T_NAME, friction_scale=0.7, mass_scale=1.2),))
    np.testing.assert_allclose(planner.model.geom_friction[geoms, 0], 0.7 * before)
    with pytest.raises(ValueError, match="no body named"):
        ObjectDynamics(planner.model, ["nope"])


def test_the_task_expert_declares_the_models_it_plans_in() -> None:
    from realissim.expert.registry import make_expert
    from realissim.policy import PlansInPhysics
    from realissim.tasks import make

    expert = make_expert(make("pusht"))
    assert isinstance(expert, PlansInPhysics)
    (model,) = expert.planning_models()
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, T_NAME)
    mass = float(model.body_mass[body])
    ObjectDynamics(model, [T_NAME]).apply((ObjectDraw(T_NAME, mass_scale=1.5),))
    assert expert.model.model.body_mass[body] == pytest.approx(1.5 * mass)  # the very model the expert rolls out
