"""`describe(checkpoint)`: what a flow-policy checkpoint is, as text (`realissim policy info CHECKPOINT`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from realissim.learn.checkpoint import load_checkpoint


def describe(checkpoint: str | Path) -> str:
    """A few lines: representation, chunk, network, training progress and losses, dataset, scene, code.
    CheckpointError naming the file if it is not a usable checkpoint."""
    path = Path(checkpoint)
    meta, tensors = load_checkpoint(path)
    c, d = meta["config"], meta["dataset"]
    m, net, flow = c["model"], c["model"]["network"], c["model"]["flow"]
    acting = ("velocity.", "encoder.") + (("pose_state.", "aux_head.") if m.get("via_pose") else ())
    params = sum(v.numel() for k, v in tensors["ema"].items() if k.startswith(acting))
    losses, val = np.asarray(tensors["losses"]), np.asarray(tensors["val"]).reshape(-1, 2)
    recent = f"{losses[-100:].mean():.5f} (mean of the last {min(len(losses), 100)} steps)" if len(losses) else "-"
    last_val = f"{val[-1, 1]:.5f} at step {int(val[-1, 0])}" if len(val) else "- (no validation episodes)"
    time_sampling = "uniform" if flow["time_sampling"] == "uniform" else f"Beta({flow['beta_alpha']:g}, 1)"
    rows = [
        ("checkpoint", f"{path} ({path.stat().st_size / 1e6:.1f} MB)"),
        (
            "policy",
            f"flow matching on {m['obs']!r} observations; chunks of {m['waypoints']} waypoints × "
            f"{len(meta['joint_names']) + 1} (q′, progress) over {m['horizon']:g} s; K = {flow['steps']} "
            f"Euler steps; training times {time_sampling}"
            + ("; acts through the object pose its image head estimates (via_pose)" if m.get("via_pose") else ""),
        ),
        (
            "network",
            f"1D U-Net, channels {tuple(net['channels'])}, kernel {net['kernel']}, "
            f"{params / 1e6:.2f} M parameters; normalisation obs {m['obs_norm']}, actions {m['action_norm']}",
        ),
        (
            "training",
            f"step {meta['step']} of {c['steps']}, batch {c['batch_size']}, lr {c['lr']:g}, "
            f"EMA {c['ema_decay']:g}, seed {c['seed']}, {c['threads']} thread(s)"
            + (f"; {meta['train_wall_s'] / 60:.1f} min of optimisation" if meta.get("train_wall_s") else ""),
        ),
        ("loss", f"train {recent}; validation {last_val}"),
        (
            "dataset",
            f"{d['path']} ({d['source']}): {len(d['train_episodes'])} training / "
            f"{len(d['val_episodes'])} validation episodes ({d['train_frames']} / {d['val_frames']} frames); "
            f"fingerprint {d['fingerprint'][:16]}",
        ),
        (
            "scene",
            f"{meta['scene']['name']} (task {meta['task']}, {meta['fps']:g} fps; joints "
            f"{', '.join(meta['joint_names'])}; objects {', '.join(meta['object_names'])})",
        ),
        ("code", f"{meta['code_version']}, written {meta['created']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
