"""`realissim train`: a flow-matching policy trained on an episode store (`learn.train`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.cli.common import FAILED, INVALID, fail, print_report
from realissim.learn.config import TrainConfig


@dataclass
class Train:
    """Train a flow-matching policy on an episode store's successful episodes: a progress bar with the loss and
    speed, checkpoints every N steps into OUT/checkpoints (OUT/last.pt the newest), OUT/loss.png; `--resume`
    continues a run that was stopped. Deterministic for a given seed and thread count."""

    data: Path = Path("data/pusht_expert")
    """The episode store (`realissim collect`)."""
    out: Path = Path("runs/policy")
    """The run directory."""
    resume: bool = False
    """Continue the run in OUT from OUT/last.pt."""
    config: Annotated[TrainConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=TrainConfig)

    def run(self) -> int:
        from realissim.data.schema import DatasetError
        from realissim.learn.train import train
        from realissim.policy.factory import CheckpointError

        try:
            result = train(self.config, self.data, self.out, resume=self.resume)
        except (ValueError, FileExistsError) as err:
            return fail("invalid option", err, INVALID)
        except (DatasetError, CheckpointError) as err:
            return fail("cannot train", err, FAILED)
        tail = result.losses[-100:]
        report = {
            "steps": result.step,
            "final_loss": float(tail.mean()) if len(tail) else float("nan"),
            "validation_loss": float(result.val[-1, 1]) if len(result.val) else float("nan"),
            "wall_min": result.wall_s / 60,
            "checkpoint": str(result.checkpoint),
        }
        print_report(f"Trained a {self.config.model.obs} flow policy", report, self.out)
        return 0
