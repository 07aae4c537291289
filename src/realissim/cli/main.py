"""The `realissim` command's dispatch: the verbs, one module each, as tyro sub-commands."""

from __future__ import annotations

import functools
import importlib
import logging
import operator
import sys
from typing import Annotated, Any

import tyro

VERBS: dict[str, tuple[str, str]] = {
    "demo": ("realissim.cli.demo", "Demo"),
    "push": ("realissim.cli.push", "Push"),
    "scene": ("realissim.cli.scene", "Scene"),
    "surrogate": ("realissim.cli.surrogate", "Surrogate"),
    "collect": ("realissim.cli.collect", "Collect"),
    "data": ("realissim.cli.data", "Data"),
    "export": ("realissim.cli.export", "Export"),
    "teleop": ("realissim.cli.teleop", "Teleop"),
    "train": ("realissim.cli.train", "Train"),
    "mine": ("realissim.cli.mine", "Mine"),
    "dagger": ("realissim.cli.dagger", "Dagger"),
    "sysid": ("realissim.cli.sysid", "Sysid"),
    "policy": ("realissim.cli.policy", "PolicyInfo"),
    "eval": ("realissim.cli.eval", "Eval"),
    "report": ("realissim.cli.report", "Report"),
}
"""Every verb: (its module, the dataclass — or union of sub-commands — that tyro builds from its flags). `demo`
runs `apps.demo`, `push` `apps.push`, `surrogate` `apps.surrogate`, `collect` `apps.collect`."""


def _verb(name: str) -> Any:
    return getattr(importlib.import_module(VERBS[name][0]), VERBS[name][1])


def _eval_help() -> str:
    from realissim.cli.eval import EVAL_HELP

    return EVAL_HELP


def commands() -> Any:
    """All verbs as one union of tyro sub-commands (imports every verb's module: for the command's own help)."""
    return functools.reduce(
        operator.or_,
        [
            Annotated[_verb(name), tyro.conf.subcommand(name, description=_eval_help() if name == "eval" else None)]
            for name in VERBS
        ],
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `realissim` command: parse `argv` (None: the process's), run the verb, return its exit
    code. tyro exits with status 2 (SystemExit), naming the flag, on an invalid option — including a value a
    config's own check refuses."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in VERBS:  # only that verb's module is imported: its help and its start stay fast
        command = tyro.cli(
            _verb(args[0]),
            args=args[1:],
            prog=f"realissim {args[0]}",
            description=_eval_help() if args[0] == "eval" else None,
            config=(tyro.conf.OmitSubcommandPrefixes,),
        )
    else:
        command = tyro.cli(
            commands(),
            args=args,
            prog="realissim",
            description="realissim: the Real-is-Sim digital twin toolkit.",
            config=(tyro.conf.OmitSubcommandPrefixes,),
        )
    return command.run()


if __name__ == "__main__":
    sys.exit(main())
