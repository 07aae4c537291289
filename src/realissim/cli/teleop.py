"""`realissim teleop`: browser teleoperation into an episode store (`teleop`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.teleop.config import TeleopConfig


@dataclass
class Teleop:
    """Browser teleoperation (viser): drag the pusher tip's target on the table; the twin's arm follows by planar
    IK (online, the real arm follows the twin). The page shows the twin beside the real camera views with the
    live sync state; Start / Save / Discard record episodes into an episode store. Binds to loopback by
    default; open the printed URL."""

    config: Annotated[TeleopConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: TeleopConfig(out=Path("data/pusht_teleop"))
    )

    def run(self) -> int:
        from realissim.teleop import run_teleop

        return run_teleop(self.config)
