"""`FlowPolicy`: a trained flow policy, loaded from a checkpoint (its EMA weights), as a `Policy`.

It takes single or batched observations (one chunk per environment, sampled in one batched pass) and returns
`ActionChunk`s of m waypoints over H s. It refuses what it cannot act on safely: a checkpoint that is
corrupt, of another observation representation or of an incompatible scene (`CheckpointError` naming the
problem), an observation with NaN (ValueError naming the field) — and it never returns a non-finite chunk.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import torch

from realissim.assets import panda
from realissim.envs.env import EnvConfig
from realissim.learn.checkpoint import CheckpointError, load_checkpoint
from realissim.learn.config import LEGACY_MODEL_FIELDS, ModelConfig
from realissim.learn.model import FilmVelocity, FlowPolicyModel, build_model
from realissim.learn.observations import require_finite
from realissim.learn.unet import FilmForward
from realissim.policy.base import ActionChunk, Observation
from realissim.policy.factory import ObservationNeeds
from realissim.spec.codec import UNDESCRIBED_OK, first_difference, from_dict
from realissim.spec.errors import SpecError
from realissim.spec.io import scene_from_dict, scene_to_dict
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import ChainKinematics, TipHold, robot_only_model
from realissim.util.torch_threads import torch_settings


def batched(observation: Observation) -> Observation:
    """`observation` with a leading batch axis of 1 (a batched one unchanged)."""
    if observation.batch_size is not None:
        return observation
    one = {
        name: np.asarray(getattr(observation, name))[None]
        for name in ("time", "q", "qd", "q_des", "object_pos", "object_quat")
    }
    return Observation(
        **one,
        images={k: v[None] for k, v in observation.images.items()},
        real_images={k: v[None] for k, v in observation.real_images.items()},
    )


log = logging.getLogger(__name__)


def limit_rate(q: np.ndarray, start: np.ndarray, max_step: np.ndarray) -> np.ndarray:
    """Waypoints (B, m, J) rad with each joint's change from the previous waypoint (the first: from `start`
    (B, J)) clipped to ±`max_step` (J,) rad: a joint follows its requested path as fast as it may."""
    out = np.empty_like(q)
    prev = start
    for i in range(q.shape[1]):
        prev = prev + np.clip(q[:, i] - prev, -max_step, max_step)
        out[:, i] = prev
    return out


TIP_SPEED_MARGIN = 1.25
"""The policy's tip may move up to this × the demonstrations' (99.9th percentile) tip speed."""


class TipSpeedLimit:
    """Slows waypoints whose tip would move faster than the demonstrations' tip ever did."""

    def __init__(self, scene: SceneSpec) -> None:
        self.chain = ChainKinematics(robot_only_model(scene), panda.TIP_SITE)

    def limit(self, q: np.ndarray, start: np.ndarray, max_step: float) -> np.ndarray:
        """Waypoints (B, m, J) rad whose tips move at most `max_step` m from one waypoint to the next (the first
        from the tip at `start` (B, J)): a longer step's joint change is scaled down (and the rest of the chunk
        follows from there), so the path is kept and only its pace is slowed.

        All tips are computed in one call first; only the chunks with a fast step are walked waypoint by
        waypoint, from their batch's first fast step (a chunk within the limit, the usual case, costs one
        forward-kinematics call for the whole batch)."""
        q = np.asarray(q, dtype=np.float64)
        start = np.asarray(start, dtype=np.float64)
        b, m, j = q.shape
        start_tip = self.chain.forward(start)[0]
        tips = self.chain.forward(q.reshape(b * m, j))[0].reshape(b, m, 3)
        before = np.concatenate([start_tip[:, None], tips[:, :-1]], axis=1)
        fast = np.linalg.norm(tips - before, axis=-1) > max_step  # (B, m)
        out = q.copy()
        rows = np.flatnonzero(fast.any(axis=1))
        if len(rows) == 0:
            return out
        first = int(fast[rows].argmax(axis=1).min())
        prev_q = start[rows] if first == 0 else q[rows, first - 1]
        prev_tip = start_tip[rows] if first == 0 else tips[rows, first - 1]
        for i in range(first, m):
            target, tip = q[rows, i], tips[rows, i]  # copies (fancy indexing): safe to rescale in place
            d = np.linalg.norm(tip - prev_tip, axis=-1)
            over = d > max_step
            if np.any(over):
                delta, scale = target[over] - prev_q[over], max_step / d[over]
                for _ in range(3):  # the tip is not linear in q: rescale until the step is within the limit
                    target[over] = prev_q[over] + delta * scale[:, None]
                    tip[over] = self.chain.forward(target[over])[0]
                    moved = np.linalg.norm(tip[over] - prev_tip[over], axis=-1)
                    if np.all(moved <= max_step):
                        break
                    scale = scale * np.minimum(1.0, max_step / np.maximum(moved, 1e-12)) * 0.999
            out[rows, i] = target
            prev_q, prev_tip = target, tip
        return out


