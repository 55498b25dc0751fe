"""A visitor's runs: the engine's events pumped to a handler (`pumped`), and each browser session's running
generation and comparison (`Running`), which Generate and Stop end."""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any, Callable, Generator, Iterator

import gradio as gr

from ..engine.events import Summary, TokenEvent, Written
from ..serving.pump import EventPump
from .run import Update

log = logging.getLogger(__name__)

Finished = tuple[list[TokenEvent], Summary]  # a finished run: every event, then the Summary


class Superseded(Exception):
    """The visitor's Stop or newer run ended this run's engine (`Running.end`); `events`: its tokens until then."""

    def __init__(self, events: list[TokenEvent]) -> None:
        super().__init__("ended by the visitor")
        self.events = events


def pumped(generation: Iterator[Any], every: float | Callable[[], float],
           picture: Callable[[tuple[TokenEvent, ...]], Update],
           written: Callable[[tuple[TokenEvent, ...], Summary], Update] | None = None,
           on_pump: Callable[[EventPump], Any] = lambda pump: None) -> Generator[Update, None, Finished]:
    """The engine writing in its own thread (its pump handed to `on_pump`): yields `picture(events)` at most once per
    `every`, and `written(events, summary)` at a `Written` mark; returns (events, Summary). Closed early, stops
    the thread; its pump cancelled from outside, raises Superseded."""
    events: list[TokenEvent] = []
    with EventPump(generation) as pump:
        on_pump(pump)
        for batch in pump.batches(every, at_once=lambda event: isinstance(event, Written)):
            if pump.cancelled:  # a newer run ended it: nothing more of it is drawn
                break
            events.extend(e for e in batch if isinstance(e, TokenEvent))
            if isinstance(batch[-1], Summary):
                return events, batch[-1]
            mark = next((e for e in batch if isinstance(e, Written)), None)
            yield picture(tuple(events)) if mark is None or written is None else written(tuple(events), mark.summary)
    if pump.cancelled:
        raise Superseded(events)
    raise RuntimeError("the engine's run ended without a summary")


GENERATION, COMPARISON = "generation", "comparison"  # the kinds of run a visitor can have going


class RunHandle:
    """One run of a visitor as `Running` keeps it: its engine's pump once it has one, and whether Stop or a newer
    run ended it (before or after its handler started)."""

    def __init__(self) -> None:
        self.pump: EventPump | None = None
        self.started = False
        self._ended = threading.Event()

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def on_pump(self, pump: EventPump) -> None:
        """`pumped`'s hook: the pump recorded, and cancelled at once if the run was ended before it began."""
        self.pump = pump
        if self.ended:
            pump.cancel()

    def end(self) -> EventPump | None:
        self._ended.set()
        if self.pump is not None:
            self.pump.cancel()
        return self.pump


class Running:
    """The runs each visitor (a browser session) has going, by kind: Generate ends the visitor's runs before it
    starts, Stop ends them at once, whether their handlers have started, wait in Gradio's queue or run. The page
    does not use Gradio's cancel: it closes a handler only when it yields again, a client's cancel sent before it
    has learnt the event's id is lost, and a handler yielding past it shows an "Error" badge."""

    END_WAIT_S = 2.0  # at most this long for a run's engine to stop (one model step, in practice)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], RunHandle] = {}

    def expect(self, visitor: str | None, kind: str) -> None:
        """A run of `kind` was asked for (its click): a Stop from now on ends it, even before its handler starts."""
        if visitor is None:
            return
        with self._lock:
            now = self._runs.get((visitor, kind))
            if now is None or now.ended or not now.started:  # not one whose handler already runs (this click's)
                self._runs[visitor, kind] = RunHandle()

    @contextmanager
    def running(self, visitor: str | None, kind: str) -> Iterator[RunHandle]:
        """One run of `visitor` from its handler's start to its end: the handle its click made, else a new one; an
        earlier run of the same kind still going ends first (one at a time)."""
        with self._lock:
            handle = self._runs.get((visitor, kind)) if visitor is not None else None
            earlier = handle if handle is not None and handle.started and not handle.ended else None
            if handle is None or handle.started:
                handle = RunHandle()
                if visitor is not None:
                    self._runs[visitor, kind] = handle
            handle.started = True
        if earlier is not None:
            self._stopped([earlier.end()], wait=True)
        try:
            yield handle
        finally:
            with self._lock:
                if visitor is not None and self._runs.get((visitor, kind)) is handle:
                    del self._runs[visitor, kind]

    def end(self, visitor: str | None, *kinds: str, wait: bool = True) -> bool:
        """The visitor's runs of these kinds ended: they draw nothing more, their engines stop at their next step
        (waited for with `wait`); whether any was asked for or running."""
        with self._lock:
            handles = [self._runs.get((visitor, kind)) for kind in kinds] if visitor is not None else []
        pumps = [handle.end() for handle in handles if handle is not None]
        self._stopped(pumps, wait)
        return bool(pumps)

    def _stopped(self, pumps: list[EventPump | None], wait: bool) -> None:
        for pump in filter(None, pumps):
            if wait and not pump.wait(self.END_WAIT_S):
                log.warning("a run took over %.1f s to stop", self.END_WAIT_S)


def visitor_of(request: gr.Request | None) -> str | None:
    """The browser session a request comes from (None outside one, e.g. a direct call)."""
    return getattr(request, "session_hash", None) if request is not None else None


