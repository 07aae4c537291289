"""What every application shares after its episodes: the report, written whole into its output folder.

An application runs its episodes with `eval.episode.run_episode` (or a sync scenario, which does), records
them with `EpisodeObserver`s, and reports through a `RunOutputs`: a folder, or nowhere (`out=None`). Each
write names the file it made, in order, so the command can list its outputs; every file is written whole (a
temporary file beside the target, renamed over it), so an interrupted run never leaves half a report.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from realissim.util.images import write_png
from realissim.util.jsonable import jsonable

if TYPE_CHECKING:
    from realissim.spec.scene import SceneSpec

log = logging.getLogger(__name__)


class RunOutputs:
    """An application's output folder (created on the first write), or nowhere when `out` is None.

    Every writer returns the path written (None when writing nowhere) and appends the file's name to
    `written`. Names are relative to the folder.
    """

    def __init__(self, out: Path | None) -> None:
        self.out = out
        self.written: list[str] = []

    @property
    def enabled(self) -> bool:
        """Whether anything is written."""
        return self.out is not None

    def path(self, name: str) -> Path | None:
        """Where a file `name` goes (the folder made if need be), for writers of their own (e.g. a recording);
        call `add(name)` once it is written. None when writing nowhere."""
        if self.out is None:
            return None
        self.out.mkdir(parents=True, exist_ok=True)
        return self.out / name

    def add(self, name: str) -> None:
        """Count `name`, written by someone else, among the outputs."""
        if self.out is not None:
            self.written.append(name)

    def bytes(self, name: str, data: bytes) -> Path | None:
        """Write `data` to `name` whole."""
        path = self.path(name)
        if path is None:
            return None
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.written.append(name)
        return path

    def text(self, name: str, text: str) -> Path | None:
        """Write UTF-8 `text` to `name`."""
        return self.bytes(name, text.encode("utf-8"))

    def json(self, name: str, value: Any) -> Path | None:
        """Write `value` as indented JSON (NumPy values, dataclasses and paths made plain by `jsonable`)."""
        return self.text(name, json.dumps(jsonable(value), indent=2))

    def npz(self, name: str, **arrays: Any) -> Path | None:
        """Write `arrays` (name → array-like) as a compressed NumPy archive."""
        if self.out is None:
            return None
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        return self.bytes(name, buffer.getvalue())

    def png(self, name: str, image: np.ndarray) -> Path | None:
        """Write an (H, W, 3) uint8 image as PNG."""
        path = self.path(name)
        if path is None:
            return None
        write_png(path, image)
        self.written.append(name)
        return path

    def scene(self, scene: SceneSpec, name: str = "scene.json") -> Path | None:
        """Write the scene description (the strict JSON that `realissim scene --check` reads)."""
        from realissim.spec.io import scene_to_json

        return self.text(name, scene_to_json(scene))

    def summary(self, extra: Mapping[str, Any] | None = None) -> None:
        """Log what was written, and where."""
        if self.out is not None and self.written:
            log.info("wrote %s to %s%s", ", ".join(self.written), self.out, f" ({dict(extra)})" if extra else "")
