"""`python -m realissim.cli`: the `realissim` command."""

import sys

from realissim.cli.main import main

sys.exit(main())
