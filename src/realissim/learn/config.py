"""The flow-matching learner's configs, in one torch-free module (the `realissim` command builds its flags from
them without importing torch): what a policy is (`ModelConfig`: representation, chunk, `UNetConfig`,
`FlowConfig`, `VisionConfig`) and how it is trained (`TrainConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import tyro

ObsKind = Literal["state", "static", "wrist", "real"]
"""The observation representations of the paper."""
OBS_KINDS: tuple[ObsKind, ...] = ("state", "static", "wrist", "real")

NormMode = Literal["minmax", "meanstd"]
"""How low-dimensional inputs and chunk values are normalised."""


@dataclass(frozen=True)
class UNetConfig:
    """Sizes of the U-Net."""

    channels: tuple[int, ...] = (32, 64, 128)
    """Channels per level, finest first; the chunk is halved in time between levels."""
    kernel: int = 3
    """Temporal kernel size (odd)."""
    groups: int = 8
    """GroupNorm groups (must divide every level's channels)."""
    time_dim: int = 64
    """Size of the flow-time embedding."""

    def __post_init__(self) -> None:
        if not self.channels or any(c % self.groups for c in self.channels):
            raise ValueError(f"channels: need ≥ 1 level, each divisible by groups={self.groups}, got {self.channels}")
        if self.kernel % 2 != 1 or self.kernel < 1:
            raise ValueError(f"kernel: must be odd and ≥ 1, got {self.kernel}")
        if self.time_dim % 2 or self.time_dim < 2:
            raise ValueError(f"time_dim: must be even and ≥ 2, got {self.time_dim}")


@dataclass(frozen=True)
class FlowConfig:
    """How flow times are drawn in training and how chunks are sampled."""

    time_sampling: Literal["uniform", "beta"] = "beta"
    """Training times: uniform on [t_min, 1], or π0's Beta(α, 1) (more weight near the noise) scaled to it."""
    beta_alpha: float = 1.5
    """α of the Beta(α, 1) time distribution (π0: 1.5)."""
    t_min: float = 0.001
    """Least training time (π0: 0.001): t = 0 exactly is never drawn."""
    steps: Annotated[int, tyro.conf.arg(name="flow-steps")] = 10
    """Euler steps K when sampling."""

    def __post_init__(self) -> None:
        if not self.beta_alpha > 0:
            raise ValueError(f"beta_alpha: must be > 0, got {self.beta_alpha}")
        if not 0 <= self.t_min < 1:
            raise ValueError(f"t_min: must be in [0, 1), got {self.t_min}")
        if self.steps < 1:
            raise ValueError(f"steps: must be ≥ 1, got {self.steps}")


@dataclass(frozen=True)
class VisionConfig:
    """Sizes of the image encoder."""

    widths: tuple[int, ...] = (16, 32, 64, 128)
    """Channels per stage (each stage after the first halves the resolution): ResNet-18's layout at a quarter
    of its widths (64, 128, 256, 512), which on this CPU trained 10× faster per step (0.57 against 6.2 s at
    batch 64 under load) and samples a chunk's features in 8 instead of 70 ms."""
    blocks: int = 2
    """Residual blocks per stage (ResNet-18: 2)."""
    groups: Annotated[int, tyro.conf.arg(name="vision-groups")] = 8
    """GroupNorm groups (must divide every width)."""
    keypoints: int = 32
    """K spatial-softmax keypoints."""
    features: int = 64
    """D, the size of the image's feature vector."""
    crop: int | None = 88
    """Square crop side, px (random in training, centred at inference); None: the whole image."""

    def __post_init__(self) -> None:
        if not self.widths or any(w % self.groups for w in self.widths):
            raise ValueError(f"widths: need ≥ 1 stage, each divisible by groups={self.groups}, got {self.widths}")
        if self.blocks < 1 or self.keypoints < 1 or self.features < 1:
            raise ValueError("blocks, keypoints and features must be ≥ 1")
        if self.crop is not None and self.crop < 16:
            raise ValueError(f"crop: must be ≥ 16 px or None, got {self.crop}")


@dataclass(frozen=True)
class ModelConfig:
    """What a flow policy is: its observation representation, chunk shape, network and flow."""

    obs: ObsKind = "state"
    """Observation representation."""
    state_tip: bool = True
    """`state`: also the pusher tip's position, in the world and in each object's frame (`StateEncoder`; forward
    kinematics of q). Measured on the recipe's 60 demonstrations: 75 % and 73 % on eval-v1 (two seeds) against
    66–68 % without (docs/decisions.md, "Flow policy"). Ignored without a pusher."""
    state_hidden: tuple[int, ...] = (256, 256)
    """`state`: widths of an MLP (Mish) from the normalised state to extra features, concatenated with the
    state itself (`StateEncoder`); () feeds the state to the FiLM layers directly (Diffusion Policy's
    low-dimensional policy). Measured on 60 demonstrations: it learns faster and reached 55 % on eval-v1
    against 47 % without (docs/decisions.md, "Flow policy")."""
    image_hidden: tuple[int, ...] = ()
    """Image representations: widths of an MLP (Mish) from the image features and the normalised q to extra
    features, concatenated with them (`ImageEncoder`); () conditions the network on the image features and q
    directly."""
    wrist_lift: bool = False
    """`wrist`: also each image keypoint's world (x, y) where its ray from the wrist camera (posed by forward
    kinematics of q) meets the plane of the objects' top faces (`realissim.learn.lift`), so the network need
    not learn the camera's kinematics to know where things are."""
    camera: str | None = None
    """Image representations: the camera (None: "wrist" for `wrist`, the scene's first camera otherwise)."""
    image_size: tuple[int, int] = (96, 96)
    """Image representations: the image size, px (width, height)."""
    vision: VisionConfig = field(default_factory=VisionConfig)
    """Image representations: the image encoder's sizes."""
    waypoints: int = 32
    """Waypoints per chunk, m (the paper's 32)."""
    horizon: float = 1.0
    """Chunk horizon H, s (the paper's 1 s)."""
    network: UNetConfig = field(default_factory=UNetConfig)
    """The velocity network's sizes."""
    flow: FlowConfig = field(default_factory=FlowConfig)
    """Flow-time sampling in training and Euler steps K at inference."""
    obs_norm: NormMode = "minmax"
    """Normalisation of the low-dimensional observation inputs."""
    action_norm: NormMode = "minmax"
    """Normalisation of the chunk's values (q′ and progress)."""
    input_noise: float = 0.0
    """Training only: standard deviation of Gaussian noise added to the normalised low-dimensional inputs
    (q and the object's pose; [−1, 1] spans the data's range), a regulariser against the overfitting seen
    on 60 demonstrations (docs/decisions.md, "Flow policy")."""
    actions: Literal["relative", "absolute"] = "absolute"
    """What the network generates for the joints: "relative" — each waypoint's q′ minus the q′ the twin was
    holding when the chunk was asked for (`Observation.q_des`), added back when acting; "absolute" — q′
    itself (the paper, the default). Progress is always absolute. Measured on 60 expert demonstrations
    (10k steps, 20 starts of pusht/eval-v1): the same held-out chunk error and success within noise
    (docs/decisions.md, "Flow policy")."""

    aux_object: float = 0.0
    """Image representations, training only: weight of an auxiliary loss — a head (MLP) on the encoder's
    features predicts the objects' normalised planar pose (x, y, sin yaw, cos yaw, from the recorded twin
    state) and its mean squared error is added to the flow loss, so the image encoder is taught where the
    object is directly rather than only through the actions. The head is not used when acting: a deployed
    image policy still sees only its images and q. 0: off."""

    via_pose: bool = False
    """Image representations: act through the objects' pose. The auxiliary head (weight `aux_object`, which must
    then be > 0) estimates each object's planar pose from the image features and q, and the velocity network is
    conditioned on the state representation built from that estimate (`StateEncoder`: q, the pose and, with
    `state_tip`, the tip features; `state_hidden` its MLP) — the state policy's conditioning, fed by the image.
    Training is teacher-forced: the velocity network learns on the recorded twin pose and the head on the same
    pose as its target, in one run; only acting (and validation) goes through the estimate. So the image trunk
    is taught by the pose loss, not by the actions' gradient. Measured on the recipe's data: docs/decisions.md,
    "Flow policy"."""

    def __post_init__(self) -> None:
        if self.via_pose and self.obs == "state":
            raise ValueError("via_pose: only for image representations (the state policy reads the pose itself)")
        if self.via_pose and not self.aux_object > 0:
            raise ValueError("via_pose: needs the pose head's loss weight aux_object > 0 (e.g. 1.0)")
        if self.aux_object < 0:
            raise ValueError(f"aux_object: must be ≥ 0, got {self.aux_object}")
        if self.wrist_lift and self.obs != "wrist":
            raise ValueError(f"wrist_lift: only for the wrist representation, not {self.obs!r}")
        if self.aux_object > 0 and self.obs == "state":
            raise ValueError("aux_object: only for image representations (the state policy reads the pose itself)")
        if self.waypoints < 1:
            raise ValueError(f"waypoints: must be ≥ 1, got {self.waypoints}")
        if self.waypoints % 2 ** (len(self.network.channels) - 1):
            raise ValueError(f"waypoints: {self.waypoints} must be divisible by 2^(levels − 1) of network.channels")
        if not self.horizon > 0:
            raise ValueError(f"horizon: must be > 0 s, got {self.horizon}")


LEGACY_MODEL_FIELDS: dict[str, object] = {
    "state_tip": False,
    "state_hidden": [],
    "image_hidden": [],
    "wrist_lift": False,
    "via_pose": False,
}
"""Fields whose default changed or that were added to `ModelConfig` since checkpoints were first written, with
the value that reproduces a model stored without them (not today's default): `state_tip` was off by default at
first, `state_hidden` came in with the state MLP (before it, the state fed FiLM directly), `image_hidden` with
the image encoder's fusion MLP, `wrist_lift` with the lifted keypoints, `via_pose` with acting through the
estimated pose. Read under a stored model config."""


@dataclass(frozen=True)
class TrainConfig:
    """How to train a flow policy."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy: observation representation (`model.obs`), chunk, network, flow."""
    steps: int = 20_000
    """Optimiser steps in all."""
    batch_size: int = 64
    """Samples per step."""
    lr: float = 1e-3
    """Peak learning rate of AdamW (linear warm-up, then cosine decay to 0 at `steps`)."""
    warmup_steps: int = 500
    """Steps of linear learning-rate warm-up."""
    weight_decay: float = 1e-6
    """AdamW's decoupled weight decay."""
    ema_decay: float = 0.999
    """Decay of the EMA weights the policy acts with (ramped up as min(decay, (1 + s) / (10 + s)))."""
    max_episodes: int | None = None
    """Use only the store's first N successful episodes (by index), e.g. to measure how success grows with the
    number of demonstrations on one dataset; None: all."""
    val_fraction: float = 0.05
    """Fraction of episodes held out for the validation loss (by episode; at least one episode trains)."""
    val_every: int = 500
    """Steps between validation losses (EMA weights, fixed noise)."""
    val_samples: int = 2048
    """At most this many validation frames (evenly spaced) per validation loss."""
    checkpoint_every: int = 2000
    """Steps between checkpoints (and at the last step)."""
    keep_checkpoints: int = 0
    """Newest step checkpoints kept in `checkpoints/` (0: all, for choosing one by evaluation, `realissim eval
    sweep`; `last.pt` is always kept)."""
    policy_from: str | None = None
    """`via_pose` only: a trained `state` policy's checkpoint (same dataset, same state and network config) whose
    velocity network, state MLP and normalisers the image policy adopts, frozen; only the image encoder and the
    pose head train (on the pose loss). The image policy is then that state policy acting on the estimated pose;
    its training time is the state run's plus this run's."""
    policy_from_any_dataset: bool = False
    """With `policy_from`: also adopt a state policy trained on another dataset of the same scene (robot, objects
    and goals equal), its normalisers with it; the image encoder and pose head still learn from this dataset. So
    an image arm whose own demonstrations are too few to train a state policy on (the `real` representation's
    online demonstrations with the real cameras' frames) acts with the same policy as the arms it is compared with."""
    init_from: str | None = None
    """Start from this checkpoint's weights (its EMA, normalisers included) instead of fresh ones: a policy of the
    same model config trained before, e.g. the previous round's in expert relabelling (`learn.dagger`), fine-tuned
    here on this run's data with this run's schedule. CheckpointError if its model config differs."""
    seed: int = 0
    """Seed of the initial weights, the validation split, the batch sampler and the flow noise."""
    threads: int = 1
    """Torch CPU threads (results are deterministic for a given count; 1 is fastest on a shared 2-core machine)."""
    deterministic: bool = True
    """Ask torch for deterministic algorithms (`torch.use_deterministic_algorithms`)."""
    progress: bool = True
    """Show a progress bar with the loss and steps/s."""

    def __post_init__(self) -> None:
        for name in (
            "steps",
            "batch_size",
            "val_every",
            "val_samples",
            "checkpoint_every",
            "threads",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be ≥ 1, got {getattr(self, name)}")
        if self.keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints: must be ≥ 0 (0: all), got {self.keep_checkpoints}")
        if not (self.lr > 0 and self.warmup_steps >= 0 and self.weight_decay >= 0):
            raise ValueError("lr, warmup_steps, weight_decay: must be > 0, ≥ 0, ≥ 0")
        if self.max_episodes is not None and self.max_episodes < 1:
            raise ValueError(f"max_episodes: must be ≥ 1 or None, got {self.max_episodes}")
        if not 0 <= self.ema_decay < 1 or not 0 <= self.val_fraction < 1:
            raise ValueError("ema_decay and val_fraction: must be in [0, 1)")
        if self.policy_from is not None and not self.model.via_pose:
            raise ValueError("policy_from: only for an image policy that acts through the pose (model.via_pose)")
        if self.policy_from_any_dataset and self.policy_from is None:
            raise ValueError("policy_from_any_dataset: only with policy_from")
