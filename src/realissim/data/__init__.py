"""The episode store (docs/design.md §7): a crash-safe zarr v3 dataset of recorded episodes, its recorder
(an episode observer) and its summary.

`schema` says what a dataset holds, `store` writes it and `reader` reads it (they know only arrays and
files); `recorder` links the store to environments; `info` prints it; `lerobot` exports it (`stats`: its
feature statistics).
"""

from realissim.data.reader import Dataset
from realissim.data.schema import (
    FIELDS,
    DatasetError,
    DatasetMeta,
    EpisodeData,
    EpisodeInfo,
    code_version,
    progress_label,
)
from realissim.data.store import DatasetWriter

__all__ = [
    "FIELDS",
    "Dataset",
    "DatasetError",
    "DatasetMeta",
    "DatasetWriter",
    "EpisodeData",
    "EpisodeInfo",
    "code_version",
    "progress_label",
]
