"""Dynamics randomisation: draw each object's friction, mass and centre of mass per episode, and apply the draw to
compiled MuJoCo models in place (the twin's, the expert's push model), so demonstrations cover the physical
reality gap instead of one nominal T.

The draws mirror what a reality-gap profile changes in the surrogate (`real.surrogate.gap.ObjectGap`): true
sliding friction = nominal × `friction_scale` (the object's geoms have contact priority, so it governs the
object's contacts with the table and the pusher), true mass = nominal × `mass_scale` with the inertia scaled
alike, and the centre of mass displaced by `com_offset` in the body frame (the inertia about it kept). Shape is
not randomised (a compiled model's geometry stays). Each draw is recorded with its episode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class DynamicsRandomization:
    """Ranges of the per-episode draws (each object independently)."""

    friction: tuple[float, float] = (0.6, 1.4)
    """Range of the sliding-friction scale, drawn log-uniformly."""
    mass: tuple[float, float] = (0.8, 1.35)
    """Range of the mass scale (inertia alike), drawn log-uniformly."""
    com_offset: float = 0.008
    """Largest planar displacement of the centre of mass, m, drawn uniformly over the disc of this radius."""
    objects: tuple[str, ...] = ()
    """Objects to randomise, by name (empty: every object of the scene)."""

    def __post_init__(self) -> None:
        for name in ("friction", "mass"):
            lo, hi = getattr(self, name)
            if not (0 < lo <= hi and math.isfinite(hi)):
                raise ValueError(f"{name}: need 0 < low ≤ high (finite), got {(lo, hi)}")
        if not (0 <= self.com_offset < 0.05):
            raise ValueError(f"com_offset: need 0 ≤ radius < 0.05 m, got {self.com_offset}")


@dataclass(frozen=True)
class ObjectDraw:
    """One object's drawn dynamics, relative to its description."""

    name: str
    friction_scale: float = 1.0
    mass_scale: float = 1.0
    com_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Body frame, m."""

    def as_dict(self) -> dict[str, float | list[float]]:
        return {"friction_scale": self.friction_scale, "mass_scale": self.mass_scale,
                "com_offset": list(self.com_offset)}  # fmt: skip


def _log_uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    lo, hi = bounds
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def draw_dynamics(
    config: DynamicsRandomization, names: tuple[str, ...] | list[str], rng: np.random.Generator
) -> tuple[ObjectDraw, ...]:
    """One draw per randomised object of `names` (the scene's objects, in order), from `rng`."""
    unknown = set(config.objects) - set(names)
    if unknown:
        raise ValueError(f"DynamicsRandomization.objects: no object named {sorted(unknown)} (scene has {list(names)})")
    chosen = [n for n in names if not config.objects or n in config.objects]
    draws = []
    for name in chosen:
        friction = _log_uniform(rng, config.friction)
        mass = _log_uniform(rng, config.mass)
        radius = config.com_offset * math.sqrt(rng.uniform())
        angle = rng.uniform(-math.pi, math.pi)
        com = (radius * math.cos(angle), radius * math.sin(angle), 0.0)
        draws.append(ObjectDraw(name, friction, mass, com))
    return tuple(draws)


class ObjectDynamics:
    """The nominal dynamics of `names`' bodies in `model`, and `apply` / `restore` of draws in place.

    Call `apply` between episodes, before the model's data is reset: derived constants are recomputed on a
    scratch `MjData` (`mj_setConst`), so live data is untouched but holds no meaning for the old dynamics.
    """

    def __init__(self, model: mujoco.MjModel, names: tuple[str, ...] | list[str]) -> None:
        self.model = model
        self._bodies: dict[str, int] = {}
        self._geoms: dict[str, np.ndarray] = {}
        for name in names:
            body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
            if body < 0:
                raise ValueError(f"ObjectDynamics: the model has no body named {name!r}")
            self._bodies[name] = body
            self._geoms[name] = np.flatnonzero(model.geom_bodyid == body)
        self._mass = model.body_mass.copy()
        self._inertia = model.body_inertia.copy()
        self._ipos = model.body_ipos.copy()
        self._friction = model.geom_friction.copy()

    def apply(self, draws: tuple[ObjectDraw, ...]) -> None:
        """Set each drawn object's friction, mass, inertia and centre of mass from its nominal values (objects not
        drawn return to nominal)."""
        self._reset_fields()
        for d in draws:
            if d.name not in self._bodies:
                raise ValueError(f"ObjectDynamics.apply: {d.name!r} is not one of {list(self._bodies)}")
            b, g = self._bodies[d.name], self._geoms[d.name]
            self.model.body_mass[b] = self._mass[b] * d.mass_scale
            self.model.body_inertia[b] = self._inertia[b] * d.mass_scale
            # The offset is in the body frame; body_ipos is too.
            self.model.body_ipos[b] = self._ipos[b] + np.asarray(d.com_offset)
            self.model.geom_friction[g, 0] = self._friction[g, 0] * d.friction_scale
        mujoco.mj_setConst(self.model, mujoco.MjData(self.model))

    def restore(self) -> None:
        """Back to the nominal dynamics."""
        self.apply(())

    def _reset_fields(self) -> None:
        self.model.body_mass[:] = self._mass
        self.model.body_inertia[:] = self._inertia
        self.model.body_ipos[:] = self._ipos
        self.model.geom_friction[:] = self._friction
