"""Who gets the next free engine (`Lender`, one per request): the last free one of two or more is kept for a person
watching who has no other answer watched; otherwise clients within their fair share go first, then people watching
before background requests (unless one has waited `AGE_LIMIT_S`), then the oldest."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from ..engine.batching import AGE_LIMIT_S

T = TypeVar("T")


@dataclass(frozen=True)
class Asker:
    """Who asks for a slot: a client (an API key, else an address; a page visitor's session; None: unnamed) and
    whether a person watches the answer as it is written."""

    client: str | None = None
    interactive: bool = True


@dataclass(eq=False)
class _Waiting:
    asker: Asker
    since: float


class Lender(Generic[T]):
    """A pool of engines lent one at a time to whoever `_next` names among those waiting."""

    def __init__(self, age_limit_s: float = AGE_LIMIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.age_limit_s, self._clock = age_limit_s, clock
        self._cond = threading.Condition()
        self._free: list[T] = []
        self._waiting: list[_Waiting] = []
        self._held: Counter[str | None] = Counter()  # slots held, by client
        self._holder: dict[int, Asker] = {}  # id(engine) -> who it is lent to

    def put(self, engine: T) -> None:
        """An engine back in the pool (or added to it)."""
        with self._cond:
            if id(engine) in self._holder:
                self._held -= Counter([self._holder.pop(id(engine)).client])  # a Counter keeps positive counts only
            self._free.append(engine)
            self._cond.notify_all()

    def get(self, asker: Asker = Asker()) -> T:
        """A free engine, once it is this asker's turn (`_next`); waits as long as that takes."""
        with self._cond:
            me = _Waiting(asker, self._clock())
            self._waiting.append(me)
            try:
                while not (self._free and self._next() is me):
                    self._cond.wait()
                engine = self._free.pop()
                self._holder[id(engine)] = asker
                self._held[asker.client] += 1
                return engine
            finally:
                self._waiting.remove(me)
                self._cond.notify_all()  # the next in turn may take another free engine

    def qsize(self) -> int:
        """Engines free now."""
        with self._cond:
            return len(self._free)

    def waiting(self) -> dict[str, int]:
        """Requests waiting for a slot, by class."""
        with self._cond:
            interactive = sum(w.asker.interactive for w in self._waiting)
            return {"interactive": interactive, "background": len(self._waiting) - interactive}

    def share(self) -> int:
        """The slots a client may hold while others wait: all of them, shared evenly among the clients present."""
        total = len(self._free) + sum(self._held.values())
        clients = set(self._held) | {w.asker.client for w in self._waiting}
        return max(1, math.ceil(total / max(1, len(clients))))

    def _may_take(self, w: _Waiting) -> bool:
        """(Holding the condition.) Whether `w` may take a free engine now: any but the last of two or more; that
        one only with a person watching whose client (if named) has no other answer watched."""
        if len(self._free) > 1 or len(self._free) + sum(self._held.values()) < 2:
            return True
        client = w.asker.client
        return w.asker.interactive and (client is None or not any(
            held.interactive and held.client == client for held in self._holder.values()))

    def _next(self) -> _Waiting | None:
        """(Holding the condition.) Who the next free engine goes to (None: no one waiting may take it)."""
        now, share = self._clock(), self.share()

        def turn(w: _Waiting) -> tuple:
            over_share = w.asker.client is not None and self._held[w.asker.client] >= share
            waits_for_people = not w.asker.interactive and now - w.since < self.age_limit_s
            return over_share, waits_for_people, w.since

        return min(filter(self._may_take, self._waiting), key=turn, default=None)
