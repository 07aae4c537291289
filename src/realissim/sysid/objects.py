"""Identify the objects' dynamics — sliding friction, mass, centre of mass — from online episodes, without the oracle.

Method (replay with multiple shooting). By default ("slides") the recordings are searched for free slides — an
object moving on clear of the pusher, as probing strokes leave it (`expert.probe`) — and each slide is replayed in
the *uncorrected* twin from the corrected twin's pose at its start, its initial planar velocity fitted with it (3
nuisance values a slide, least squares inside each evaluation), under candidate dynamics. With "pushes", windows of
`ObjectFitConfig.window` s in which an object moved are replayed instead, the twin's arm driven kinematically
along the real arm's measured joints (`Recording.arm_trajectory`), so the twin's pusher moves as the real one did.
The residual is the replayed objects' planar pose against the corrected twin's (position, and yaw × `yaw_length`,
each over `sigma`). The friction scale is found by a coarse grid and a bounded 1-D search; several parameters
together are refined by `mujoco.sysid.optimize` (box-bounded nonlinear least squares), and
`mujoco.sysid.calculate_intervals` gives 95 % intervals from a wide-step Jacobian at the optimum.

What the data separates: a pusher that moves as measured (position-controlled, far stiffer than the contact)
prescribes the objects' motion while it pushes, whatever their mass; a mass change scales every force alike
(contact, friction, inertia), so the kinematics are the same. Friction shows where the object slides on after the
pusher lets go (it stops in v²/2μg), the centre of mass in how a push turns it. Mass is therefore fitted here only
when asked (`fit_mass`), and its interval says how little the motion tells: the arm's deflection under the push
force is what measures it (the arm's identification). The intervals assume independent residuals, which
consecutive frames are not: read them as a lower bound of the uncertainty.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import mujoco
import numpy as np
from mujoco import sysid

from realissim.geometry import quat_to_mat, quat_yaw
from realissim.spec.scene import SceneSpec
from realissim.sysid.records import Recording, SysidError
from realissim.twin.physics import PhysicsConfig, TwinPhysics
from realissim.twin.randomize import ObjectDraw, ObjectDynamics

log = logging.getLogger(__name__)

COM_UNIT = 0.01
"""The centre-of-mass parameters are in cm (so a finite-difference step is of the size of the other parameters')."""


@dataclass(frozen=True)
class ObjectFitConfig:
    """How objects' dynamics are fitted."""

    windows: Literal["slides", "pushes"] = "slides"
    """Which stretches are replayed. "slides": where an object slides free of the pusher (it moved on after a stroke:
    `realissim collect --policy probe`), each from the corrected twin's pose with its initial velocity fitted as
    well (3 nuisance values a slide) — the arm plays no part, so the replay is the object's dynamics alone.
    "pushes": every `window` s in which an object moved, the arm driven along its measured joints (the pushes'
    kinematics barely depend on the dynamics, and the contact replay is rough: docs/decisions.md)."""
    window: float = 1.0
    """Length of one replayed window ("pushes"), and the longest slide, s."""
    stride: float = 0.5
    """Time between window starts, s."""
    clearance: float = 0.006
    """"slides": the pusher's tip is at least this far from the object's spheres throughout, m."""
    slide_speed: float = 0.05
    """"slides": a slide starts when the object moves at least this fast, m/s, clear of the pusher."""
    min_motion: float = 0.003
    """A window is used for an object that moved at least this far in it, m (its yaw counted × `yaw_length`)."""
    yaw_length: float = 0.05
    """m per rad: how a yaw error weighs against a position error."""
    sigma: float = 0.002
    """Residual scale, m (the corrected twin's typical error against the world)."""
    sample_every: int = 2
    """Compare every this-many frames of a window."""
    friction_bounds: tuple[float, float] = (0.3, 3.0)
    """Bounds of the sliding-friction scale (× the scene's)."""
    mass_bounds: tuple[float, float] = (0.3, 3.0)
    """Bounds of the mass scale."""
    com_bound: float = 0.02
    """Bound of each planar centre-of-mass offset, m (body frame)."""
    fit_com: bool = False
    """Fit the planar centre of mass too. Off by default: on slides it is absorbed by the fitted initial spin
    (measured: 6–8 mm off with a ± 1 mm interval), and the pushes' replay is too rough to read it (docs/decisions.md,
    "System identification")."""
    fit_mass: bool = False
    """Fit the mass scale too (the pushes' kinematics barely depend on it: see the module docstring)."""
    grid: int = 9
    """Before the least squares, a coarse search: this many friction scales (geometric over the bounds), then a
    `grid` × `grid` square of centre-of-mass offsets over ± `com_bound` around 0, 5 × 5 at most — the residual of
    contact-rich replays is rough at small scales, so a local search alone stops in a nearby dip (0 or 1: none)."""
    max_iters: int = 25
    """Least-squares iterations at most."""
    diff_step: float = 0.02
    """Finite-difference step of the least squares' Jacobian, relative (scipy's `diff_step`)."""
    interval_step: float = 0.15
    """Step of the central differences whose Jacobian gives the intervals, in the parameters' units (scale; cm for
    the centre of mass): wide, so the slope measured is the residual's trend rather than the contact replay's
    roughness at small scales (which a small step reads as a steep slope, and so as a falsely narrow interval)."""
    arm: Literal["kinematic", "servo"] = "kinematic"
    """How the replayed arm follows the measured joints: "kinematic" — every physics step's joint positions and
    velocities are set from the readings (a rigid arm); "servo" — the twin's own joint servos track the readings."""
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    """The replay twin's physics (the online twin's by default)."""

    def __post_init__(self) -> None:
        if not (self.window > 0 and self.stride > 0 and self.sigma > 0 and self.yaw_length > 0):
            raise ValueError("window, stride, sigma and yaw_length must be > 0")
        if self.sample_every < 1 or self.max_iters < 1:
            raise ValueError("sample_every and max_iters must be ≥ 1")
        for name in ("friction_bounds", "mass_bounds"):
            lo, hi = getattr(self, name)
            if not 0 < lo < 1 < hi:
                raise ValueError(f"{name}: need 0 < low < 1 < high, got {(lo, hi)}")


@dataclass(frozen=True)
class Window:
    """One replayed window: frames `start` … `start + frames` of recording `recording`; `objects` moved in it."""

    recording: int
    start: int
    frames: int
    objects: tuple[int, ...]
    slide: bool = False
    """A free slide: its objects' initial velocities are fitted too."""


@dataclass(frozen=True)
class ObjectEstimate:
    """One object's identified dynamics, scales relative to the scene's description, with 95 % half-widths
    (inf: the data does not determine it; NaN: not fitted)."""

    name: str
    friction_scale: float
    friction_ci: float
    mass_scale: float
    mass_ci: float
    com_offset: tuple[float, float, float]
    """Body frame, m (z not identified: 0)."""
    com_ci: tuple[float, float]
    """Half-widths of x and y, m."""
    windows: int
    """Windows in which it moved."""

    def as_draw(self) -> ObjectDraw:
        """These dynamics as an `ObjectDraw` (what `ObjectDynamics.apply` sets on a model)."""
        return ObjectDraw(self.name, self.friction_scale, self.mass_scale, self.com_offset)


@dataclass(frozen=True)
class ObjectFit:
    """The result: estimates per object fitted, residuals before and after (RMS, in units of `sigma`)."""

    objects: tuple[ObjectEstimate, ...]
    rms_before: float
    rms_after: float
    windows: int
    evaluations: int
    seconds: float
    residual_before: np.ndarray
    """The residual vector at the scene's nominal dynamics (units of `sigma`)."""
    residual_after: np.ndarray


def find_windows(recordings: list[Recording], config: ObjectFitConfig, scene: SceneSpec | None = None) -> list[Window]:
    """The windows worth replaying (`config.windows`; "slides" needs the `scene`)."""
    if config.windows == "slides":
        if scene is None:
            raise ValueError("find_windows: slides need the scene (the pusher and the objects' shapes)")
        return find_slides(recordings, scene, config)
    return find_pushes(recordings, config)


def find_slides(recordings: list[Recording], scene: SceneSpec, config: ObjectFitConfig) -> list[Window]:
    """Free slides: from the first frame an object moves at ≥ `slide_speed` with the tip ≥ `clearance` from it, on
    while the tip stays clear and no frame is desynced, to when it has stopped (3 frames under a fifth of that speed)
    or `window` s; at least 4 frames and `min_motion` of travel."""
    from realissim.twin.kinematics import PusherIK

    ik = PusherIK(scene)
    rod = scene.robot.pusher.radius if scene.robot.pusher else 0.0
    out = []
    for r, rec in enumerate(recordings):
        dt = rec.dt
        tips = np.array([ik.tip_position(q) for q in rec.arm_trajectory()[1]])  # (at the objects' times)
        speed = np.linalg.norm(np.gradient(rec.object_pos[..., :2], axis=0), axis=-1) / dt  # (T, K)
        longest = max(4, round(config.window / dt))
        for k, obj in enumerate(scene.objects):
            centres = np.einsum("tij,nj->tni", quat_to_mat(rec.object_quat[:, k]), np.asarray(obj.spheres.centers))
            centres += rec.object_pos[:, k, None, :]
            gap = np.linalg.norm(centres - tips[:, None, :], axis=-1) - np.asarray(obj.spheres.radii) - rod
            clear = (gap.min(axis=1) >= config.clearance) & ~rec.desynced
            free = clear & (speed[:, k] >= config.slide_speed)
            t = 0
            while t < len(rec.time) - 4:
                if not free[t] or (t > 0 and free[t - 1]):
                    t += 1
                    continue
                end, still = t, 0
                while end + 1 < len(rec.time) and clear[end + 1] and end - t < longest and still < 3:
                    end += 1
                    still = still + 1 if speed[end, k] < config.slide_speed / 5 else 0
                travel = float(np.linalg.norm(rec.object_pos[end, k, :2] - rec.object_pos[t, k, :2]))
                if end - t >= 4 and travel >= config.min_motion:
                    out.append(Window(r, t, end - t, (k,), slide=True))
                t = end + 1
    return out


def find_pushes(recordings: list[Recording], config: ObjectFitConfig) -> list[Window]:
    """The windows worth replaying: every `stride` s, `window` s long, not crossing a desynced frame, in which some
    object moved at least `min_motion` (position, or yaw × `yaw_length`) at some frame from the start."""
    out = []
    for r, rec in enumerate(recordings):
        dt = rec.dt
        n, step = max(2, round(config.window / dt)), max(1, round(config.stride / dt))
        xy = rec.object_pos[..., :2]
        yaw = quat_yaw(rec.object_quat)
        for k0 in range(0, len(rec.time) - n, step):
            if rec.desynced[k0 : k0 + n + 1].any():
                continue
            moved = np.linalg.norm(xy[k0 : k0 + n + 1] - xy[k0], axis=-1)
            turned = np.abs(_wrap(yaw[k0 : k0 + n + 1] - yaw[k0])) * config.yaw_length
            objects = tuple(int(k) for k in np.flatnonzero(np.maximum(moved, turned).max(axis=0) >= config.min_motion))
            if objects:
                out.append(Window(r, k0, n, objects))
    return out


class WindowReplay:
    """Replays windows of recordings in one twin (the scene's model) under candidate dynamics."""

    def __init__(self, scene: SceneSpec, recordings: list[Recording], config: ObjectFitConfig) -> None:
        self.config = config
        self.twin = TwinPhysics(scene, config.physics)
        self.model, self.data, self.layout = self.twin.model, self.twin.data, self.twin.layout
        self.names = self.layout.object_names
        self.dynamics = ObjectDynamics(self.model, self.names)
        self.recordings = recordings
        self._arms = [rec.arm_trajectory() for rec in recordings]
        self._draws: tuple[ObjectDraw, ...] | None = None
        """The dynamics the model holds now (None: its described ones)."""
        self.substeps = config.physics.substeps
        self.h = self.model.opt.timestep
        for rec in recordings:
            if abs(rec.dt - self.twin.dt) > 1e-6:
                raise SysidError(
                    f"episode {rec.episode}: frame period {rec.dt:.5f} s, the twin's is {self.twin.dt:.5f} s"
                )

    def restore(self) -> None:
        """Return the replay's model to the scene's described dynamics."""
        self.dynamics.restore()
        self._draws = None

    def run(
        self, window: Window, draws: tuple[ObjectDraw, ...], planar_velocity: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Replay `window` under `draws`: the objects' planar positions (n, K, 2) m and yaws (n, K) rad after each of
        its frames start + 1 … start + n (compare with the recording's at those frames). `planar_velocity` (K, 3):
        each object's initial (vx, vy m/s, ωz rad/s, world frame) instead of the recorded velocity."""
        rec = self.recordings[window.recording]
        if draws != self._draws:  # (setting dynamics recomputes the model's constants: once per candidate)
            self.dynamics.apply(draws)
            self._draws = draws
        m, d, lay = self.model, self.data, self.layout
        mujoco.mj_resetData(m, d)
        k0 = window.start
        t_arm, q_arm = self._arms[window.recording]
        d.qpos[lay.object_qpos[:, 0:3]] = rec.object_pos[k0]
        quat = rec.object_quat[k0] / np.linalg.norm(rec.object_quat[k0], axis=-1, keepdims=True)
        d.qpos[lay.object_qpos[:, 3:7]] = quat
        linvel, angvel = rec.object_linvel[k0].copy(), rec.object_angvel[k0].copy()
        if planar_velocity is not None:
            linvel[:, :2], linvel[:, 2] = planar_velocity[:, :2], 0.0
            angvel[:, :2], angvel[:, 2] = 0.0, planar_velocity[:, 2]
        d.qvel[lay.object_dof[:, 0:3]] = linvel
        d.qvel[lay.object_dof[:, 3:6]] = np.einsum("kji,kj->ki", quat_to_mat(quat), angvel)
        d.time = float(rec.time[k0])
        xy = np.empty((window.frames, len(self.names), 2))
        yaw = np.empty((window.frames, len(self.names)))
        q0 = _interp(t_arm, q_arm, float(rec.time[k0]))
        d.qpos[lay.robot_qpos] = q0
        d.qvel[lay.robot_dof] = (_interp(t_arm, q_arm, float(rec.time[k0]) + self.h) - q0) / self.h
        mujoco.mj_forward(m, d)
        if window.slide:  # (the pusher is clear of the objects throughout: it holds where it was)
            d.qvel[lay.robot_dof] = 0.0
            d.ctrl[lay.actuators], d.ctrl[lay.dampers] = q0, 0.0
        frame = self.substeps * self.h
        for j in range(window.frames):
            t0 = float(rec.time[k0 + j])
            if window.slide:
                mujoco.mj_step(m, d, nstep=self.substeps)
            elif self.config.arm == "servo":
                qa, qb = _interp(t_arm, q_arm, t0), _interp(t_arm, q_arm, t0 + frame)
                d.ctrl[lay.actuators], d.ctrl[lay.dampers] = qb, (qb - qa) / frame
                mujoco.mj_step(m, d, nstep=self.substeps)
            else:
                for s in range(self.substeps):
                    qa, qb = _interp(t_arm, q_arm, t0 + s * self.h), _interp(t_arm, q_arm, t0 + (s + 1) * self.h)
                    qd = (qb - qa) / self.h
                    d.qpos[lay.robot_qpos], d.qvel[lay.robot_dof] = qa, qd
                    d.ctrl[lay.actuators], d.ctrl[lay.dampers] = qb, qd
                    mujoco.mj_step(m, d)
            xy[j] = d.qpos[lay.object_qpos[:, 0:2]]
            yaw[j] = quat_yaw(d.qpos[lay.object_qpos[:, 3:7]])
        return xy, yaw

    def residual(self, windows: list[Window], draws: tuple[ObjectDraw, ...]) -> np.ndarray:
        """The stacked residual of `windows` under `draws` (units of `sigma`): per window, per compared frame and
        moving object, the planar position error (2) and yaw error × `yaw_length` (1)."""
        parts = [self._slide_residual(w, draws) if w.slide else self._window_residual(w, draws) for w in windows]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _window_residual(
        self, w: Window, draws: tuple[ObjectDraw, ...], planar_velocity: np.ndarray | None = None
    ) -> np.ndarray:
        c = self.config
        xy, yaw = self.run(w, draws, planar_velocity)
        rec = self.recordings[w.recording]
        frames = np.arange(c.sample_every - 1, w.frames, c.sample_every) if not w.slide else np.arange(w.frames)
        ks = w.start + 1 + frames
        objs = list(w.objects)
        dxy = xy[frames][:, objs] - rec.object_pos[ks][:, objs, :2]
        dyaw = _wrap(yaw[frames][:, objs] - quat_yaw(rec.object_quat[ks][:, objs])) * c.yaw_length
        return np.concatenate([dxy.reshape(-1), dyaw.reshape(-1)]) / c.sigma

    def _slide_residual(self, w: Window, draws: tuple[ObjectDraw, ...]) -> np.ndarray:
        """A slide's residual with its objects' initial planar velocities fitted (from the recorded ones)."""
        from scipy.optimize import least_squares

        rec = self.recordings[w.recording]
        objs = list(w.objects)
        base = np.concatenate([rec.object_linvel[w.start, :, :2], rec.object_angvel[w.start, :, 2:3]], axis=1)

        def velocity(x: np.ndarray) -> np.ndarray:
            v = base.copy()
            v[objs] = x.reshape(len(objs), 3)
            return v

        fit = least_squares(lambda x: self._window_residual(w, draws, velocity(x)), base[objs].reshape(-1),
                            x_scale=np.tile([0.1, 0.1, 1.0], len(objs)), diff_step=1e-4, max_nfev=40)  # fmt: skip
        return np.asarray(fit.fun)


def fit_objects(
    scene: SceneSpec, recordings: list[Recording], config: ObjectFitConfig = ObjectFitConfig()
) -> ObjectFit:
    """Identify each moving object's friction scale and planar centre-of-mass offset (and with `config.fit_mass`
    its mass scale) from `recordings` (see the module docstring). Raises `SysidError` when no window shows an
    object moving (the episodes are too still to identify anything) or an estimate ends at its bound."""
    t_start = time.perf_counter()
    windows = find_windows(recordings, config, scene)
    if not windows:
        raise SysidError(
            f"no object moved ≥ {1e3 * config.min_motion:.0f} mm within {config.window:g} s in any of "
            f"{len(recordings)} episode(s) outside desynced frames: too still to identify object dynamics"
        )
    replay = WindowReplay(scene, recordings, config)
    moving = sorted({k for w in windows for k in w.objects})
    params = sysid.ParameterDict()
    for k in moving:
        name = replay.names[k]
        params.add(sysid.Parameter(f"{name}.friction_scale", 1.0, *config.friction_bounds))
        if config.fit_mass:
            params.add(sysid.Parameter(f"{name}.mass_scale", 1.0, *config.mass_bounds))
        if config.fit_com:
            b = config.com_bound / COM_UNIT
            params.add(sysid.Parameter(f"{name}.com_xy_cm", [0.0, 0.0], [-b, -b], [b, b]))
    evaluations = 0

    def draws_of(p: sysid.ParameterDict) -> tuple[ObjectDraw, ...]:
        out = []
        for k in moving:
            name = replay.names[k]
            mass = float(p[f"{name}.mass_scale"].value[0]) if config.fit_mass else 1.0
            cx, cy = (float(v) * COM_UNIT for v in p[f"{name}.com_xy_cm"].value) if config.fit_com else (0.0, 0.0)
            out.append(ObjectDraw(name, float(p[f"{name}.friction_scale"].value[0]), mass, (cx, cy, 0.0)))
        return tuple(out)

    def residual_fn(x: np.ndarray, p: sysid.ParameterDict) -> tuple[list[np.ndarray], None, None]:
        nonlocal evaluations
        p.update_from_vector(np.asarray(x, dtype=np.float64))
        evaluations += 1
        return [replay.residual(windows, draws_of(p))], None, None

    before = replay.residual(windows, draws_of(params))
    log.info("object fit: %d windows in %d episode(s), %d residuals, RMS %.2f σ at the nominal dynamics",
             len(windows), len(recordings), before.size, _rms(before))  # fmt: skip
    if config.grid > 1:
        _coarse_search(params, [replay.names[k] for k in moving], lambda p: _rms(residual_fn(p.as_vector(), p)[0][0]),
                       config)  # fmt: skip
    fitted = params
    if params.size > len(moving) or config.grid <= 1:  # (more than a friction per object: refine them together)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # (the backend prints its iterations whatever it is asked)
            fitted, _ = sysid.optimize(params, residual_fn, optimizer="scipy", verbose=False,
                                       max_iters=config.max_iters, diff_step=config.diff_step)  # fmt: skip
        log.debug("least squares:\n%s", printed.getvalue())
    after = replay.residual(windows, draws_of(fitted))
    jac = _secant_jacobian(fitted, lambda p: residual_fn(p.as_vector(), p)[0][0], config.interval_step)
    _, half = sysid.calculate_intervals([after], jac)
    half = np.asarray(half, dtype=np.float64)
    replay.restore()
    estimates = []
    index = 0
    for k in moving:
        name = replay.names[k]
        draw = next(d for d in draws_of(fitted) if d.name == name)
        f_ci = float(half[index])
        index += 1
        m_ci = math.nan
        if config.fit_mass:
            m_ci = float(half[index])
            index += 1
        c_ci = (math.nan, math.nan)
        if config.fit_com:
            c_ci = (float(half[index]) * COM_UNIT, float(half[index + 1]) * COM_UNIT)
            index += 2
        estimates.append(ObjectEstimate(name, draw.friction_scale, f_ci, draw.mass_scale, m_ci, draw.com_offset, c_ci,
                                        sum(k in w.objects for w in windows)))  # fmt: skip
    _check_bounds(fitted)
    fit = ObjectFit(tuple(estimates), _rms(before), _rms(after), len(windows), evaluations,
                    time.perf_counter() - t_start, before, after)  # fmt: skip
    log.info("object fit: RMS %.2f → %.2f σ in %d evaluations, %.1f s", fit.rms_before, fit.rms_after, evaluations,
             fit.seconds)  # fmt: skip
    return fit


def _coarse_search(
    params: sysid.ParameterDict, names: list[str], cost: Callable[[sysid.ParameterDict], float], config: ObjectFitConfig
) -> None:
    """Set each object's friction scale, then its centre of mass, to the best of a coarse grid (in place), the others
    held."""
    lo, hi = config.friction_bounds
    frictions = np.geomspace(lo * 1.05, hi / 1.05, config.grid)
    n = min(config.grid, 5)
    b = 0.8 * config.com_bound / COM_UNIT
    offsets = [(x, y) for x in np.linspace(-b, b, n) for y in np.linspace(-b, b, n)]
    for name in names:
        for key, values in ((f"{name}.friction_scale", [[f] for f in frictions]), (f"{name}.com_xy_cm", offsets)):
            if key not in params:
                continue
            p = params[key]
            best = (cost(params), p.as_vector().copy())
            for v in values:
                p.update_from_vector(np.asarray(v, dtype=np.float64))
                c = cost(params)
                if c < best[0]:
                    best = (c, p.as_vector().copy())
            p.update_from_vector(best[1])
            if key.endswith("friction_scale"):  # refine between the grid's neighbours (a 1-D search is robust to
                # the residual's roughness, where finite differences are not)
                from scipy.optimize import minimize_scalar

                f0 = float(best[1][0])
                ratio = float(frictions[1] / frictions[0])

                def at(f: float, p: sysid.Parameter = p) -> float:
                    p.update_from_vector(np.array([f]))
                    return cost(params)

                lo_f, hi_f = max(f0 / ratio, lo), min(f0 * ratio, hi)
                found = minimize_scalar(at, bounds=(lo_f, hi_f), method="bounded", options={"xatol": 2e-3 * f0})
                p.update_from_vector(np.array([found.x if found.fun <= best[0] else f0]))
                best = (min(found.fun, best[0]), p.as_vector().copy())
            log.info("object fit: coarse %s = %s (RMS %.3f σ)", key, np.round(best[1], 3).tolist(), best[0])


def _secant_jacobian(
    params: sysid.ParameterDict, residual: Callable[[sysid.ParameterDict], np.ndarray], step: float
) -> np.ndarray:
    """(n_residuals, n_params): central differences of `residual` at `params` with ± `step` (clipped to the bounds,
    one-sided there); `params` is left as it was."""
    x0 = params.as_vector().copy()
    lo, hi = params.get_bounds()
    columns = []
    for i in range(x0.size):
        a, b = x0.copy(), x0.copy()
        a[i], b[i] = max(x0[i] - step, lo[i]), min(x0[i] + step, hi[i])
        params.update_from_vector(b)
        rb = residual(params)
        params.update_from_vector(a)
        ra = residual(params)
        columns.append((rb - ra) / (b[i] - a[i]))
    params.update_from_vector(x0)
    return np.stack(columns, axis=1)


def _check_bounds(params: sysid.ParameterDict) -> None:
    for name, p in params.items():
        lo, hi = p.get_bounds()
        v = p.as_vector()
        span = hi - lo
        at = (v - lo <= 1e-3 * span) | (hi - v <= 1e-3 * span)
        if at.any():
            raise SysidError(
                f"{name} ended at its bound ({v.tolist()} in [{lo.tolist()}, {hi.tolist()}]): the world is outside "
                "the range searched or the data does not determine it; widen the bounds or record more pushes"
            )


def _interp(t: np.ndarray, q: np.ndarray, at: float) -> np.ndarray:
    """q (T, J) linearly interpolated at time `at` (held beyond the ends)."""
    i = int(np.clip(np.searchsorted(t, at) - 1, 0, len(t) - 2))
    u = min(max((at - t[i]) / (t[i + 1] - t[i]), 0.0), 1.0)
    return q[i] + u * (q[i + 1] - q[i])


def _wrap(a: np.ndarray) -> np.ndarray:
    return np.arctan2(np.sin(a), np.cos(a))


def _rms(r: np.ndarray) -> float:
    return float(np.sqrt(np.mean(r * r))) if r.size else math.nan
