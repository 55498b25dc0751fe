"""What several commands share: the record a command registers itself with, and loading the engine with
its progress on stderr (stdout carries the command's own output: text, a table, JSON lines)."""

from __future__ import annotations

import argparse
import math
import sys
import time
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


DOWNLOAD_LOG_EVERY_S = 10.0  # a download's progress in a log file (a terminal sees every figure)


class LoadLog:
    """The load's steps on stderr, one line each; a download's figures ("label: 1.2 of 4.7 GB") rewrite one line
    on a terminal, and in a log come at most every DOWNLOAD_LOG_EVERY_S per label (its last ones always)."""

    def __init__(self, stream=None, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.clock = stream or sys.stderr, clock
        self.label, self.last, self.open = "", -math.inf, False

    def __call__(self, msg: str) -> None:
        label = msg.split(": ", 1)[0] if msg.startswith("downloading") else ""
        if label and self.stream.isatty():
            self.stream.write(f"\r[{msg}]\x1b[K")
            self.open = True
        else:
            now = self.clock()
            done, _, total = msg.rpartition(": ")[2].partition(" of ")
            if label and label == self.label and now - self.last < DOWNLOAD_LOG_EVERY_S \
                    and done != total.split(" ")[0]:
                return
            self.stream.write(("\n" if self.open else "") + f"[{msg}]\n")
            self.open, self.last = False, now
        self.label = label
        self.stream.flush()


def load_engine(models: ModelConfig, *, router: bool = True, quiet: bool = False) -> Engine:
    """Both models and (with `router`) the router, each step said on stderr unless `quiet`."""
    pair = load_pair(models, progress=(lambda _msg: None) if quiet else LoadLog())
    if not router:
        return Engine(pair)
    loaded = load_router(models.router, pair.draft_path)
    if not quiet:
        log(f"[router: {router_words(models.router, loaded, pair.draft_path.name)}]")
    return Engine(pair, router=loaded)
