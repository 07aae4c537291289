"""`realissim report DIR`: one self-contained HTML page from an evaluation's report folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from realissim.cli.common import INVALID, fail


@dataclass
class Report:
    """Build one self-contained HTML page (`DIR/report.html`, figures embedded) from a report folder written by
    `realissim eval offline|online|sweep --out DIR`."""

    folder: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DIR")]
    """The report folder."""
    title: str | None = None
    """Page title (None: the folder's name)."""

    def run(self) -> int:
        from realissim.eval.report import build_html

        try:
            path = build_html(self.folder, self.title)
        except ValueError as err:
            return fail("invalid report folder", err, INVALID)
        print(f"wrote {path}")
        return 0
