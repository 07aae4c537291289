"""The layer order in pyproject.toml holds, and the check that enforces it can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (pip install -e '.[dev]')")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=src,
        timeout=120,
    )


def test_the_package_graph_has_no_upward_import() -> None:
    run = _lint(ROOT / "src")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("policy/base.py", "import realissim.eval\n"),  # the seam reaching up to evaluation
        ("twin/physics.py", "\n\ndef _late():\n    from realissim.runtime import loop\n\n    return loop\n"),  # lazy
        ("envs/env.py", "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import realissim.learn\n"),
    ],
)
def test_an_added_upward_import_breaks_the_check(tmp_path: Path, module: str, line: str) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "realissim", src / "realissim", ignore=shutil.ignore_patterns("__pycache__"))
    with open(src / "realissim" / module, "a") as f:
        f.write(line)
    run = _lint(src)
    assert run.returncode != 0, run.stdout
    assert "0 kept, 1 broken" in run.stdout
    assert f"realissim.{module.split('/')[0]} is not allowed to import" in run.stdout
