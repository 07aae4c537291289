"""`realissim mine CHECKPOINT`: where a policy fails, offline in batched twins, as a start set to demonstrate
from (`apps.mine`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from realissim.apps.mine import MineConfig
from realissim.cli.common import FAILED, INVALID, fail, print_report


@dataclass
class Mine:
    """Run a policy on a start set in parallel twins, find the states where it stalls, pushes the object away or is
    left at the end of a failed or slow episode (and, with --data, poses its demonstrations rarely saw), cluster
    them by object pose, and write OUT/mined.json — a start-set file that `realissim collect --starts` and `realissim
    eval … --starts` take — with OUT/failures.csv, OUT/summary.json, OUT/failures.png and the evaluation's report."""

    target: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """A checkpoint (a run's last.pt or checkpoints/step_*.pt)."""
    out: Path = Path("mined")
    """Where to write the start set and the summary."""
    starts: str | None = None
    """The start set to mine on: a shipped one or a start-set file (None: `count` fresh starts drawn by --seed from
    the task's sampler — never mine on the test set you will report)."""
    count: int = 100
    """Fresh starts to draw when --starts is not given."""
    data: Path | None = None
    """The demonstrations the policy learnt from (an episode store): also mine poses they rarely saw."""
    task: str = "pusht"
    steps: int | None = None
    """Euler steps of the policy (None: the checkpoint's)."""
    threads: int = 1
    max_seconds: float | None = None
    """Time limit of an episode, simulated s (None: the task's)."""
    config: Annotated[MineConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=MineConfig)

    def run(self) -> int:
        from realissim.data.schema import DatasetError
        from realissim.policy.factory import CheckpointError, load_policy
        from realissim.spec.errors import SpecError
        from realissim.tasks import make, start_set, start_set_label
        from realissim.tasks.base import generate_start_set

        try:
            task = make(self.task)
            if self.starts is not None:
                starts, label = start_set(self.starts, self.task), start_set_label(self.starts)
            else:
                if self.count < 1:
                    raise ValueError(f"count: must be ≥ 1, got {self.count}")
                shipped = {spec.seed for spec in task.start_sets.values()}
                seed = 7_000_000 + self.config.seed
                if seed in shipped:
                    raise ValueError(f"seed: draws a shipped start set's starts ({seed})")
                starts, label = generate_start_set(task, self.count, seed), f"fresh{self.count}-s{self.config.seed}"
            policy = load_policy(
                str(self.target), "flow", steps=self.steps, seed=self.config.seed, threads=self.threads
            )
            policy.check_scene(task.scene)
            if policy.needs.real_images:
                raise ValueError("a policy trained on real camera frames runs online only; mine a twin policy")
            from realissim.apps.mine import mine, write_mined

            report = mine(task, policy, starts, self.config, self.data, self.max_seconds)
            about = {"checkpoint": str(self.target), "starts": self.starts or label, "label": label,
                     "data": None if self.data is None else str(self.data)}  # fmt: skip
            path = write_mined(report, task, self.out, about, self.config)
        except (KeyError, ValueError, SpecError) as err:
            return fail("invalid option", err, INVALID)
        except (CheckpointError, DatasetError) as err:
            return fail("mine failed", err, FAILED)
        print_report(f"Failures of {self.target}", report.summary(), self.out)
        print(f"start set: {path}  (realissim collect --starts {path} …)")
        return 0
