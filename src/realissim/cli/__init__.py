"""The `realissim` command: one module per verb, each a dataclass that tyro builds from its flags and whose
`run()` returns the exit code (0 done, 2 invalid input, 3 the work failed). `main` dispatches."""

from realissim.cli.main import main

__all__ = ["main"]
