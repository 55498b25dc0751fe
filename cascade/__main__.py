"""`python -m cascade ...`: the command line of `cascade/cli/`, as the `cascade` script runs it."""

import sys

from .cli import main

sys.exit(main())
