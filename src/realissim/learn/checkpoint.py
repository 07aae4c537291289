"""Flow-policy checkpoints: one file holding everything to resume training or to act.

A checkpoint is a `torch.save` archive of plain tensors and JSON text, read back with `weights_only=True`
(no pickled objects are executed on load). Keys:
    format, version    "realissim.flow_policy", 1
    meta               JSON: the full `TrainConfig`, the scene the data was recorded in, task, fps, joint and
                       object names, the dataset (path, fingerprint, train/validation episode indices), code
                       version, creation time, step, the batch sampler's RNG state
    model, ema         state dicts of `FlowPolicyModel` (weights, normalisers) and of its EMA copy
    optimizer          the optimiser's state dict
    losses             (step,) float64 training loss of every step so far
    val                (n, 2) float64 (step, validation loss of the EMA weights)
    torch_rng, noise_rng   torch's global RNG state and the flow-noise generator's state (uint8)
Written atomically: to a temporary file in the same directory, fsynced, then renamed over the target.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import torch

from realissim.policy.factory import CheckpointError

__all__ = ["FORMAT", "VERSION", "CheckpointError", "load_checkpoint", "save_checkpoint"]

FORMAT = "realissim.flow_policy"
VERSION = 1
_TENSORS = ("model", "ema", "optimizer", "losses", "val", "torch_rng", "noise_rng")


def save_checkpoint(path: str | Path, meta: dict[str, Any], tensors: dict[str, Any]) -> Path:
    """Write a checkpoint atomically at `path` (JSON-able `meta`, the `_TENSORS` entries); returns the path."""
    path = Path(path)
    missing = [k for k in _TENSORS if k not in tensors]
    if missing:
        raise ValueError(f"save_checkpoint: missing {missing}")
    payload = {"format": FORMAT, "version": VERSION, "meta": json.dumps(meta, allow_nan=False), **tensors}
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def load_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta, tensors) of the checkpoint at `path`; CheckpointError naming the file if it is missing, corrupt
    (truncated, not a torch archive) or not a flow-policy checkpoint of this version."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint file here")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for damaged files
        raise CheckpointError(f"{path}: not a readable checkpoint (corrupt or truncated): {err}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a realissim flow-policy checkpoint")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {payload.get('version')!r}, this code reads {VERSION}")
    missing = [k for k in ("meta", *_TENSORS) if k not in payload]
    if missing:
        raise CheckpointError(f"{path}: incomplete checkpoint, missing {missing}")
    try:
        meta = json.loads(payload["meta"])
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: malformed meta: {err}") from None
    return meta, {k: payload[k] for k in _TENSORS}
