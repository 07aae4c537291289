"""Fixed-layout shared memory between the runtime and the surrogate process, with seqlocked blocks.

One `SharedMemory` segment holds named numpy arrays at fixed offsets (`ShmLayout`). Each block has a
sequence counter: a writer makes it odd, writes, makes it even; a reader copies the block and retries
if the counter changed or was odd, so a reader never sees a half-written frame. There is one writer
per block. The segment is created and unlinked by the parent only.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass, field
from multiprocessing import shared_memory

import numpy as np

SHM_PREFIX = "realissim_"
"""Every segment's name starts with this, so leaks are easy to find in /dev/shm."""


@dataclass(frozen=True)
class ArraySpec:
    """A named array in a block: shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class BlockSpec:
    """A group of arrays written together under one sequence counter."""

    name: str
    arrays: tuple[ArraySpec, ...]


@dataclass(frozen=True)
class ShmLayout:
    """Offsets of every block's counter and arrays in the segment (8-byte aligned)."""

    blocks: tuple[BlockSpec, ...]
    offsets: dict[str, int] = field(init=False, compare=False)
    size: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        offsets, pos = {}, 0
        for block in self.blocks:
            offsets[block.name + ".seq"] = pos
            pos += 8
            for arr in block.arrays:
                offsets[block.name + "." + arr.name] = pos
                nbytes = int(np.prod(arr.shape, dtype=np.int64)) * np.dtype(arr.dtype).itemsize
                pos += (nbytes + 7) // 8 * 8
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "size", max(pos, 8))


class SeqBlock:
    """Views of one block's arrays in a buffer, with seqlocked write and read."""

    def __init__(self, buf: memoryview, layout: ShmLayout, spec: BlockSpec) -> None:
        self.spec = spec
        self._seq = np.ndarray((1,), np.int64, buf, layout.offsets[spec.name + ".seq"])
        self.views = {
            a.name: np.ndarray(a.shape, np.dtype(a.dtype), buf, layout.offsets[spec.name + "." + a.name])
            for a in spec.arrays
        }

    @property
    def seq(self) -> int:
        return int(self._seq[0])

    def write(self, **values: np.ndarray | float | int) -> None:
        """Write the given arrays (all or some of the block's) atomically for readers."""
        self._seq[0] += 1
        for name, value in values.items():
            self.views[name][...] = value
        self._seq[0] += 1

    def read(self, timeout: float = 1.0) -> dict[str, np.ndarray]:
        """A consistent copy of every array of the block."""
        deadline = time.monotonic() + timeout
        while True:
            before = self.seq
            if before % 2 == 0:
                out = {name: view.copy() for name, view in self.views.items()}
                if self.seq == before:
                    return out
            if time.monotonic() > deadline:
                raise TimeoutError(f"shared block {self.spec.name!r}: writer never finished (seq {before})")
            time.sleep(0)


class SharedSegment:
    """A shared-memory segment with a layout: created by the owner, attached by the other process."""

    def __init__(self, layout: ShmLayout, name: str | None = None) -> None:
        self.layout = layout
        self.owner = name is None
        if self.owner:
            self.shm = shared_memory.SharedMemory(name=_fresh_name(), create=True, size=layout.size)
            np.ndarray((layout.size,), np.uint8, self.shm.buf)[:] = 0
        else:
            # Attaching registers the name with the resource tracker again; processes we spawn share the
            # owner's tracker, whose registry is a set, so that is harmless and the owner's unlink clears it.
            self.shm = shared_memory.SharedMemory(name=name)
        self.name: str = self.shm.name
        """The segment's name (pass it to the other process)."""
        self.blocks = {b.name: SeqBlock(self.shm.buf, layout, b) for b in layout.blocks}

    def close(self) -> None:
        """Drop the views and the mapping; the owner also removes the segment. Idempotent."""
        if self.shm is None:
            return
        self.blocks = {}
        # BufferError: a caller still holds a view into the segment; the mapping goes with the process.
        with contextlib.suppress(BufferError):
            self.shm.close()
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()
        self.shm = None  # type: ignore[assignment]


def _fresh_name() -> str:
    return f"{SHM_PREFIX}{secrets.token_hex(6)}"
