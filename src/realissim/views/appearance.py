"""Gaussians bound to the bodies of a compiled MuJoCo model, and their world poses from body poses.

`SceneAppearance` keeps every body's Gaussians in its body frame, concatenated, with the MuJoCo body id
of each; `world` places them with the bodies' world poses (MuJoCo's `xpos`, `xquat` [w, x, y, z]).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from realissim.assets.appearance import GROUND_BODY, AppearanceConfig, scene_gaussians
from realissim.assets.gaussians import GaussianArrays
from realissim.geometry import quat_mul, quat_to_mat
from realissim.spec.scene import SceneSpec


def _body_ids(model: mujoco.MjModel, names: list[str]) -> np.ndarray:
    """MuJoCo ids (K,) of the named bodies; KeyError naming every missing one."""
    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name) for name in names]
    missing = [name for name, i in zip(names, ids) if i < 0]
    if missing:
        raise KeyError(f"model has no bodies {missing} (Gaussians were given for them)")
    return np.asarray(ids, dtype=np.intp)


def _check_poses(xpos: ArrayLike, xquat: ArrayLike, nbody: int) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(xpos, dtype=np.float64)
    q = np.asarray(xquat, dtype=np.float64)
    if p.shape != (nbody, 3) or q.shape != (nbody, 4):
        raise ValueError(f"need xpos ({nbody}, 3) and xquat ({nbody}, 4), got {p.shape} and {q.shape}")
    return p, q


@dataclass(frozen=True, eq=False)
class SceneAppearance:
    """A scene's Gaussians attached to the bodies of one MuJoCo model (see `from_scene`).

    The masks `static`, `objects` and `robot` partition the Gaussians: the ground (MuJoCo's world body,
    never moves), the scene's free objects, and the arm's links with the pusher.
    """

    local: GaussianArrays
    """All Gaussians (N) in their own body's frame."""
    body_index: np.ndarray
    """(N,) int MuJoCo body id of each Gaussian."""
    body_names: tuple[str, ...]
    """Bodies that carry Gaussians, in the order their Gaussians appear in `local`."""
    nbody: int
    """Bodies in the model (length of `xpos` / `xquat`)."""
    static: np.ndarray
    """(N,) bool: Gaussians of the ground."""
    objects: np.ndarray
    """(N,) bool: Gaussians of the scene's objects."""
    robot: np.ndarray
    """(N,) bool: Gaussians of the robot's links and pusher."""

    @staticmethod
    def from_bodies(
        bodies: Mapping[str, GaussianArrays], model: mujoco.MjModel, object_names: tuple[str, ...]
    ) -> SceneAppearance:
        """Bind body name → body-frame Gaussians to `model`. The key `GROUND_BODY` is static, keys in
        `object_names` are objects, all other keys robot. KeyError names bodies absent from the model."""
        names = list(bodies)
        ids = _body_ids(model, names)
        counts = [len(bodies[name]) for name in names]
        kinds = np.repeat([_kind(name, object_names) for name in names], counts)
        return SceneAppearance(
            local=GaussianArrays.concat([bodies[name] for name in names]),
            body_index=_frozen(np.repeat(ids, counts)),
            body_names=tuple(names),
            nbody=int(model.nbody),
            static=_frozen(kinds == 0),
            objects=_frozen(kinds == 1),
            robot=_frozen(kinds == 2),
        )

    @staticmethod
    def from_scene(
        scene: SceneSpec,
        model: mujoco.MjModel,
        base_dir: str | Path | None = None,
        config: AppearanceConfig = AppearanceConfig(),
    ) -> SceneAppearance:
        """The scene's Gaussians (`realissim.assets.appearance.scene_gaussians`) bound to `model`, the
        model compiled from `scene` (e.g. by `realissim.twin.physics.build_model`)."""
        bodies = scene_gaussians(scene, base_dir, config)
        return SceneAppearance.from_bodies(bodies, model, tuple(o.name for o in scene.objects))

    def __len__(self) -> int:
        return len(self.local)

    def world(self, xpos: ArrayLike, xquat: ArrayLike, subset: ArrayLike | None = None) -> GaussianArrays:
        """The Gaussians in the world frame for body poses xpos (nbody, 3) m and xquat (nbody, 4) wxyz
        (MuJoCo's `data.xpos`, `data.xquat`); only those picked by `subset` (bool mask (N,) or indices)."""
        p, q = _check_poses(xpos, xquat, self.nbody)
        local = self.local if subset is None else self.local.select(subset)
        body = self.body_index if subset is None else self.body_index[np.asarray(subset)]
        rot = quat_to_mat(q)[body]
        quats = quat_mul(q[body], local.quats)
        return GaussianArrays(
            means=np.einsum("nij,nj->ni", rot, local.means) + p[body],
            quats=quats / np.linalg.norm(quats, axis=1, keepdims=True),
            scales=local.scales,
            colors=local.colors,
            opacities=local.opacities,
        )

    def world_from_data(self, data: mujoco.MjData, subset: ArrayLike | None = None) -> GaussianArrays:
        """`world` at the body poses in `data` (current after mj_forward / mj_kinematics / mj_step)."""
        return self.world(data.xpos, data.xquat, subset)


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def _kind(name: str, object_names: tuple[str, ...]) -> int:
    """0 static (the ground), 1 object, 2 robot."""
    if name == GROUND_BODY:
        return 0
    return 1 if name in object_names else 2
