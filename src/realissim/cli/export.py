"""`realissim export lerobot DATASET OUT`: an episode store as a LeRobot v3.0 dataset (`data.lerobot`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from realissim.cli.common import FAILED, INVALID, fail, print_report


@dataclass
class Export:
    """Export an episode store: `realissim export lerobot DATASET OUT [--fps 10] [--cameras wrist,front]` writes
    a LeRobot v3.0 dataset (parquet + mp4 videos rendered from the recorded twin states)."""

    format: tyro.conf.Positional[Literal["lerobot"]]
    """Target format."""
    dataset: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DATASET")]
    """The source dataset (never modified)."""
    out: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="OUT")]
    """The new dataset's folder (must not exist or be empty, unless --overwrite)."""
    fps: int = 10
    """Frame rate of the export (must divide the dataset's)."""
    cameras: str = "front,wrist"
    """Virtual cameras to render as videos, comma-separated (scene cameras and/or wrist; empty: none)."""
    image_size: tuple[int, int] = (96, 96)
    """Video size, px (width, height)."""
    include_failed: bool = False
    """Export failed episodes too."""
    overwrite: bool = False
    """Replace an existing export at OUT."""
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        from realissim.data.lerobot import export_lerobot
        from realissim.data.store import DatasetError

        cameras = tuple(c.strip() for c in self.cameras.split(",") if c.strip())
        try:
            report = export_lerobot(self.dataset, self.out, fps=self.fps, cameras=cameras,
                                    include_failed=self.include_failed, image_size=self.image_size,
                                    overwrite=self.overwrite, progress=self.progress)  # fmt: skip
        except ValueError as err:
            return fail("invalid option", err, INVALID)
        except DatasetError as err:
            return fail("export failed", err, FAILED)
        print_report(f"Exported {self.dataset} to LeRobot v3.0", {
            "episodes": report.episodes, "skipped (failed)": report.skipped, "frames": report.frames,
            "fps": report.fps, "cameras": ",".join(report.cameras) or "-", "codec": report.codec or "-",
            "files": len(report.files), "MB": report.bytes / 1e6, "wall_s": report.wall_s,
            "frames_per_s": report.frames_per_s}, None)  # fmt: skip
        print(f"dataset: {report.out}")
        return 0
