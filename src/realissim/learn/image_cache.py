"""The render cache: virtual camera images of every recorded frame of a dataset, rendered once and reused by
every training run on it.

One cache per (dataset, camera, size): `<dataset>/.cache/render-<camera>-<W>x<H>.npy`, a uint8 array
(N, H, W, 3) of every frame of every stored episode (failed ones too, so any split reuses it) in episode
order, and beside it a `.json` key: the dataset's content fingerprint (its meta and every episode's info),
the camera, the size, the cache format version, and each episode's first row. A cache whose key differs
from the dataset's present one — an episode appended, another scene, another size — is rebuilt. Written
to temporary files and renamed, key last, so an interrupted build leaves no cache that looks complete; the next
build deletes the images a killed one left (as large as the cache: 2.2 GB for 60 demonstrations at 96 × 96).

The build runs in a child process (spawned): a wrist-camera training that first rendered its cache in its own
process ran its optimiser steps ~4× slower (2.5 against 0.67 s per step, same load) than the same training in a
fresh process with the cache on disk (docs/decisions.md, "Render cache"); the child also returns the
renderer's memory when it ends.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from realissim.data.reader import Dataset
from realissim.data.render import StateRenderer
from realissim.learn.dataset import fingerprint

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Bumped when the rendering of recorded states changes in a way the key cannot see."""


class RenderCache:
    """The images of `camera` at `size` (width, height) px of every frame of `dataset`: `rows(index)` gives an
    episode's rows of `images` (a read-only memory map)."""

    def __init__(self, dataset: Dataset, camera: str, size: tuple[int, int], progress: bool = True) -> None:
        self.dataset, self.camera, self.size = dataset, camera, (int(size[0]), int(size[1]))
        folder = Path(dataset.path) / ".cache"
        stem = f"render-{camera}-{self.size[0]}x{self.size[1]}"
        self.path, self.key_path = folder / f"{stem}.npy", folder / f"{stem}.json"
        key = self._key()
        if self._stored_key() != key:
            folder.mkdir(exist_ok=True)
            _remove_stale(folder, stem)
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
                child.submit(_build, str(dataset.path), camera, self.size, self.path, self.key_path, key,
                             progress).result()  # fmt: skip
        self.images: np.ndarray = np.load(self.path, mmap_mode="r")
        self._first = {int(k): v for k, v in json.loads(self.key_path.read_text())["first_row"].items()}
        self._length = {e.index: e.length for e in dataset.all_episodes}

    def _key(self) -> dict[str, object]:
        return {
            "format": FORMAT_VERSION,
            "dataset": fingerprint(self.dataset, all_episodes=True),
            "camera": self.camera,
            "size": list(self.size),
        }

    def _stored_key(self) -> dict[str, object] | None:
        if not (self.key_path.is_file() and self.path.is_file()):
            return None
        try:
            stored = json.loads(self.key_path.read_text())
        except ValueError:
            return None
        return {k: stored.get(k) for k in ("format", "dataset", "camera", "size")}

    def rows(self, index: int) -> np.ndarray:
        """Episode `index`'s images (T, H, W, 3) uint8, a view of the memory map."""
        if index not in self._first:
            raise KeyError(f"episode {index} is not in the render cache of {self.dataset.path}")
        length = self._length[index]
        return self.images[self._first[index] : self._first[index] + length]


def _remove_stale(folder: Path, stem: str) -> None:
    """Delete the images a killed build of `stem` left in `folder` (`.<stem>.npy.<pid>.tmp.npy`, as large as the
    cache) when process <pid> is gone; a build still running in another process keeps its file."""
    for tmp in folder.glob(f".{stem}.npy.*.tmp.npy"):
        pid = tmp.name[len(f".{stem}.npy.") : -len(".tmp.npy")]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            log.info("removing %s, left by a build that did not finish", tmp)
            tmp.unlink(missing_ok=True)
        except PermissionError:
            pass  # another user's process: alive


def _build(
    dataset_path: str,
    camera: str,
    size: tuple[int, int],
    path: Path,
    key_path: Path,
    key: dict[str, object],
    progress: bool,
) -> None:
    """Render every frame of every stored episode of the dataset at `dataset_path` into `path` (then the key
    into `key_path`): the body of a cache build, run in a child process."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    dataset = Dataset(dataset_path)
    episodes = dataset.all_episodes
    total = sum(e.length for e in episodes)
    w, h = size
    log.info("rendering %s at %dx%d for %d frames of %s (cached)", camera, w, h, total, dataset.path)
    renderer = StateRenderer(dataset.meta, (camera,), size)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npy")
    images = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(total, h, w, 3))
    first, row, t0 = {}, 0, time.perf_counter()
    try:
        with tqdm(total=total, desc=f"render {camera}", unit="frame", disable=not progress) as bar:
            for info in episodes:
                first[info.index] = row
                a = dataset.arrays(info.index)
                for batch in renderer.render(a["q"][...], a["object_pos"][...], a["object_quat"][...]):
                    n = len(batch[camera])
                    images[row : row + n] = batch[camera]
                    row += n
                    bar.update(n)
        images.flush()
        del images
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    key_tmp = key_path.with_name(f".{key_path.name}.tmp")
    key_tmp.write_text(json.dumps(key | {"first_row": first, "frames": total}))
    os.replace(key_tmp, key_path)
    log.info("rendered %d frames in %.0f s", total, time.perf_counter() - t0)
