"""Observation encoders: what a learned policy takes from an `Observation` (live) or from a recorded episode
(training), and the trainable map from that to a feature vector (B, D) that conditions the flow.

The split keeps training and deployment on one code path: an encoder turns both sources into the same named
*inputs* (numpy arrays with a leading frame or batch axis), and `forward` turns inputs into features. The
policy normalises the encoder's low-dimensional inputs (`low_dim`) before `forward`; images stay uint8 and
are scaled by the encoder itself.

Representations (`ObsKind`, the paper's four): `state` (here) — the twin's joints q and every object's
planar pose; `static` and `wrist` — images of virtual cameras rendered from the recorded twin states (cached
per dataset, camera and size) with q; `real` — a real camera's recorded frames with q (online only: no
real frames exist offline). An encoder for a new representation subclasses `ObservationEncoder` and
registers in `make_encoder`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional

from realissim.data.reader import Dataset
from realissim.data.schema import DatasetError, EpisodeInfo
from realissim.geometry import quat_yaw
from realissim.learn.config import OBS_KINDS, ObsKind, VisionConfig
from realissim.learn.image_cache import RenderCache
from realissim.learn.layers import Mish
from realissim.learn.lift import WristGeometry, lift_pixels
from realissim.learn.vision import ImageTrunk
from realissim.policy.base import Observation
from realissim.spec.scene import SceneSpec
from realissim.twin.kinematics import PusherIK
from realissim.views.virtual import WRIST

LIFT_SCALE = 0.25
"""m: lifted keypoint positions are divided by this, so a tabletop workspace spans about [−1, 1]."""


class ObservationEncoder(nn.Module, abc.ABC):
    """Inputs from recorded episodes or live observations, and features (B, D) from inputs."""

    kind: ClassVar[ObsKind]
    """Which representation this encoder implements."""
    low_dim: ClassVar[tuple[str, ...]]
    """Input names of low-dimensional float vectors (B, d): the policy normalises these before `forward`."""
    scene_parts: ClassVar[tuple[str, ...]] = ("robot", "objects", "goals")
    """Top-level fields of the scene a trained policy depends on (an image encoder adds "cameras")."""
    targets: ClassVar[tuple[str, ...]] = ()
    """Training-only entries of `dataset_inputs` (not inputs of `forward`, absent from `observation_inputs`):
    an image encoder adds "object", the objects' planar pose (B, 4K) for the auxiliary pose loss."""
    cameras: tuple[str, ...] = ()
    """Virtual cameras the environment must render into each observation (scene camera names, "wrist")."""
    image_size: tuple[int, int] = (96, 96)
    """Their size, px (width, height)."""

    @property
    @abc.abstractmethod
    def feature_dim(self) -> int:
        """D."""

    @abc.abstractmethod
    def input_dims(self) -> dict[str, int]:
        """The size d of each `low_dim` input."""

    @abc.abstractmethod
    def dataset_inputs(self, dataset: Dataset, episodes: Sequence[EpisodeInfo]) -> dict[str, np.ndarray]:
        """Inputs (N, ...) for every frame of `episodes`, concatenated in their order (N = Σ lengths); arrays
        may be memory-mapped caches. The frame of row n is the twin's state after that recorded frame."""

    @abc.abstractmethod
    def observation_inputs(self, observation: Observation) -> dict[str, np.ndarray]:
        """Inputs (B, ...) of a batched observation; ValueError naming the field if one is not finite."""

    @abc.abstractmethod
    def forward(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """Features (B, D) float32 of inputs (B, ...) whose `low_dim` entries are already normalised."""


def _mlp(width: int, hidden: Sequence[int], name: str) -> nn.Sequential | None:
    """Linear → Mish layers of the given widths from `width` inputs (None for no widths); ValueError naming the
    option `name` for a width < 1."""
    if any(int(w) < 1 for w in hidden):
        raise ValueError(f"{name}: widths must be ≥ 1, got {tuple(hidden)}")
    layers: list[nn.Module] = []
    for w in hidden:
        layers += [nn.Linear(width, int(w)), Mish()]
        width = int(w)
    return nn.Sequential(*layers) if layers else None


def state_vector(q: np.ndarray, object_pos: np.ndarray, object_quat: np.ndarray) -> np.ndarray:
    """(..., J + 4K) float32: joints q (..., J) rad, then per object x, y (m, world), sin yaw, cos yaw of
    object_pos (..., K, 3) and object_quat (..., K, 4) wxyz. Yaw as sin/cos: continuous across ±π."""
    yaw = quat_yaw(object_quat)
    planar = np.stack([object_pos[..., 0], object_pos[..., 1], np.sin(yaw), np.cos(yaw)], axis=-1)
    return np.concatenate([q, planar.reshape(*planar.shape[:-2], -1)], axis=-1).astype(np.float32)


def state_from_pose(q: Tensor, pose: Tensor, tip: Tensor | None) -> Tensor:
    """`StateEncoder`'s state vector (B, d) in torch, from joints q (B, J) rad, each of the K objects' planar
    pose (B, 4K) as x, y (m, world), sin yaw, cos yaw, and (None: without tip features) the pusher tip's world
    position (B, 3) m. (sin, cos) pairs are scaled to unit length first (an estimate need not be), so the yaw
    they encode is what the vector holds. Differentiable in `pose`."""
    b = len(q)
    planar = pose.float().reshape(b, -1, 4)
    xy, sc = planar[..., :2], planar[..., 2:]
    sc = sc / torch.clamp(torch.linalg.vector_norm(sc, dim=-1, keepdim=True), min=1e-6)
    parts = [q.float(), torch.cat([xy, sc], dim=-1).reshape(b, -1)]
    if tip is not None:
        tip = tip.float()
        d = tip[:, None, :2] - xy  # (B, K, 2) tip relative to each object, world axes
        s, c = sc[..., 0], sc[..., 1]
        local = torch.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], dim=-1)
        parts += [tip, local.reshape(b, -1)]
    return torch.cat(parts, dim=-1)


