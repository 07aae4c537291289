"""LeRobot's dataset format v3.0 as realissim writes it: the file layout, the feature descriptions, one episode's
data columns and their arrow schema (`data.lerobot` writes the files). See `data.lerobot` for what each feature
holds."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from realissim.data.schema import DatasetMeta, EpisodeData, EpisodeInfo

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INFO_PATH, STATS_PATH, TASKS_PATH = "meta/info.json", "meta/stats.json", "meta/tasks.parquet"
EXPORT_PATH = "meta/realissim_export.json"
IMAGE_KEY = "observation.images.{camera}"


def features(meta: DatasetMeta, cameras: Sequence[str], size: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """LeRobot's feature descriptions (dtype, shape, names), cameras' `info` blocks still to be probed."""
    joints = list(meta.joint_names)
    objects = [f"{o}_{c}" for o in meta.object_names for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
    vector = lambda names: {"dtype": "float32", "shape": [len(names)], "names": names}  # noqa: E731
    features = {
        "observation.state": vector([*joints, "tip_x", "tip_y", "tip_z"]),
        "observation.environment_state": vector(objects),
        "action": vector(joints),
        "progress": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "next.success": {"dtype": "bool", "shape": [1], "names": None},
    }
    for camera in cameras:
        shape = [size[1], size[0], 3]
        features[IMAGE_KEY.format(camera=camera)] = {
            "dtype": "video",
            "shape": shape,
            "names": ["height", "width", "channels"],
        }
    features |= {"timestamp": {"dtype": "float32", "shape": [1], "names": None}}
    features |= {
        k: {"dtype": "int64", "shape": [1], "names": None}
        for k in ("frame_index", "episode_index", "index", "task_index")
    }
    return features


def episode_columns(
    ep: EpisodeData, info: EpisodeInfo, stride: int, fps: int, episode_index: int, start: int
) -> dict[str, np.ndarray]:
    """The data columns (every non-video feature, (n, ...) each) of one episode resampled by `stride`, its
    first frame being row `start` of the dataset.

    A source frame i holds the state after frame i and the q′ commanded during it, so the step from
    exported frame k (source frame k·s) to the next one is driven by the commands of source frames
    k·s + 1 … (k + 1)·s: its action is the last of them, q′ at (k + 1)·s (the last frame repeats the
    episode's last command), and `next.success` says whether success was judged by that frame's time."""
    length = len(ep.time)
    rows = np.arange(0, length, stride)
    n = len(rows)
    after = np.minimum(rows + stride, length - 1)
    done = np.zeros(n, dtype=bool)
    done[-1] = True
    objects = np.concatenate([ep.object_pos[rows], ep.object_quat[rows]], axis=2)
    return {
        "observation.state": np.concatenate([ep.q[rows], ep.tip[rows]], axis=1).astype(np.float32),
        "observation.environment_state": objects.reshape(n, -1).astype(np.float32),
        "action": ep.q_des[after].astype(np.float32),
        "progress": ep.progress[rows].astype(np.float32),
        "next.done": done,
        "next.success": ep.time[after] >= info.success_time - 1e-9,
        "timestamp": (np.arange(n) / fps).astype(np.float32),
        "frame_index": np.arange(n, dtype=np.int64),
        "episode_index": np.full(n, episode_index, dtype=np.int64),
        "index": np.arange(start, start + n, dtype=np.int64),
        "task_index": np.zeros(n, dtype=np.int64),
    }


ARROW_TYPES = {"float32": pa.float32(), "int64": pa.int64(), "bool": pa.bool_()}


def data_schema(features: dict[str, dict[str, Any]]) -> pa.Schema:
    """Arrow schema of the data files: scalars for shape (1,), fixed-size lists for vectors, with the
    `huggingface` metadata that lets `datasets` load them with the right features."""
    fields, hf = [], {}
    for key, ft in features.items():
        if ft["dtype"] == "video":
            continue
        value = {"dtype": ft["dtype"], "_type": "Value"}
        if ft["shape"] == [1]:
            fields.append(pa.field(key, ARROW_TYPES[ft["dtype"]]))
            hf[key] = value
        else:
            fields.append(pa.field(key, pa.list_(ARROW_TYPES[ft["dtype"]], ft["shape"][0])))
            hf[key] = {"feature": value, "length": ft["shape"][0], "_type": "Sequence"}
    return pa.schema(fields, metadata={"huggingface": json.dumps({"info": {"features": hf}})})


def table(columns: dict[str, np.ndarray], schema: pa.Schema) -> pa.Table:
    """`columns` (`episode_columns`) as an arrow table of `schema` (`data_schema`)."""
    arrays = []
    for field in schema:
        x = columns[field.name]
        if pa.types.is_fixed_size_list(field.type):
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1]))
        else:
            arrays.append(pa.array(x, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
