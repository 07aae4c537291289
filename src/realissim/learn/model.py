"""`FlowPolicyModel`: observation encoder, normalisers and velocity network as one module, so that one
state dict (saved in every checkpoint) holds everything a trained policy needs besides its config.

Data flow: inputs (B, ...) → normalise the low-dimensional ones → encoder → features c (B, D);
chunk a (B, m, J + 1) in data units → (relative actions: minus the reference q′ (B, J) on the joints) →
normalised chunk; flow matching on the normalised chunk given c; sampling runs the same way back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from realissim.learn.config import ModelConfig
from realissim.learn.flow import euler_times, flow_loss
from realissim.learn.layers import Mish
from realissim.learn.normalizer import Normalizer
from realissim.learn.observations import ObservationEncoder, StateEncoder, make_encoder, state_from_pose
from realissim.learn.unet import ConditionalUNet1D, FilmForward
from realissim.spec.scene import SceneSpec

FilmVelocity = Callable[[Tensor, Sequence[Tensor], Sequence[Tensor]], Tensor]
"""The velocity network given the two parts of its FiLM terms: (x (B, m, A), the observation features' part
(B, 2 C) per block, the flow time's part (1, 2 C) per block) → (B, m, A) (`unet.FilmForward`)."""


_STATE_ONLY = ("state_tip", "state_hidden")
_IMAGE_ONLY = ("image_hidden", "wrist_lift", "camera", "image_size", "vision", "aux_object")


def model_fields_in_use(model: dict[str, object]) -> dict[str, object]:
    """A stored or given model config (as a dict) without the fields its representation ignores (the state
    encoder's for image kinds unless they act `via_pose`, the image encoder's for `state`): what two configs
    must agree on to be the same model, e.g. to resume a run after a default of an unused field changed."""
    if model.get("obs") == "state":
        unused: tuple[str, ...] = _IMAGE_ONLY
    else:
        unused = () if model.get("via_pose") else _STATE_ONLY
    return {k: v for k, v in model.items() if k not in unused}


class FlowPolicyModel(nn.Module):
    """Chunks of `action_dim` values (J joints + progress) conditioned on `encoder`'s features."""

    def __init__(
        self,
        config: ModelConfig,
        encoder: ObservationEncoder,
        action_dim: int,
        pose_state: StateEncoder | None = None,
    ) -> None:
        super().__init__()
        self.config, self.encoder, self.action_dim = config, encoder, action_dim
        self.obs_norm = nn.ModuleDict({k: Normalizer(d, config.obs_norm) for k, d in encoder.input_dims().items()})
        self.action_norm = Normalizer(action_dim, config.action_norm)
        self.pose_state = pose_state
        """`via_pose`: the state encoder fed by the estimated (acting) or recorded (training) pose."""
        self.policy_frozen = False
        """Whether `freeze_policy` was called (training then skips the flow loss)."""
        if config.via_pose:
            if pose_state is None:
                raise ValueError("via_pose: the model needs the state encoder its estimate feeds (build_model)")
            if pose_state.tip is not None and getattr(encoder, "tip", None) is None:
                raise ValueError("via_pose: the image encoder must provide the tip position for the tip features")
            self.state_norm = Normalizer(pose_state.state_dim, config.obs_norm)
        cond_dim = pose_state.feature_dim if config.via_pose and pose_state is not None else encoder.feature_dim
        self.velocity = ConditionalUNet1D(action_dim, cond_dim, config.network)
        self.aux_head: nn.Module | None = None
        if config.aux_object > 0:
            if "object" not in encoder.targets:
                raise ValueError(f"aux_object: the {config.obs!r} encoder provides no object-pose targets")
            width = 4 * int(encoder.objects)
            self.aux_norm = Normalizer(width, config.obs_norm)
            self.aux_head = nn.Sequential(nn.Linear(encoder.feature_dim, 256), Mish(), nn.Linear(256, width))

    def freeze_policy(self) -> None:
        """`via_pose`: stop training the velocity network, the state encoder and their normalisers (adopted from a
        trained state policy); training then computes the pose loss alone (the flow loss would reach nothing
        trainable: teacher forcing keeps it off the image encoder)."""
        if self.pose_state is None:
            raise ValueError("freeze_policy: only for a via_pose model")
        for module in (self.velocity, self.pose_state, self.state_norm, self.action_norm):
            module.requires_grad_(False)
        self.policy_frozen = True

    def to_generated(self, actions: Tensor, reference: Tensor) -> Tensor:
        """Chunks (B, m, A) in data units → what the network generates (relative: joints minus `reference`
        (B, J) q′), still unnormalised."""
        if self.config.actions == "absolute":
            return actions
        out = actions.clone()
        out[..., :-1] -= reference[:, None, :].to(actions.dtype)
        return out

    def from_generated(self, generated: Tensor, reference: Tensor) -> Tensor:
        """The inverse of `to_generated`."""
        if self.config.actions == "absolute":
            return generated
        out = generated.clone()
        out[..., :-1] += reference[:, None, :].to(generated.dtype)
        return out

    def fit_normalizers(self, inputs: Mapping[str, Tensor], actions: Tensor, reference: Tensor) -> None:
        """Fit the normalisers to training inputs (N, d), chunks (N, m, A) and reference q′ (N, J)."""
        for name, norm in self.obs_norm.items():
            norm.fit(inputs[name])  # type: ignore[operator]
        if self.aux_head is not None:
            self.aux_norm.fit(inputs["object"])
        if self.pose_state is not None:
            tip = inputs["tip"] if self.pose_state.tip is not None else None
            self.state_norm.fit(state_from_pose(inputs["q"], inputs["object"], tip))
        self.action_norm.fit(self.to_generated(actions, reference))

    def _normalized(
        self, inputs: Mapping[str, Tensor], noise: float = 0.0, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        """Raw inputs with the low-dimensional ones normalised (and, with `noise`, Gaussian noise of that standard
        deviation added to them)."""
        normed = {k: (self.obs_norm[k].normalize(v) if k in self.obs_norm else v) for k, v in inputs.items()}  # type: ignore[operator]
        if noise > 0:
            for k in self.obs_norm:
                normed[k] = normed[k] + noise * torch.randn(normed[k].shape, generator=generator, dtype=normed[k].dtype)
        return normed

    def _pose_condition(
        self,
        inputs: Mapping[str, Tensor],
        pose: Tensor,
        noise: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """`via_pose`: features (B, D) of the state representation built from raw q, the tip and `pose` (B, 4K)."""
        assert self.pose_state is not None
        tip = inputs["tip"] if self.pose_state.tip is not None else None
        state = self.state_norm.normalize(state_from_pose(inputs["q"], pose, tip))  # type: ignore[operator]
        if noise > 0:
            state = state + noise * torch.randn(state.shape, generator=generator, dtype=state.dtype)
        return self.pose_state({"state": state})

    def _pose_head(
        self, inputs: Mapping[str, Tensor], noise: float = 0.0, generator: torch.Generator | None = None
    ) -> Tensor:
        """`via_pose`: the head's normalised pose (B, 4K) from the image encoder's features of raw inputs."""
        return self.aux_head(self.encoder(self._normalized(inputs, noise, generator)))  # type: ignore[misc]

    def _pose_error(self, head: Tensor, inputs: Mapping[str, Tensor]) -> Tensor:
        """Mean squared error (scalar) of a normalised pose (B, 4K) against the recorded inputs["object"]."""
        return torch.mean((head - self.aux_norm.normalize(inputs["object"].float())) ** 2)  # type: ignore[operator]

    def estimate_pose(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """With the auxiliary head: the objects' planar pose (B, 4K) (x, y m, sin yaw, cos yaw; world) it reads
        from raw inputs (B, ...) — for `via_pose`, what the policy acts on; otherwise a diagnostic."""
        if self.aux_head is None:
            raise ValueError("estimate_pose: the model has no object-pose head (trained without aux_object)")
        return self.aux_norm.unnormalize(self._pose_head(inputs))  # type: ignore[operator]

    def condition(
        self, inputs: Mapping[str, Tensor], noise: float = 0.0, generator: torch.Generator | None = None
    ) -> Tensor:
        """Features (B, D) of raw inputs (B, ...); with `noise`, Gaussian noise of that standard deviation is
        added to the normalised low-dimensional inputs (training only). `via_pose`: the features of the state
        built from the head's pose estimate (in training mode, from the recorded pose inputs["object"] when
        given: teacher forcing)."""
        if not self.config.via_pose:
            return self.encoder(self._normalized(inputs, noise, generator))
        pose = inputs["object"] if self.training and "object" in inputs else self.estimate_pose(inputs)
        return self._pose_condition(inputs, pose, noise, generator)

    def loss_terms(
        self,
        inputs: Mapping[str, Tensor],
        actions: Tensor,
        reference: Tensor,
        generator: torch.Generator | None = None,
        progress_weight: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """The scalar loss terms of chunks (B, m, A) in data units given raw inputs (B, ...) and the reference
        q′ (B, J) the twin held when each chunk was asked for: "flow" (flow matching) and, with `aux_object`,
        "object" (mean squared error of the predicted normalised object pose; needs inputs["object"]).
        `via_pose`: in training mode the velocity network is conditioned on the recorded pose and the head
        learns from the pose loss alone; in eval mode (validation) on the head's estimate. `progress_weight` (B,)
        weighs each chunk's progress column in the flow loss (0: its progress is unknown, an expert's relabelled
        frame; None: all 1)."""
        target = self.action_norm.normalize(self.to_generated(actions, reference))
        noise = self.config.input_noise if self.training else 0.0
        if self.aux_head is not None and "object" not in inputs:
            raise ValueError("aux_object: the batch has no 'object' targets (they come from the dataset)")
        if self.config.via_pose:
            head = self._pose_head(inputs, noise, generator)
            pose = inputs["object"] if self.training else self.aux_norm.unnormalize(head)  # type: ignore[operator]
            cond = self._pose_condition(inputs, pose, noise, generator)
        else:
            cond = self.condition(inputs, noise, generator)
            head = self.aux_head(cond) if self.aux_head is not None else None
        weight = None
        if progress_weight is not None:  # (B, 1, A): the joints' columns 1, the progress column the sample's weight
            weight = torch.ones((target.shape[0], 1, target.shape[2]), dtype=target.dtype)
            weight[:, 0, -1] = progress_weight.to(target.dtype)
        terms = {"flow": flow_loss(self.velocity, target, cond, self.config.flow, generator, weight)}
        if head is not None:
            terms["object"] = self._pose_error(head, inputs)
        return terms

    def loss(
        self,
        inputs: Mapping[str, Tensor],
        actions: Tensor,
        reference: Tensor,
        generator: torch.Generator | None = None,
        progress_weight: Tensor | None = None,
    ) -> Tensor:
        """The training loss (scalar): the flow-matching loss plus `aux_object` × the object-pose loss (see
        `loss_terms`, and there `progress_weight`); with the policy frozen (`freeze_policy`), in training mode, the
        pose term alone."""
        if self.policy_frozen and self.training:
            head = self._pose_head(inputs, self.config.input_noise, generator)
            return self.config.aux_object * self._pose_error(head, inputs)
        terms = self.loss_terms(inputs, actions, reference, generator, progress_weight)
        total = terms["flow"]
        if "object" in terms:
            total = total + self.config.aux_object * terms["object"]
        return total

    def sample(
        self,
        inputs: Mapping[str, Tensor],
        reference: Tensor,
        noise: Tensor,
        steps: int | None = None,
        core: FilmVelocity | None = None,
    ) -> Tensor:
        """Chunks (B, m, A) in data units from `noise` (B, m, A) given raw inputs (B, ...) and reference q′
        (B, J): K = `steps` or the config's Euler steps (`flow.euler_sample`'s times and updates). The network's
        FiLM terms are computed once per chunk, not per step: the observation features' part for the batch
        (`ConditionalUNet1D.film_cond`), the flow time's for the K times (`film_time`). `core` replaces the
        network given both parts (`FilmVelocity`, e.g. its traced form) when given."""
        net = self.velocity
        k = steps or self.config.flow.steps
        times = euler_times(k).to(noise.dtype)
        cond_film, time_film = net.film_cond(self.condition(inputs)), net.film_time(times)
        forward = core if core is not None else FilmForward(net)
        x, dt = noise, 1.0 / k
        for i in range(k):
            x = x - dt * forward(x, cond_film, tuple(f[i : i + 1] for f in time_film))
        return self.from_generated(self.action_norm.unnormalize(x), reference)


def build_model(config: ModelConfig, scene: SceneSpec) -> FlowPolicyModel:
    """An untrained model for `scene`'s robot and objects (chunks of J joints + progress)."""
    encoder = make_encoder(
        config.obs,
        scene,
        config.camera,
        config.image_size,
        config.vision,
        config.state_tip,
        config.state_hidden,
        config.image_hidden,
        config.wrist_lift,
        image_tip=config.via_pose and config.state_tip,
    )
    pose_state = None
    if config.via_pose:  # the encoder's tip kinematics (from image_tip), shared
        tip = getattr(encoder, "tip", None)
        pose_state = StateEncoder(len(scene.robot.joints), len(scene.objects), tip, config.state_hidden)
    return FlowPolicyModel(config, encoder, len(scene.robot.joints) + 1, pose_state)
