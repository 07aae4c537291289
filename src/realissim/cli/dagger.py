"""`realissim dagger CHECKPOINT --data DEMOS --out RUN`: expert relabelling rounds through the twin (`learn.dagger`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.cli.common import FAILED, INVALID, fail, print_report
from realissim.learn.dagger import DaggerConfig


@dataclass
class Dagger:
    """DAgger through the twin: roll the policy out in batched twins, have the task's expert label the states it
    visits (its chunk there), add the labelled rollouts to a copy of the demonstrations and fine-tune the policy on
    them; --rounds times. The same command resumes an interrupted run. OUT/dagger.json journals each round; the
    last round's policy is its round_NN/last.pt."""

    target: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """The policy of the first round (trained on --data)."""
    data: Path = Path("data/pusht_expert")
    """The demonstrations the policy was trained on (copied into OUT/data, where the labels are added)."""
    out: Path = Path("runs/dagger")
    """The run directory."""
    config: Annotated[DaggerConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=DaggerConfig)

    def run(self) -> int:
        from realissim.data.schema import DatasetError
        from realissim.learn.dagger import run_dagger
        from realissim.policy.factory import CheckpointError
        from realissim.spec.errors import SpecError

        try:
            report = run_dagger(self.config, self.target, self.data, self.out)
        except (KeyError, ValueError, SpecError) as err:
            return fail("invalid option", err, INVALID)
        except (CheckpointError, DatasetError, FileExistsError) as err:
            return fail("dagger failed", err, FAILED)
        last = report.rounds[-1]
        summary = {"rounds": len(report.rounds), "labelled_frames": report.labelled_frames,
                   "last_round_rollout_success": f"{last.rollout_successes}/{last.rollouts}",
                   "policy": report.policy}  # fmt: skip
        print_report(f"DAgger from {self.target}", summary, self.out)
        return 0