def require_finite(observation: Observation, names: Sequence[str]) -> None:
    """ValueError naming the first of the observation's fields `names` that holds NaN or inf."""
    for name in names:
        value = getattr(observation, name)
        if not np.all(np.isfinite(value)):
            raise ValueError(f"observation.{name}: contains NaN or inf (the policy refuses to act on it)")


class StateEncoder(ObservationEncoder):
    """`state`: q (J) and each of the K objects' (x, y, sin yaw, cos yaw), from the twin's state; with
    `tip`, also the pusher tip's world position (3) and its (x, y) in each object's frame (2K) — forward
    kinematics of q, so nothing the twin does not already hold, but the geometry a push depends on is then
    an input rather than something the network must learn to compute.

    Features: the normalised state itself, then (with `hidden`, widths of an MLP with Mish activations) the
    MLP's output of it. Without the MLP the FiLM layers' map from the state is affine in Mish(state) per
    layer; the MLP lets the conditioning be a learned nonlinear function of the pose."""

    kind: ClassVar[ObsKind] = "state"
    low_dim: ClassVar[tuple[str, ...]] = ("state",)

    def __init__(self, joints: int, objects: int, tip: PusherIK | None = None, hidden: Sequence[int] = ()) -> None:
        super().__init__()
        self.joints, self.objects, self.tip = joints, objects, tip
        self.mlp = _mlp(self.state_dim, hidden, "state_hidden")

    @property
    def state_dim(self) -> int:
        """d: the state vector's size."""
        return self.joints + 4 * self.objects + (3 + 2 * self.objects if self.tip is not None else 0)

    @property
    def feature_dim(self) -> int:
        extra = self.mlp[-2].out_features if self.mlp is not None else 0  # type: ignore[union-attr]
        return self.state_dim + extra

    def input_dims(self) -> dict[str, int]:
        return {"state": self.state_dim}

    def _vector(self, q: np.ndarray, pos: np.ndarray, quat: np.ndarray, tip: np.ndarray | None) -> np.ndarray:
        base = state_vector(q, pos, quat)
        if self.tip is None:
            return base
        assert tip is not None
        yaw = quat_yaw(quat)  # (N, K)
        d = tip[:, None, :2] - pos[..., :2]  # (N, K, 2) tip relative to each object, world axes
        c, s = np.cos(yaw), np.sin(yaw)
        local = np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], axis=-1)
        return np.concatenate([base, tip, local.reshape(len(q), -1)], axis=-1).astype(np.float32)

    def dataset_inputs(self, dataset: Dataset, episodes: Sequence[EpisodeInfo]) -> dict[str, np.ndarray]:
        rows = []
        for info in episodes:
            a = dataset.arrays(info.index)
            tip = a["tip"][...] if self.tip is not None else None
            rows.append(self._vector(a["q"][...], a["object_pos"][...], a["object_quat"][...], tip))
        width = self.state_dim
        return {"state": np.concatenate(rows) if rows else np.zeros((0, width), np.float32)}

    def observation_inputs(self, observation: Observation) -> dict[str, np.ndarray]:
        require_finite(observation, ("q", "object_pos", "object_quat"))
        q = np.asarray(observation.q, dtype=np.float64)
        if q.ndim != 2 or q.shape[1] != self.joints or np.shape(observation.object_pos)[1:] != (self.objects, 3):
            raise ValueError(
                f"observation: the policy expects q (B, {self.joints}) and object_pos (B, {self.objects}, 3), got "
                f"{q.shape} and {np.shape(observation.object_pos)}"
            )
        tip = np.array([self.tip.tip_position(row) for row in q]) if self.tip is not None else None
        return {"state": self._vector(q, np.asarray(observation.object_pos), np.asarray(observation.object_quat), tip)}

    def forward(self, inputs: Mapping[str, Tensor]) -> Tensor:
        state = inputs["state"]
        return state if self.mlp is None else torch.cat([state, self.mlp(state)], dim=-1)


