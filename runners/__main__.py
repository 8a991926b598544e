"""``python -m runners`` (installed as ``ssm-repro``): the command line of runners/cli/."""
from __future__ import annotations

import sys

from runners.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
