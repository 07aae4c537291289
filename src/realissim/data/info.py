"""`describe`: the human-readable summary of a dataset printed by `realissim data info DATASET`."""

from __future__ import annotations

import os
from pathlib import Path

import zarr

from realissim.data.reader import Dataset
from realissim.data.schema import FIELDS, RELABEL_KEY, START_SET_KEY


def describe(path: str | Path) -> str:
    """The summary of the dataset at `path`: meta; episodes (total, successful, failed), frames, duration and
    success rate; relabelled rollouts and targeted episodes, when there are any; each stored field's shape (T =
    frames of an episode), dtype, chunks, compressors and size on disk over all episodes; the total size on disk.
    DatasetError if there is no readable dataset."""
    ds = Dataset(path, include_failed=True)
    m = ds.meta
    done = [e for e in ds.all_episodes if e.success]
    frames = sum(e.length for e in ds.all_episodes)
    seconds = frames / m.fps
    rate = f"{100 * len(done) / len(ds.all_episodes):.1f} %" if ds.all_episodes else "n/a"
    cams = f"{', '.join(m.cameras)} ({m.image_size[0]}×{m.image_size[1]} px)" if m.image_size else "none"
    lines = [
        f"dataset    {ds.path}",
        f"task       {m.task}",
        f"source     {m.source}, {'online (gap: ' + str(m.gap) + ')' if m.online else 'offline'}",
        f"fps        {m.fps:g}",
        f"scene      {m.scene.name}: {len(m.joint_names)} joints, objects {', '.join(m.object_names) or 'none'}",
        f"cameras    {cams}",
        f"code       {m.code_version}",
        f"created    {m.created}",
        f"episodes   {len(ds.all_episodes)} total: {len(done)} successful, {len(ds.all_episodes) - len(done)} failed",
        f"success    {rate}",
        f"frames     {frames} ({seconds:.1f} s; {seconds / max(len(ds.all_episodes), 1):.1f} s per episode)",
        f"size       {_human(_du(ds.path))} on disk",
    ]
    relabelled = [e for e in ds.all_episodes if RELABEL_KEY in e.extra]
    if relabelled:
        labels = sum(int(e.extra[RELABEL_KEY].get("labelled_frames", 0)) for e in relabelled)
        rounds = sorted({e.extra[RELABEL_KEY].get("round") for e in relabelled}, key=str)
        lines.append(f"relabelled {len(relabelled)} policy rollouts (rounds {', '.join(map(str, rounds))}), "
                     f"{labels} frames labelled by the expert (they train, success or not)")  # fmt: skip
    targeted = [e for e in ds.all_episodes if START_SET_KEY in e.extra]
    if targeted:
        files = sorted({str(e.extra[START_SET_KEY].get("file")) for e in targeted})
        lines.append(f"targeted   {len(targeted)} episodes from start-set files: {', '.join(files)}")
    return "\n".join(lines + _fields(ds)) + "\n"


def _fields(ds: Dataset) -> list[str]:
    """A table of the first episode's stored arrays, each with its size summed over all episodes."""
    if not ds.all_episodes:
        return ["fields     none (no episodes)"]
    oracle = {f.name for f in FIELDS if f.evaluation_only}
    rows = [("field", "shape", "dtype", "chunks", "compressors", "on disk", "")]
    for name, arr in ds.arrays(ds.all_episodes[0].index).items():
        size = sum(_du(ds.path / "episodes" / f"{e.index:06d}" / name) for e in ds.all_episodes)
        note = "EVALUATION ONLY" if name in oracle else ""
        rows.append((name, _shape(arr), str(arr.dtype), _shape(arr, arr.chunks), _codecs(arr), _human(size), note))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    table = [
        "  " + "  ".join(v.rjust(w) if c == 5 else v.ljust(w) for c, (v, w) in enumerate(zip(r, widths))) for r in rows
    ]
    return ["fields     (T = frames of the episode)", *(line.rstrip() for line in table)]


def _shape(arr: zarr.Array, shape: tuple[int, ...] | None = None) -> str:
    """The array's shape with T for its frames, e.g. "(T, 1, 3)"; or `shape` (its chunks) as is."""
    dims = ["T", *map(str, arr.shape[1:])] if shape is None else [str(s) for s in shape]
    return f"({', '.join(dims)})" if len(dims) > 1 else f"({dims[0]},)"


def _codecs(arr: zarr.Array) -> str:
    names = []
    for c in arr.compressors:
        cname, level = getattr(c, "cname", None), getattr(c, "clevel", getattr(c, "level", None))
        label = type(c).__name__.removesuffix("Codec").lower()
        names.append(f"{label}({getattr(cname, 'value', cname)}, {level})" if cname else f"{label}({level})")
    shards = " sharded" if arr.shards is not None else ""
    return (" + ".join(names) or "none") + shards


def _du(path: Path) -> int:
    """Bytes in the files under `path`."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _human(n: float) -> str:
    unit = 0
    while n >= 1024 and unit < 3:
        n, unit = n / 1024, unit + 1
    return f"{n:.0f} B" if unit == 0 else f"{n:.1f} {('KiB', 'MiB', 'GiB')[unit - 1]}"
