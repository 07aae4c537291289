"""Images in the project's format (uint8 H×W×3 RGB): conversion from float renders, grids, PNG files.

PNG is written with the standard library (zlib), so no imaging package is needed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike


def to_uint8(rgb: ArrayLike) -> np.ndarray:
    """uint8 (H,W,3) from float RGB (H,W,3) in [0, 1] (clipped, rounded)."""
    arr = np.asarray(rgb, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"rgb: expected shape (H, W, 3), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("rgb: contains NaN or inf")
    return np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)


def grid(rows: Sequence[Sequence[np.ndarray]], gap: int = 2) -> np.ndarray:
    """Tile equally sized uint8 (H,W,3) images into one image, rows × columns, with white gaps (px)."""
    if not rows or not rows[0]:
        raise ValueError("rows: need at least one image")
    h, w, _ = rows[0][0].shape
    n_cols = max(len(r) for r in rows)
    out = np.full((len(rows) * (h + gap) - gap, n_cols * (w + gap) - gap, 3), 255, dtype=np.uint8)
    for i, row in enumerate(rows):
        for j, image in enumerate(row):
            if image.shape != (h, w, 3) or image.dtype != np.uint8:
                raise ValueError(f"rows[{i}][{j}]: expected uint8 {(h, w, 3)}, got {image.dtype} {image.shape}")
            out[i * (h + gap) : i * (h + gap) + h, j * (w + gap) : j * (w + gap) + w] = image
    return out


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(image: np.ndarray) -> bytes:
    """PNG bytes of a uint8 (H,W,3) RGB image."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image: expected uint8 (H, W, 3), got {image.dtype} {image.shape}")
    h, w, _ = image.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), image.reshape(h, w * 3)], axis=1)  # filter byte 0
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + _chunk(b"IEND", b"")
    )


def write_png(path: str | Path, image: np.ndarray) -> None:
    """Write a uint8 (H,W,3) RGB image as PNG (via a temporary file, so a failed write leaves nothing half-done)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(encode_png(image))
    tmp.replace(path)
