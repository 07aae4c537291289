"""What every verb shares: the report printer and the exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

INVALID = 2
"""Exit code: an invalid option or input file (the message names it)."""
FAILED = 3
"""Exit code: the work itself failed (a dataset, checkpoint, surrogate or worker error; the message says which)."""


def fail(kind: str, err: BaseException, code: int) -> int:
    """Print `kind: err` to stderr and return `code`."""
    print(f"{kind}: {err}", file=sys.stderr)
    return code


def print_report(title: str, report: dict, out: Path | None) -> None:
    """A command's report as aligned `key  value` lines under a title, and where its outputs went."""
    width = max(len(k) for k in report)
    print(title)
    for key, value in report.items():
        print(f"  {key:<{width}}  {value:.4g}" if isinstance(value, float) else f"  {key:<{width}}  {value}")
    if out is not None:
        print(f"outputs in {out}/")
