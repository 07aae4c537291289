"""`realissim sysid DATASET`: identify the world's dynamics from online episodes (`realissim.sysid`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.cli.common import FAILED, INVALID, fail
from realissim.sysid.run import SysidConfig


@dataclass
class Sysid:
    """Identify the objects' sliding friction and centre of mass from a dataset's online episodes — the uncorrected
    twin, driven by the real arm's measured joints, replayed against the object trajectory the corrected twin saw —
    with 95 % intervals, and write OUT/sysid.json (a twin-parameter file: `collect --randomize-from`), OUT/report.md
    and OUT/residuals.png. Never reads the oracle."""

    dataset: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DATASET")]
    """An episode store with online episodes (`realissim collect --online`)."""
    out: Path = Path("sysid")
    """Where to write the parameter file and the report."""
    config: Annotated[SysidConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=SysidConfig)

    def run(self) -> int:
        from realissim.data.schema import DatasetError
        from realissim.sysid.records import SysidError
        from realissim.sysid.run import identify

        try:
            result = identify(self.dataset, self.out, self.config)
        except SysidError as err:
            return fail("sysid failed", err, FAILED)
        except (DatasetError, ValueError) as err:
            return fail("invalid input", err, INVALID)
        print((self.out / "report.md").read_text())
        print(f"twin parameters: {self.out / 'sysid.json'}  ({len(result.objects)} object(s))")
        return 0
