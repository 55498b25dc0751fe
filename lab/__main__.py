"""`python -m lab <command>`: the lab's command line, run by the package's own `main` (a model or settings
error becomes one line and exit status 2)."""

from __future__ import annotations

import sys

from cascade.cli import main
from cascade.cli.shared import Command
from lab.cli import calibrate, load, routers, side_by_side

COMMANDS: tuple[Command, ...] = (*routers.COMMANDS, *calibrate.COMMANDS, *side_by_side.COMMANDS, *load.COMMANDS)
DESCRIPTION = "The lab: building the shipped router and calibration, and the maintainers' load and speed benches."

if __name__ == "__main__":
    sys.exit(main(commands=COMMANDS, prog="python -m lab", description=DESCRIPTION))
