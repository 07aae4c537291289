"""`realissim policy info CHECKPOINT`: what a checkpoint is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from realissim.cli.common import FAILED, fail


@dataclass
class PolicyInfo:
    """Inspect a policy: `realissim policy info CHECKPOINT` prints what a checkpoint is."""

    action: tyro.conf.Positional[Literal["info"]]
    """What to do."""
    checkpoint: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """A checkpoint file (a run's last.pt or checkpoints/step_*.pt)."""

    def run(self) -> int:
        from realissim.learn.info import describe
        from realissim.policy.factory import CheckpointError

        try:
            print(describe(self.checkpoint))
        except CheckpointError as err:
            return fail("checkpoint error", err, FAILED)
        return 0