def resize_images(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 images (N, h, w, 3) → (N, H, W, 3) at `size` (W, H) px, area-averaged (antialiased bilinear);
    unchanged when already that size."""
    if images.shape[1:3] == (size[1], size[0]):
        return images
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    y = functional.interpolate(x, size=(size[1], size[0]), mode="bilinear", antialias=True, align_corners=False)
    return y.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


class ImageEncoder(ObservationEncoder):
    """`static`, `wrist` or `real`: one camera's image (through `ImageTrunk`, trained end to end) and q.

    `static` and `wrist` read virtual images rendered from the twin (at deployment by the environment, in
    training from the dataset's render cache); `real` reads a real camera's frames (recorded online, or the
    observation's `real_images` online), resized to `image_size`. Features: the image's D values, then the
    normalised joints, then (with `hidden`, widths of an MLP with Mish activations) the MLP's output of both —
    the image and q fused: where the object is in the world depends on both (a wrist camera sees it relative
    to the tip), and the FiLM layers alone can only use each feature affinely."""

    low_dim: ClassVar[tuple[str, ...]] = ("q",)
    scene_parts: ClassVar[tuple[str, ...]] = ("robot", "objects", "goals", "cameras")
    targets: ClassVar[tuple[str, ...]] = ("object",)

    def __init__(
        self,
        kind: ObsKind,
        camera: str,
        size: tuple[int, int],
        joints: int,
        config: VisionConfig = VisionConfig(),
        objects: int = 1,
        hidden: Sequence[int] = (),
        lift: WristGeometry | None = None,
        tip: PusherIK | None = None,
    ) -> None:
        super().__init__()
        self.kind = kind  # type: ignore[misc]
        self.tip = tip
        self.camera, self.joints, self.objects = camera, joints, objects
        self.image_size = (int(size[0]), int(size[1]))
        self.cameras = (camera,) if kind != "real" else ()
        self.trunk = ImageTrunk(config)
        self.lift = lift
        if lift is not None:
            if camera != WRIST:
                raise ValueError(f"wrist_lift: only for the wrist camera, not {camera!r}")
            self.register_buffer("K", torch.tensor(lift.K, dtype=torch.float32))
        self.mlp = _mlp(self._base_dim, hidden, "image_hidden")
        self.cache_progress = True

    @property
    def _base_dim(self) -> int:
        """Image features, q and (with `lift`) the lifted keypoints' world (x, y)."""
        lifted = 2 * self.trunk.config.keypoints if self.lift is not None else 0
        return self.trunk.config.features + self.joints + lifted

    @property
    def feature_dim(self) -> int:
        extra = self.mlp[-2].out_features if self.mlp is not None else 0  # type: ignore[union-attr]
        return self._base_dim + extra

    def input_dims(self) -> dict[str, int]:
        return {"q": self.joints}

    def dataset_inputs(self, dataset: Dataset, episodes: Sequence[EpisodeInfo]) -> dict[str, np.ndarray]:
        """The images, q, and (training-only, `targets`) "object": each object's x, y, sin yaw, cos yaw
        (N, 4K) from the recorded twin state — never an input of the encoder."""
        w, h = self.image_size
        q, objects = [], []
        for e in episodes:
            a = dataset.arrays(e.index)
            state = state_vector(a["q"][...], a["object_pos"][...], a["object_quat"][...])
            q.append(state[:, : self.joints])
            objects.append(state[:, self.joints :])
        if self.kind == "real":
            if self.camera not in dataset.meta.cameras:
                raise DatasetError(
                    f"{dataset.path}: no real {self.camera!r} frames recorded (cameras: "
                    f"{list(dataset.meta.cameras) or 'none; real images exist only online, with --record-images'})"
                )
            images = [resize_images(dataset.arrays(e.index)[f"images/{self.camera}"][...], self.image_size)
                      for e in episodes]  # fmt: skip
        else:
            cache = RenderCache(dataset, self.camera, self.image_size, progress=self.cache_progress)
            images = [np.asarray(cache.rows(e.index)) for e in episodes]
        out = {
            "image": np.concatenate(images) if images else np.zeros((0, h, w, 3), np.uint8),
            "q": np.concatenate(q) if q else np.zeros((0, self.joints), np.float32),
            "object": np.concatenate(objects) if objects else np.zeros((0, 4 * self.objects), np.float32),
        }
        if self.lift is not None:
            out["camera"] = self.lift.camera_poses(out["q"])
        if self.tip is not None:
            tips = [dataset.arrays(e.index)["tip"][...].astype(np.float32) for e in episodes]
            out["tip"] = np.concatenate(tips) if tips else np.zeros((0, 3), np.float32)
        return out

    def observation_inputs(self, observation: Observation) -> dict[str, np.ndarray]:
        require_finite(observation, ("q",))
        source = observation.real_images if self.kind == "real" else observation.images
        if self.camera not in source:
            where = "real_images (online, EnvConfig.real_images)" if self.kind == "real" else "images"
            raise ValueError(f"observation.{where}: no {self.camera!r} image (the policy sees that camera)")
        q = np.asarray(observation.q, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.joints:
            raise ValueError(f"observation: the policy expects q (B, {self.joints}), got {q.shape}")
        out = {"image": resize_images(np.asarray(source[self.camera]), self.image_size), "q": q}
        if self.lift is not None:
            out["camera"] = self.lift.camera_poses(q)  # from the float32 q, as in training
        if self.tip is not None:
            tips = [self.tip.tip_position(row) for row in q.astype(np.float64)]
            out["tip"] = np.array(tips, dtype=np.float32).reshape(-1, 3)
        return out

    def forward(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """Features (B, D): the image's, q, (with `lift`) each keypoint's world (x, y) on the objects' plane
        in units of `LIFT_SCALE`, and (with `hidden`) the MLP's of all of these."""
        kp, pixels = self.trunk.keypoints(inputs["image"])
        parts = [self.trunk.out(kp.reshape(len(kp), -1)), inputs["q"].float()]
        if self.lift is not None:
            world = lift_pixels(pixels, inputs["camera"].float(), self.K, self.lift.plane)  # type: ignore[arg-type]
            parts.append(world.reshape(len(world), -1) / LIFT_SCALE)
        base = torch.cat(parts, dim=-1)
        return base if self.mlp is None else torch.cat([base, self.mlp(base)], dim=-1)


def make_encoder(
    kind: str,
    scene: SceneSpec,
    camera: str | None = None,
    image_size: tuple[int, int] = (96, 96),
    vision: VisionConfig = VisionConfig(),
    state_tip: bool = False,
    state_hidden: Sequence[int] = (),
    image_hidden: Sequence[int] = (),
    wrist_lift: bool = False,
    image_tip: bool = False,
) -> ObservationEncoder:
    """The encoder of representation `kind` for `scene`; for images, `camera` (None: "wrist" for `wrist`, the
    scene's first camera for `static` and `real`) at `image_size`; with `image_tip` (and a pusher), an image
    encoder also provides the pusher tip's world position as input "tip" (for `ModelConfig.via_pose`).
    ValueError for an unknown kind or camera."""
    joints = len(scene.robot.joints)
    if kind == "state":
        tip = PusherIK(scene) if state_tip and scene.robot.pusher is not None else None
        return StateEncoder(joints, len(scene.objects), tip, state_hidden)
    if kind not in OBS_KINDS:
        raise ValueError(f"obs: unknown representation {kind!r} (one of {', '.join(OBS_KINDS)})")
    names = [c.name for c in scene.cameras]
    if kind == "wrist":
        camera = camera or WRIST
        if camera != WRIST:
            raise ValueError(f"camera: the wrist representation uses the wrist camera, not {camera!r}")
    else:
        if not names:
            raise ValueError(f"obs: the {kind!r} representation needs a scene camera; the scene has none")
        camera = camera or names[0]
        if camera not in names:
            raise ValueError(f"camera: {camera!r} is not one of the scene's cameras {names}")
    if wrist_lift and kind != "wrist":
        raise ValueError(f"wrist_lift: only for the wrist representation, not {kind!r}")
    lift = WristGeometry(scene, image_size) if wrist_lift else None
    tip = PusherIK(scene) if image_tip and scene.robot.pusher is not None else None
    return ImageEncoder(kind, camera, image_size, joints, vision, len(scene.objects), image_hidden, lift, tip)  # type: ignore[arg-type]
