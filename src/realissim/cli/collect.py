"""`realissim collect`: demonstrations through the twin into an episode store (`apps.collect`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Annotated

import tyro

from realissim.apps.collect import CollectConfig
from realissim.cli.common import FAILED, INVALID, fail, print_report


@dataclass
class Collect:
    """Record demonstrations through the twin into an episode store (zarr): the task's expert, offline or online
    over a surrogate real world; a progress bar; running it again on the same dataset appends more episodes.
    Failed episodes are kept, marked failed (excluded downstream by default)."""

    config: Annotated[CollectConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=CollectConfig)

    def run(self) -> int:
        from realissim.apps.collect import CollectError, collect
        from realissim.data.store import DatasetError
        from realissim.real.surrogate.process import SurrogateError
        from realissim.spec.errors import SpecError

        c = self.config
        if c.realtime:
            import os

            from realissim.util.threads import reserve_core_for_world

            reserve_core_for_world()
            if 2 * c.workers > (os.cpu_count() or 2):
                print(f"warning: {c.workers} real-time workers on {os.cpu_count()} cores: each needs about two, "
                      "they will lag the wall clock", file=sys.stderr)  # fmt: skip
        if c.policy == "teleop":
            print("teleoperated episodes are recorded in the browser: realissim teleop --out DATASET", file=sys.stderr)
            return INVALID
        try:
            report = collect(c)
        except (SpecError, ValueError, KeyError) as err:
            return fail("invalid option", err, INVALID)
        except DatasetError as err:
            return fail("dataset error", err, FAILED)
        except SurrogateError as err:
            return fail("surrogate failed", err, FAILED)
        except CollectError as err:
            return fail("collect failed", err, FAILED)
        where = ("online, real time" if c.realtime else "online") if c.online else "offline"
        print_report(f"Collected {c.task} demonstrations ({where})", report.as_dict(), None)
        print(f"dataset: {c.out}")
        return 0
