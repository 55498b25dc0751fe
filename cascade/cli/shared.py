"""What several commands share: the record a command registers itself with, and loading the engine with
its progress on stderr (stdout carries the command's own output: text, a table, JSON lines)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

from ..engine.config import ModelConfig
from ..engine.engine import Engine
from ..engine.models import load_pair
from ..routing.router import load_router, router_words


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and `--help` line, its flags, and what it does (returning an exit status)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


def log(msg: str) -> None:
    print(msg, file=sys.stderr)


def load_engine(models: ModelConfig, *, router: bool = True, quiet: bool = False) -> Engine:
    """Both models and (with `router`) the router, each step said on stderr unless `quiet`."""
    pair = load_pair(models, progress=(lambda _msg: None) if quiet else (lambda msg: log(f"[{msg}]")))
    if not router:
        return Engine(pair)
    loaded = load_router(models.router, pair.draft_path)
    if not quiet:
        log(f"[router: {router_words(models.router, loaded, pair.draft_path.name)}]")
    return Engine(pair, router=loaded)
