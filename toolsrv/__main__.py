"""`python -m toolsrv` and the `toolsrv` console script: the command itself is cli/command.py."""
from __future__ import annotations

import sys

from .cli.command import main

if __name__ == "__main__":
    sys.exit(main())
