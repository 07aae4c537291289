"""A collecting process for the crash test of the episode store: scripted PushT episodes, offline, recorded
into DATASET in a loop until killed.

It prints "ready <next index>" once the dataset is open; per episode "writing <index>" when its frames are
done, "array <name>" as each of its arrays starts to be written (so that the test can kill it in the middle of
an episode's write), and "finished <index> <frames>" once the episode is stored.

Usage: python data_collect_child.py DATASET SECONDS
"""

from __future__ import annotations

import sys
from typing import Any


def main(path: str, seconds: float) -> None:
    import zarr

    from realissim.data.recorder import EpisodeRecorder, meta_for_env
    from realissim.data.store import DatasetWriter
    from realissim.envs.env import Env
    from realissim.eval.episode import EpisodeObserver, EpisodeResult, run_episode
    from realissim.expert.scripted import ScriptedPush
    from realissim.tasks import make

    create_array = zarr.Group.create_array

    def announced(self: zarr.Group, name: str, **kwargs: Any) -> Any:
        print("array", name, flush=True)
        return create_array(self, name, **kwargs)

    zarr.Group.create_array = announced  # type: ignore[method-assign]

    class Announce(EpisodeObserver):
        def on_end(self, result: EpisodeResult | list[EpisodeResult]) -> None:
            print("writing", writer.next_index, flush=True)

    task = make("pusht")
    env = Env(task)
    policy = ScriptedPush(task.scene)
    with DatasetWriter(path, meta_for_env(env, "expert")) as writer:
        recorder = EpisodeRecorder(writer)
        print("ready", writer.next_index, flush=True)
        while True:
            recorder.seed = writer.next_index
            run_episode(env, policy, None, seconds, [Announce(), recorder], stop_on_success=False, seed=recorder.seed)
            assert recorder.last is not None
            print("finished", recorder.last.index, recorder.last.length, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
