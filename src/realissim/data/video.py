"""Video files for dataset export: RGB frames in, one MP4 stream with frame k at exactly k / fps s out.

Encoding goes through PyAV (FFmpeg). The codec is chosen among what the installed wheel carries:
LeRobot's default, AV1 by SVT-AV1 (`libsvtav1`, yuv420p, a keyframe every 2 frames, CRF 30), when the
wheel can both encode and decode it; else H.264 (`libx264`); else MPEG-4 part 2 (`mpeg4`, in every build).
Dependencies: numpy and av only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import av
import numpy as np

log = logging.getLogger(__name__)

Codec = Literal["auto", "libsvtav1", "libx264", "mpeg4"]
"""An encoder by FFmpeg name; "auto": the first of `PREFERENCE` the PyAV wheel can encode and decode."""
PREFERENCE: tuple[str, ...] = ("libsvtav1", "libx264", "mpeg4")
"""Encoders in order of preference: LeRobot's default first, then the widest-supported ones."""
_DECODED_AS = {"libsvtav1": "av1", "libx264": "h264", "mpeg4": "mpeg4"}
"""The stream's codec (what a reader needs a decoder for) per encoder."""


@dataclass(frozen=True)
class VideoConfig:
    """How camera frames are encoded (LeRobot's defaults)."""

    codec: Codec = "auto"
    """Encoder; "auto" picks the first of `PREFERENCE` that the PyAV wheel can encode and decode."""
    pix_fmt: Literal["yuv420p", "yuv444p"] = "yuv420p"
    """Pixel format of the stream (yuv420p plays everywhere; SVT-AV1 takes only yuv420p)."""
    crf: int = 30
    """Constant rate factor: lower is better quality and larger files."""
    gop: int = 2
    """Frames between keyframes: small keeps a seek to any timestamp cheap."""

    def __post_init__(self) -> None:
        if self.codec not in ("auto", *PREFERENCE):
            raise ValueError(f"VideoConfig.codec: expected 'auto' or one of {list(PREFERENCE)}, got {self.codec!r}")
        if self.codec == "libsvtav1" and self.pix_fmt != "yuv420p":
            raise ValueError("VideoConfig.pix_fmt: libsvtav1 encodes yuv420p only")
        if not 0 <= self.crf <= 63 or self.gop < 1:
            raise ValueError(f"VideoConfig: need 0 ≤ crf ≤ 63 and gop ≥ 1, got crf {self.crf}, gop {self.gop}")


def usable_codecs() -> tuple[str, ...]:
    """The encoders of `PREFERENCE` this PyAV wheel can encode with and decode the output of, in order."""
    found = []
    for name in PREFERENCE:
        try:
            av.Codec(name, "w")
            av.Codec(_DECODED_AS[name], "r")
        except (av.FFmpegError, ValueError):
            continue
        found.append(name)
    return tuple(found)


def resolve_codec(config: VideoConfig) -> str:
    """The encoder `config` asks for, checked against the wheel; ValueError naming what it carries."""
    usable = usable_codecs()
    if config.codec == "auto" and usable:
        return usable[0]
    if config.codec in usable:
        return config.codec
    raise ValueError(f"video codec {config.codec!r}: not usable with this PyAV build; usable: {list(usable)}")


def _options(codec: str, config: VideoConfig) -> dict[str, str]:
    """FFmpeg encoder options for `config` (mpeg4 has no CRF: a fixed quantiser of similar quality)."""
    if codec == "mpeg4":
        return {"g": str(config.gop), "qscale": "2"}
    return {"g": str(config.gop), "crf": str(config.crf)}


class VideoWriter:
    """Writes RGB frames to one MP4 file at `fps`: the k-th frame written is shown at exactly k / fps s.

    A context manager; `close()` flushes the encoder and finalises the file. Errors of the file system
    (a full disk) surface as OSError (PyAV's errors subclass it) from `write` or `close`.
    """

    def __init__(
        self, path: str | Path, fps: int, width: int, height: int, config: VideoConfig = VideoConfig()
    ) -> None:
        """Open `path` for `width` × `height` px frames at `fps` (an integer, frames per second)."""
        if fps < 1 or width < 2 or height < 2 or width % 2 or height % 2:
            raise ValueError(f"VideoWriter: need fps ≥ 1 and even sides ≥ 2 px, got {fps} fps, {width}×{height}")
        self.codec = resolve_codec(config)
        # SVT-AV1 prints a banner per encoder to stderr unless its own log level says otherwise.
        os.environ.setdefault("SVT_LOG", "1")
        self.path, self.width, self.height = Path(path), width, height
        self.frames = 0
        """Frames written so far."""
        self._container: Any = av.open(str(self.path), "w", format="mp4")
        try:
            stream = self._container.add_stream(self.codec, rate=fps, options=_options(self.codec, config))
            stream.width, stream.height, stream.pix_fmt = width, height, config.pix_fmt
            stream.time_base = Fraction(1, fps)
        except BaseException:
            self._container.close()
            raise
        self._stream = stream
        self._time_base = Fraction(1, fps)

    def write(self, frames: np.ndarray | Sequence[np.ndarray]) -> None:
        """Append frames uint8 (N, H, W, 3) RGB (or one (H, W, 3) frame)."""
        batch = np.asarray(frames)
        if batch.ndim == 3:
            batch = batch[None]
        if batch.dtype != np.uint8 or batch.shape[1:] != (self.height, self.width, 3):
            raise ValueError(
                f"frames: expected uint8 (N, {self.height}, {self.width}, 3), got {batch.dtype} {batch.shape}"
            )
        for image in batch:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts, frame.time_base = self.frames, self._time_base
            self._container.mux(self._stream.encode(frame))
            self.frames += 1

    def close(self) -> None:
        """Flush the encoder and finalise the file (idempotent)."""
        if self._container is None:
            return
        container, self._container = self._container, None
        try:
            container.mux(self._stream.encode(None))
        finally:
            container.close()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def video_info(path: str | Path) -> dict[str, Any]:
    """LeRobot's `info` block of a video feature, probed from the file's first video stream: `video.height`,
    `video.width`, `video.codec`, `video.pix_fmt`, `video.is_depth_map`, `video.fps`, `video.channels`,
    `has_audio`."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        channels = 1 if "gray" in stream.pix_fmt else 4 if ("rgba" in stream.pix_fmt or "yuva" in stream.pix_fmt) else 3
        return {
            "video.height": int(stream.height),
            "video.width": int(stream.width),
            "video.codec": stream.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(stream.base_rate),
            "video.channels": channels,
            "has_audio": len(container.streams.audio) > 0,
        }