class FlowPolicy:
    """Acts with `model` (eval mode, EMA weights) trained in `scene`; chunks sampled with K = `steps` (None:
    the trained config's) Euler steps from noise drawn by a generator seeded with `seed` at every `reset`,
    on `threads` torch threads. With `rate_limit`, consecutive waypoints (from the twin's current target
    `Observation.q_des`) never ask a joint to move faster than its velocity limit: an undertrained or confused
    network cannot make the twin's arm jump (the demonstrations respect the limits, so a good chunk is
    unchanged). With `compile`, the velocity network is traced and frozen at the first `act`
    (its weights are captured then: change the model's weights afterwards and build a new policy). `path`
    names the checkpoint in errors."""

    def __init__(
        self,
        model: FlowPolicyModel,
        scene: SceneSpec,
        *,
        steps: int | None = None,
        seed: int = 0,
        threads: int = 1,
        tip_floor: float | None = None,
        tip_speed: float | None = None,
        rate_limit: bool = True,
        compile: bool = True,
        path: str | Path = "<model>",
    ) -> None:
        if steps is not None and steps < 1:
            raise ValueError(f"steps: must be ≥ 1, got {steps}")
        self.tip_floor = tip_floor
        self._hold = TipHold(scene) if tip_floor is not None and scene.robot.pusher is not None else None
        self.model, self.scene, self.path = model.eval(), scene, Path(path)
        self.config: ModelConfig = model.config
        self.steps, self.seed, self.threads = steps or self.config.flow.steps, seed, threads
        self._lower = np.array([j.lower for j in scene.robot.joints])
        self._upper = np.array([j.upper for j in scene.robot.joints])
        self._vmax = np.array([j.velocity for j in scene.robot.joints]) if rate_limit else None
        self.tip_speed = tip_speed
        self._tips = TipSpeedLimit(scene) if tip_speed is not None and scene.robot.pusher is not None else None
        self._noise = torch.Generator().manual_seed(seed)
        self.compile = compile
        self._traced: torch.jit.ScriptModule | None = None

    @staticmethod
    def load(
        path: str | Path,
        *,
        obs: str | None = None,
        scene: SceneSpec | None = None,
        steps: int | None = None,
        seed: int = 0,
        threads: int = 1,
        hold: bool = True,
        rate_limit: bool = True,
    ) -> FlowPolicy:
        """The policy in checkpoint `path`. With `obs`, it must have been trained on that representation; with
        `scene`, the scene it will act in must agree with its training scene where the policy depends on it.
        CheckpointError naming the file and the problem otherwise. With `hold`, every waypoint is projected
        onto the demonstrations' pushing posture (rod vertical, tip no lower than the lowest tip of the
        training data; `TipHold`)."""
        path = Path(path)
        meta, tensors = load_checkpoint(path)
        try:
            config = from_dict(ModelConfig, {**LEGACY_MODEL_FIELDS, **meta["config"]["model"]})
            trained = scene_from_dict(meta["scene"])
        except (KeyError, TypeError, SpecError) as err:
            raise CheckpointError(f"{path}: malformed meta: {err}") from None
        if obs is not None and obs != config.obs:
            raise CheckpointError(f"{path}: trained on {config.obs!r} observations, not {obs!r}")
        try:
            model = build_model(config, trained)
            model.load_state_dict(tensors["ema"])
        except (ValueError, RuntimeError) as err:
            raise CheckpointError(f"{path}: weights do not fit the model its config describes: {err}") from None
        floor = meta.get("tip_floor") if hold else None
        speed = meta.get("tip_speed") if rate_limit else None
        policy = FlowPolicy(
            model,
            trained,
            steps=steps,
            seed=seed,
            threads=threads,
            tip_floor=floor,
            tip_speed=speed,
            rate_limit=rate_limit,
            path=path,
        )
        if scene is not None:
            policy.check_scene(scene)
        return policy

    @property
    def needs(self) -> ObservationNeeds:
        """The virtual cameras (and their size) this policy observes, and whether it observes the real cameras'
        frames (`real`: online only)."""
        encoder = self.model.encoder
        return ObservationNeeds(encoder.cameras, encoder.image_size, self.config.obs == "real")

    def env_config(self, base: EnvConfig = EnvConfig()) -> EnvConfig:
        """`base` observing what this policy needs (`EnvConfig.observing`)."""
        return base.observing(self.needs)

    def check_scene(self, scene: SceneSpec) -> None:
        """CheckpointError naming the first difference between `scene` and the training scene in the parts
        the policy depends on (its encoder's `scene_parts`: robot, objects, goals; cameras for images)."""
        a, b = scene_to_dict(self.scene), scene_to_dict(scene)
        for part in self.model.encoder.scene_parts:
            where = first_difference(a.get(part), b.get(part), f"scene.{part}", ("trained", "given"), UNDESCRIBED_OK)
            if where is not None:
                raise CheckpointError(f"{self.path}: incompatible scene: {where}")

    def _compiled(self, noise: torch.Tensor, inputs: dict[str, torch.Tensor]) -> FilmVelocity | None:
        """The velocity network given its FiLM terms' two parts (`unet.FilmForward`), traced and frozen for
        inference (built once, on the first call; any batch size): the same numbers to float rounding, and about
        half the time of the module at batch 1 on this CPU, where the module's Python overhead dominates. None
        (the module itself) if tracing fails."""
        if self._traced is None and self.compile:
            try:
                net = self.model.velocity
                cond_film, time_film = net.film_cond(self.model.condition(inputs)), net.film_time(torch.ones(1))
                # The shape check in forward_film is constant for these shapes; torch.jit is deprecated in favour
                # of torch.compile, which needs a C++ toolchain at run time (docs/decisions.md, "Flow policy").
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", torch.jit.TracerWarning)
                    warnings.simplefilter("ignore", DeprecationWarning)
                    traced = torch.jit.trace(FilmForward(net).eval(), (noise, cond_film, time_film), check_trace=False)
                    self._traced = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
            except Exception as err:  # tracing is an optimisation: fall back to the module
                log.warning("%s: could not trace the velocity network (%s); using the module", self.path, err)
                self.compile = False
        return self._traced

    def reset(self) -> None:
        """Re-seed the noise: every episode samples the same noise sequence (reproducible evaluation)."""
        self._noise.manual_seed(self.seed)

    @torch.inference_mode()
    def act(self, observation: Observation) -> ActionChunk:
        """A chunk ((m, J) and (m,), or (B, m, J) and (B, m) for a batched observation): q′ clipped to the
        joint limits, progress to [0, 1]. ValueError naming a non-finite observation field; RuntimeError
        (nothing returned) if the network's chunk is not finite."""
        single = observation.batch_size is None
        require_finite(observation, ("q_des",))
        observation = batched(observation)
        inputs = self.model.encoder.observation_inputs(observation)
        b = next(iter(inputs.values())).shape[0]
        with torch_settings(self.threads):
            noise = torch.randn((b, self.config.waypoints, self.model.action_dim), generator=self._noise)
            reference = torch.from_numpy(np.asarray(observation.q_des, dtype=np.float32))
            tensors = {k: torch.from_numpy(np.asarray(v)) for k, v in inputs.items()}
            x = self.model.sample(tensors, reference, noise, self.steps, self._compiled(noise, tensors))
        chunk = x.numpy().astype(np.float64)
        if not np.all(np.isfinite(chunk)):
            raise RuntimeError(f"{self.path}: the network returned a non-finite chunk; refusing to send it")
        q = np.clip(chunk[..., :-1], self._lower, self._upper)
        if self._hold is not None and self.tip_floor is not None:
            q = self._hold.project(q, self.tip_floor)
        if self._vmax is not None:
            q = limit_rate(
                q, np.asarray(observation.q_des, dtype=np.float64), self._vmax * self.config.horizon / q.shape[1]
            )
        if self._tips is not None and self.tip_speed is not None:
            q = self._tips.limit(q, np.asarray(observation.q_des, dtype=np.float64),
                                 TIP_SPEED_MARGIN * self.tip_speed * self.config.horizon / q.shape[1])  # fmt: skip
        progress = np.clip(chunk[..., -1], 0.0, 1.0)
        return ActionChunk(q[0] if single else q, progress[0] if single else progress, self.config.horizon)
