"""Training a flow policy on an episode store: `train(config, data, out)` (`realissim train`).

A run directory (`out`) holds `config.json` (the resolved config, the dataset and its fingerprint),
`checkpoints/step_NNNNNNN.pt` (the newest `keep_checkpoints`), `last.pt` (the newest, hard-linked),
`loss.png` (the training and validation curves) and `train.log`.

Determinism: for a given thread count, a run is a function of its config and dataset. The model is
initialised from `seed`, batches are drawn by a seeded numpy generator, flow times and noise by a seeded
torch generator, and torch is asked for deterministic algorithms; every RNG state is in each checkpoint, so
`resume=True` continues the run bit for bit (the same losses as a run never interrupted).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from realissim.data.reader import Dataset
from realissim.data.schema import EpisodeInfo, code_version
from realissim.learn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from realissim.learn.config import LEGACY_MODEL_FIELDS, TrainConfig
from realissim.learn.dataset import (
    ChunkSamples,
    build_samples,
    fingerprint,
    open_training_data,
    split_episodes,
    training_episodes,
)
from realissim.learn.model import FlowPolicyModel, build_model, model_fields_in_use
from realissim.spec.codec import UNDESCRIBED_OK, first_difference, to_dict
from realissim.spec.io import scene_to_dict
from realissim.util.torch_threads import torch_settings

log = logging.getLogger(__name__)

_RESUMABLE = ("steps", "checkpoint_every", "keep_checkpoints", "val_every", "progress", "threads")
"""Config fields a resumed run may change (the others define the curve). Another thread count continues the
same run but not bit for bit (torch's reductions split differently): a run begun beside other jobs on one
thread may finish alone on two."""


@dataclass(frozen=True)
class TrainResult:
    """What a run did: the step it reached, every step's loss, the validation losses (step, loss), its last
    checkpoint, the EMA model the policy acts with, and the wall time of this call."""

    step: int
    losses: np.ndarray
    val: np.ndarray
    checkpoint: Path
    model: FlowPolicyModel
    wall_s: float


def lr_at(config: TrainConfig, step: int) -> float:
    """The learning rate of step `step` (1-based): linear warm-up, then cosine to 0 at `config.steps`."""
    if step <= config.warmup_steps:
        return config.lr * step / max(config.warmup_steps, 1)
    span = max(config.steps - config.warmup_steps, 1)
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * min((step - config.warmup_steps) / span, 1.0)))


@torch.no_grad()
def update_ema(ema: FlowPolicyModel, model: FlowPolicyModel, decay: float, step: int) -> None:
    """ema ← d·ema + (1 − d)·model over parameters with d = min(decay, (1 + step) / (10 + step)); buffers (the
    normalisers) are copied."""
    d = min(decay, (1.0 + step) / (10.0 + step))
    for e, p in zip(ema.parameters(), model.parameters()):
        e.lerp_(p, 1.0 - d)
    for e, b in zip(ema.buffers(), model.buffers()):
        e.copy_(b)


def _batch(
    samples: ChunkSamples, idx: np.ndarray
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Inputs, chunks, reference q′ and progress weights (None when all are 1) of the samples `idx`, as tensors."""
    inputs = {k: torch.from_numpy(np.asarray(v[idx])) for k, v in samples.inputs.items()}
    weight = samples.progress_weight[idx]
    progress = None if bool(np.all(weight == 1.0)) else torch.from_numpy(weight)
    return inputs, torch.from_numpy(samples.actions[idx]), torch.from_numpy(samples.reference[idx]), progress


@torch.no_grad()
def validation_loss(model: FlowPolicyModel, samples: ChunkSamples, config: TrainConfig, term: str = "flow") -> float:
    """Mean of loss term `term` (`FlowPolicyModel.loss_terms`; by default the flow loss alone, so runs with and
    without an auxiliary loss compare) over (at most `val_samples` evenly spaced) validation frames, with fixed
    noise."""
    idx = np.unique(np.linspace(0, len(samples) - 1, min(config.val_samples, len(samples))).round().astype(np.int64))
    generator = torch.Generator().manual_seed(config.seed + 1)
    total = 0.0
    for part in np.array_split(idx, max(1, math.ceil(len(idx) / 256))):
        inputs, actions, reference, progress = _batch(samples, part)
        total += float(model.loss_terms(inputs, actions, reference, generator, progress)[term]) * len(part)
    return total / len(idx)


class _Run:
    """The state of one training run: data, model, EMA, optimiser, RNGs and curves."""

    def __init__(self, config: TrainConfig, dataset: Dataset) -> None:
        self.config, self.dataset = config, dataset
        m = config.model
        episodes = training_episodes(dataset)[: config.max_episodes]
        self.train_eps, self.val_eps = split_episodes(episodes, config.val_fraction, config.seed)
        torch.manual_seed(config.seed)
        self.model = build_model(m, dataset.meta.scene)
        self.train = build_samples(dataset, self.model.encoder, self.train_eps, m.horizon, m.waypoints)
        self.val = build_samples(dataset, self.model.encoder, self.val_eps, m.horizon, m.waypoints)
        fitted = set(self.model.obs_norm) | {"object", "tip"}  # (not the images: memory-mapped caches stay on disk)
        inputs = {k: torch.from_numpy(np.asarray(v)) for k, v in self.train.inputs.items() if k in fitted}
        self.model.fit_normalizers(inputs, torch.from_numpy(self.train.actions), torch.from_numpy(self.train.reference))
        self.adopted: dict[str, Any] | None = None
        """With `policy_from`: what was adopted (path, step, training minutes, dataset fingerprint)."""
        if config.policy_from is not None:
            self.adopted = _adopt_state_policy(self.model, Path(config.policy_from), fingerprint(dataset),
                                               dataset if config.policy_from_any_dataset else None)  # fmt: skip
        self.initial: dict[str, Any] | None = None
        """With `init_from`: the checkpoint started from (path, step, training minutes)."""
        if config.init_from is not None:
            self.initial = _initialise_from(self.model, Path(config.init_from))
        self.ema = build_model(m, dataset.meta.scene)
        self.ema.load_state_dict(self.model.state_dict())
        self.ema.requires_grad_(False)
        self.ema.eval()  # validation without training-time noise or random crops
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
        self.sampler = np.random.default_rng(config.seed)
        self.noise = torch.Generator().manual_seed(config.seed)
        self.step, self.losses, self.val_losses = 0, [], []
        self.wall_before, self.session0 = 0.0, time.perf_counter()
        """Optimisation wall time of earlier sessions of this run, s, and when this session's loop began."""
        tips = [dataset.arrays(e.index)["tip"][:, 2] for e in self.train_eps]
        self.tip_floor = float(np.min(np.concatenate(tips))) if tips else None
        """The lowest tip height in the training episodes, m: the policy holds its tip at or above it."""
        self.tip_speed = _tip_speed(dataset, self.train_eps)
        """The 99.9th percentile of the tip's speed in the training episodes, m/s: the policy's tip never moves
        faster than 1.25 × this."""

    def restore(self, meta: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Continue from a checkpoint of this run."""
        self.model.load_state_dict(tensors["model"])
        self.ema.load_state_dict(tensors["ema"])
        self.optimizer.load_state_dict(tensors["optimizer"])
        torch.set_rng_state(tensors["torch_rng"])
        self.noise.set_state(tensors["noise_rng"])
        self.sampler.bit_generator.state = meta["sampler"]
        self.step = int(meta["step"])
        self.wall_before = float(meta.get("train_wall_s") or 0.0)
        self.losses = tensors["losses"].tolist()
        self.val_losses = [tuple(r) for r in tensors["val"].tolist()]

    def one_step(self) -> float:
        """One optimiser step on a random batch; its loss."""
        self.step += 1
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.config, self.step)
        batch = _batch(self.train, self.sampler.integers(0, len(self.train), self.config.batch_size))
        inputs, actions, reference, progress = batch
        loss = self.model.loss(inputs, actions, reference, self.noise, progress)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        update_ema(self.ema, self.model, self.config.ema_decay, self.step)
        self.losses.append(loss.item())
        return self.losses[-1]

    def meta(self, data: Path) -> dict[str, Any]:
        """The checkpoint's JSON meta (see `realissim.learn.checkpoint`)."""
        d = self.dataset
        return {
            "config": to_dict(self.config),
            "scene": scene_to_dict(d.meta.scene),
            "task": d.meta.task,
            "fps": d.meta.fps,
            "joint_names": list(d.meta.joint_names),
            "object_names": list(d.meta.object_names),
            "dataset": {
                "path": str(data),
                "fingerprint": fingerprint(d),
                "source": d.meta.source,
                "train_episodes": [e.index for e in self.train_eps],
                "val_episodes": [e.index for e in self.val_eps],
                "train_frames": len(self.train),
                "val_frames": len(self.val),
            },
            "tip_floor": self.tip_floor,
            "tip_speed": self.tip_speed,
            "policy_from": self.adopted,
            "init_from": self.initial,
            "code_version": code_version(),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "step": self.step,
            "train_wall_s": self.wall_before + time.perf_counter() - self.session0,
            "sampler": self.sampler.bit_generator.state,
        }

    def tensors(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "losses": torch.tensor(self.losses, dtype=torch.float64),
            "val": torch.tensor(self.val_losses, dtype=torch.float64).reshape(-1, 2),
            "torch_rng": torch.get_rng_state(),
            "noise_rng": self.noise.get_state(),
        }


_ADOPTED_FIELDS = ("state_tip", "state_hidden", "waypoints", "horizon", "network", "flow", "obs_norm", "action_norm",
                   "actions")  # fmt: skip


def _adopt_state_policy(
    model: FlowPolicyModel, path: Path, fp: str, any_dataset: Dataset | None = None
) -> dict[str, Any]:
    """Load a trained `state` policy's velocity network, state MLP and normalisers (its EMA weights) from
    checkpoint `path` into the `via_pose` model, and freeze them (`FlowPolicyModel.freeze_policy`). The policy must
    have been trained on the dataset of fingerprint `fp`, or, with `any_dataset` (this run's dataset), on any
    dataset of the same scene parts the state policy depends on. CheckpointError naming the problem: not a state
    policy, another dataset (another scene), or a config that differs."""
    meta, tensors = load_checkpoint(path)
    try:
        stored = {**LEGACY_MODEL_FIELDS, **meta["config"]["model"]}
        fingerprint_ = meta["dataset"]["fingerprint"]
        trained_scene = meta["scene"]
    except (KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: malformed meta: {err}") from None
    if stored.get("obs") != "state":
        raise CheckpointError(f"{path}: policy_from needs a state policy, not {stored.get('obs')!r}")
    if fingerprint_ != fp:
        if any_dataset is None:
            raise CheckpointError(f"{path}: policy_from was trained on another dataset (fingerprint differs; "
                                  "policy_from_any_dataset adopts it all the same)")  # fmt: skip
        here = scene_to_dict(any_dataset.meta.scene)
        for part in ("robot", "objects", "goals"):
            where = first_difference(
                trained_scene.get(part), here.get(part), f"scene.{part}", ("state policy", "data"), UNDESCRIBED_OK
            )
            if where is not None:
                raise CheckpointError(f"{path}: policy_from was trained in another scene: {where}")
        log.info("adopting %s, trained on %s (another dataset of the same scene)", path, meta["dataset"].get("path"))
    given = to_dict(model.config)
    for name in _ADOPTED_FIELDS:
        where = first_difference(stored.get(name), given[name], f"model.{name}", ("state policy", "this run"))
        if where is not None:
            raise CheckpointError(f"{path}: policy_from differs in {where}")
    ema = tensors["ema"]
    renamed = {"encoder.": "pose_state.", "obs_norm.state.": "state_norm.", "velocity.": "velocity.",
               "action_norm.": "action_norm."}  # fmt: skip
    adopted = {}
    for key, value in ema.items():
        for old, new in renamed.items():
            if key.startswith(old):
                adopted[new + key[len(old) :]] = value
                break
    missing, unexpected = model.load_state_dict(adopted, strict=False)
    wanted = [k for k in model.state_dict() if k.startswith(tuple(renamed.values()))]
    if unexpected or any(k in missing for k in wanted):
        raise CheckpointError(f"{path}: policy_from weights do not fit (missing {missing[:3]}, unexpected "
                              f"{unexpected[:3]})")  # fmt: skip
    model.freeze_policy()
    info = {"path": str(path), "step": meta.get("step"), "train_wall_s": meta.get("train_wall_s"),
            "fingerprint": fingerprint_}  # fmt: skip
    log.info("adopted the state policy %s (step %s, %.1f min of training), frozen", path, info["step"],
             (info["train_wall_s"] or 0.0) / 60)  # fmt: skip
    return info


def _initialise_from(model: FlowPolicyModel, path: Path) -> dict[str, Any]:
    """Load checkpoint `path`'s EMA weights (normalisers included) into `model`; CheckpointError naming the problem
    when its model config differs from `model`'s or its weights do not fit. What was loaded, for the run's meta."""
    meta, tensors = load_checkpoint(path)
    try:
        stored = model_fields_in_use({**LEGACY_MODEL_FIELDS, **meta["config"]["model"]})
    except (KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: malformed meta: {err}") from None
    given = model_fields_in_use(to_dict(model.config))
    where = first_difference(stored, given, "model", ("init_from", "this run"))
    if where is not None:
        raise CheckpointError(f"{path}: init_from differs in {where}")
    try:
        model.load_state_dict(tensors["ema"])
    except (KeyError, RuntimeError) as err:
        raise CheckpointError(f"{path}: init_from weights do not fit: {err}") from None
    info = {"path": str(path), "step": meta.get("step"), "train_wall_s": meta.get("train_wall_s")}
    log.info("starting from %s (step %s, %.1f min of training)", path, info["step"], (info["train_wall_s"] or 0) / 60)
    return info


def _check_resume(meta: dict[str, Any], config: TrainConfig, fp: str, path: Path) -> None:
    """CheckpointError unless the checkpoint's run has this config (but `_RESUMABLE`) and dataset."""
    stored, given = dict(meta["config"]), to_dict(config)
    stored.setdefault("policy_from_any_dataset", False)  # (runs from before the option)
    if isinstance(stored.get("model"), dict):
        stored["model"] = model_fields_in_use({**LEGACY_MODEL_FIELDS, **stored["model"]})
        given["model"] = model_fields_in_use(given["model"])
    for name in given:
        if name not in _RESUMABLE and stored.get(name) != given[name]:
            where = first_difference(stored.get(name), given[name], name, ("run", "now"))
            where = where or f"{name} (run {stored.get(name)!r}, now {given[name]!r})"
            raise CheckpointError(f"{path}: cannot resume with a different {where}")
    if meta["dataset"]["fingerprint"] != fp:
        raise CheckpointError(f"{path}: the dataset changed since this run started (fingerprint differs)")
    if stored.get("threads") != config.threads:
        log.warning("resume: %s → %d threads: the run continues, but not bit for bit as it would have",
                    stored.get("threads"), config.threads)  # fmt: skip
    if stored["steps"] != config.steps:
        log.warning("resume: steps %d → %d changes the learning-rate schedule from here", stored["steps"], config.steps)


def _save(run: _Run, out: Path, data: Path) -> Path:
    """Checkpoint the run into out/checkpoints, point out/last.pt at it, drop the oldest, redraw the curve."""
    folder = out / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    path = save_checkpoint(folder / f"step_{run.step:07d}.pt", run.meta(data), run.tensors())
    tmp = out / f".last.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    os.link(path, tmp)
    os.replace(tmp, out / "last.pt")
    if run.config.keep_checkpoints > 0:
        for old in sorted(folder.glob("step_*.pt"))[: -run.config.keep_checkpoints]:
            old.unlink()
    plot_losses(run.losses, run.val_losses, out / "loss.png")
    log.info("step %d: checkpoint %s", run.step, path)
    return path


def _tip_speed(dataset: Dataset, episodes: Sequence[EpisodeInfo]) -> float | None:
    """The 99.9th percentile of the recorded tip's speed over `episodes`, m/s (None without frames)."""
    speeds = []
    for e in episodes:
        a = dataset.arrays(e.index)
        tip, t = a["tip"][...], a["time"][...]
        if len(t) > 1:
            speeds.append(np.linalg.norm(np.diff(tip, axis=0), axis=1) / np.maximum(np.diff(t), 1e-9))
    return float(np.percentile(np.concatenate(speeds), 99.9)) if speeds else None


def plot_losses(losses: list[float], val: list[tuple[float, float]], path: Path) -> None:
    """The loss curve (every step, a moving average, validation points), log scale, as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.arange(1, len(losses) + 1)
    ax.plot(steps, losses, color="0.8", lw=0.5, label="train (step)")
    w = max(1, len(losses) // 100)
    if len(losses) >= w:
        ax.plot(steps[w - 1 :], np.convolve(losses, np.ones(w) / w, mode="valid"), label=f"train (mean of {w})")
    if val:
        ax.plot(*np.asarray(val).T, "o-", label="validation (EMA)")
    ax.set(xlabel="step", ylabel="flow-matching loss", yscale="log")
    ax.legend()
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def train(config: TrainConfig, data: str | Path, out: str | Path, resume: bool = False) -> TrainResult:
    """Train on the successful episodes of the store at `data` into run directory `out` (see the module's
    docstring); `resume` continues from out/last.pt. DatasetError when the store has no successful episode;
    CheckpointError when resuming from an unusable or incompatible checkpoint; FileExistsError when `out`
    already holds a run and `resume` is False."""
    data, out = Path(data), Path(out)
    if not resume and (out / "last.pt").exists():
        raise FileExistsError(f"{out}: holds a run already (resume it, or choose another output directory)")
    dataset = open_training_data(data)
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("realissim.learn").addHandler(handler)
    try:
        with torch_settings(config.threads, config.deterministic):
            return _train(config, dataset, data, out, resume)
    finally:
        logging.getLogger("realissim.learn").removeHandler(handler)
        handler.close()


def _train(config: TrainConfig, dataset: Dataset, data: Path, out: Path, resume: bool) -> TrainResult:
    wall0 = time.perf_counter()
    run = _Run(config, dataset)
    if resume:
        meta, tensors = load_checkpoint(out / "last.pt")
        _check_resume(meta, config, fingerprint(dataset), out / "last.pt")
        run.restore(meta, tensors)
        log.info("resumed %s at step %d", out, run.step)
    about = run.meta(data) | {"step": None, "sampler": None, "train_wall_s": None}
    (out / "config.json").write_text(json.dumps(about, indent=2))
    log.info(
        "training %s on %s: %d train / %d validation episodes (%d / %d frames), %d parameters",
        config.model.obs,
        data,
        len(run.train_eps),
        len(run.val_eps),
        len(run.train),
        len(run.val),
        sum(p.numel() for p in run.model.parameters()),
    )
    checkpoint = out / "last.pt"
    bar = tqdm(
        total=config.steps, initial=run.step, desc=f"train {config.model.obs}", unit="step", disable=not config.progress
    )
    run.session0 = time.perf_counter()
    with bar:
        while run.step < config.steps:
            loss = run.one_step()
            if run.step % config.val_every == 0 and len(run.val):
                run.val_losses.append((run.step, validation_loss(run.ema, run.val, config)))
                log.info("step %d: validation loss %.5f", run.step, run.val_losses[-1][1])
                if run.model.aux_head is not None:
                    pose = validation_loss(run.ema, run.val, config, "object")
                    log.info("step %d: validation object-pose loss %.5f (normalised units²)", run.step, pose)
            if run.step % config.checkpoint_every == 0 or run.step == config.steps:
                checkpoint = _save(run, out, data)
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr_at(config, run.step):.1e}", refresh=False)
    return TrainResult(
        run.step,
        np.asarray(run.losses),
        np.asarray(run.val_losses).reshape(-1, 2),
        checkpoint,
        run.ema,
        time.perf_counter() - wall0,
    )
