"""`realissim data info DATASET`: what an episode store holds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from realissim.cli.common import FAILED, fail


@dataclass
class Data:
    """Inspect an episode store: `realissim data info DATASET` prints its summary."""

    action: tyro.conf.Positional[Literal["info"]]
    """What to do."""
    dataset: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DATASET")]
    """The dataset folder."""

    def run(self) -> int:
        from realissim.data.info import describe
        from realissim.data.store import DatasetError

        try:
            print(describe(self.dataset))
        except DatasetError as err:
            return fail("dataset error", err, FAILED)
        return 0
