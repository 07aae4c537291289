"""Shared-memory segments: layout, seqlocked blocks, attach from another process, no leaks."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest

from realissim.real.shm import SHM_PREFIX, ArraySpec, BlockSpec, SharedSegment, ShmLayout

LAYOUT = ShmLayout(
    (
        BlockSpec("a", (ArraySpec("x", (3,), "float64"), ArraySpec("n", (), "int64"))),
        BlockSpec("img", (ArraySpec("image", (240, 320, 3), "uint8"),)),
    )
)


def _leaked() -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(SHM_PREFIX)]


def _writer(name: str, n: int) -> None:
    seg = SharedSegment(LAYOUT, name=name)
    for i in range(n):
        seg.blocks["img"].write(image=np.full((240, 320, 3), i % 256, np.uint8))
        seg.blocks["a"].write(x=np.full(3, float(i)), n=i)
    seg.close()


def test_shm_blocks_round_trip_and_are_aligned() -> None:
    assert all(offset % 8 == 0 for offset in LAYOUT.offsets.values())
    seg = SharedSegment(LAYOUT)
    try:
        seg.blocks["a"].write(x=np.array([1.0, 2.0, 3.0]), n=4)
        got = seg.blocks["a"].read()
        assert got["x"].tolist() == [1.0, 2.0, 3.0] and int(got["n"]) == 4
        assert seg.blocks["a"].seq == 2
        got["x"][0] = 99.0  # a copy: the segment is untouched
        assert seg.blocks["a"].read()["x"][0] == 1.0
    finally:
        seg.close()
    assert seg.name.removeprefix("/") not in _leaked()


def test_reader_never_sees_a_torn_frame_from_another_process() -> None:
    seg = SharedSegment(LAYOUT)
    try:
        proc = mp.get_context("spawn").Process(target=_writer, args=(seg.name, 3000))
        proc.start()
        seen = 0
        while proc.is_alive() or seen == 0:
            image = seg.blocks["img"].read()["image"]
            assert np.all(image == image.flat[0]), "torn read: a frame mixes two writes"
            a = seg.blocks["a"].read()
            assert np.all(a["x"] == float(a["n"]))
            seen += 1
        proc.join(10)
        assert proc.exitcode == 0
    finally:
        seg.close()
    assert not [n for n in _leaked() if n == seg.name.removeprefix("/")]


def test_a_stuck_writer_is_reported() -> None:
    seg = SharedSegment(LAYOUT)
    try:
        seg.blocks["a"]._seq[0] = 1  # a writer that died half-way
        with pytest.raises(TimeoutError, match="'a'"):
            seg.blocks["a"].read(timeout=0.05)
    finally:
        seg.close()
