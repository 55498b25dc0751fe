"""`python -m cascade ...`: COMMANDS in `--help`'s order, each a `Command` (`shared.py`) that imports its
measurement modules only when it runs; `main` turns a model or settings error into one line and exit 2."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..engine.models import ModelError
from . import bench, generate, serve, tasks, where
from .shared import Command

COMMANDS: tuple[Command, ...] = (*generate.COMMANDS, *bench.COMMANDS, *where.COMMANDS, *tasks.COMMANDS,
                                 *serve.COMMANDS)


DESCRIPTION = "A small draft model and a large target model writing together."


def build_parser(commands: Sequence[Command] = COMMANDS, prog: str = "python -m cascade",
                 description: str = DESCRIPTION) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands:
        command.add_arguments(sub.add_parser(command.name, help=command.help, description=command.description))
    return parser


def main(argv: Sequence[str] | None = None, commands: Sequence[Command] = COMMANDS, prog: str = "python -m cascade",
         description: str = DESCRIPTION) -> int:
    """Run the command `argv` names among `commands` (the lab's command line runs its own through here)."""
    args = build_parser(commands, prog, description).parse_args(argv)
    command = next(c for c in commands if c.name == args.command)
    try:
        return command.run(args)
    except (ModelError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\n[stopped]", file=sys.stderr)
        return 130
