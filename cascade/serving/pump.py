"""An engine's generation in a thread of its own, its events handed to whoever serves them as they come.

A handler that pulled the engine's events itself would stop the models for as long as it takes to draw
or send each one (a few milliseconds at every update on the page, more as the text grows: 4% of a
400-token answer's time on the real pair). Here the engine never waits on its reader: a thread runs the
events' generator and keeps every event. The page's handlers (plain generators) take them in batches, at
most one per interval (`batches`); the API's handlers (async) await them one by one (`stream`).

Leaving the `with` block, as Gradio's Stop does when it closes the handler, cancels the generation at its
next event and waits for the thread, so the engine is free when the block is left. Async code, which
must not wait, calls `cancel()`: the thread closes the generator at its next event, leaving both models
ready for the next request. A generator that leases an engine from a pool (`EngineService.lease`) holds
the lease in that thread, and gives it back there when it ends.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from contextlib import closing
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

# A generation thread hands Python's GIL back at every call into llama.cpp and wants it again at its
# end; while a server's event loop holds it to send a chunk, the thread waits up to the interpreter's
# switch interval (5 ms by default) each time, several times a token. At 0.5 ms the API streamed at
# 0.98x the engine's speed instead of 0.87x (`python -m cascade api-bench`, the real pair, 2 threads).
SWITCH_INTERVAL_S = 0.0005


def tune_interpreter() -> None:
    """Set the process's GIL switch interval for serving (a process-wide setting: a server calls it once
    at start, never a library)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


class EventPump:
    """`events` (a generator: an engine's, or one that leases an engine and yields its events) consumed in a
    thread, from `start()` (or entering the `with` block); `batches()` or `stream()` hands them on in order."""

    def __init__(self, events: Iterator[Any], name: str = "cascade-generation",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._events = events
        self._clock = clock  # what `batches` paces by
        self._received: list[Any] = []
        self._error: BaseException | None = None
        self._done = False
        self._cancelled = threading.Event()
        self._changed = threading.Condition()
        self._wake: Callable[[], None] | None = None  # an async reader's alarm, set by `stream`
        self._thread = threading.Thread(target=self._work, daemon=True, name=name)

    def start(self) -> "EventPump":
        self._thread.start()
        return self

    def __enter__(self) -> "EventPump":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cancel()
        self._thread.join()

    def cancel(self) -> None:
        """Stop the generation at its next event (without waiting for it)."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def _work(self) -> None:
        try:
            with closing(self._events) as events:
                if self._cancelled.is_set():
                    return  # cancelled before it began (a client that left while waiting)
                for event in events:
                    self._deliver(event)
                    if self._cancelled.is_set():
                        return  # closing the generator leaves both models ready for the next request
        except BaseException as e:  # noqa: BLE001 - raised again in the reader's thread
            self._error = e
        finally:
            with self._changed:
                self._done = True
                self._changed.notify_all()
            self._alarm()

    def _deliver(self, event: Any) -> None:
        with self._changed:
            self._received.append(event)
            self._changed.notify_all()
        self._alarm()

    def _alarm(self) -> None:
        wake = self._wake
        if wake is not None:
            try:
                wake()
            except RuntimeError:  # the async reader's event loop has closed: no one is reading any more
                self._wake = None

    def _finish(self) -> None:
        """At the end of the events: raise the generation's exception, if it raised one."""
        if self._error is not None:
            raise self._error

    def batches(self, every: float | Callable[[], float],
                at_once: Callable[[Any], bool] = lambda _event: False) -> Iterator[Sequence[Any]]:
        """The events in order, in batches at most one per `every` seconds (a number, or a function asked
        before each batch; the first as soon as there is one, the last as soon as the generation ends),
        except that an event for which `at_once` is true is handed on without waiting out the interval
        (the answer marked written, before a pass the reader shows as a step of its own).
        An exception of the generation is raised here."""
        interval = every if callable(every) else (lambda: every)
        taken, last = 0, float("-inf")
        while True:
            gap = interval()
            with self._changed:
                while taken == len(self._received) and not self._done:
                    self._changed.wait()
                wait = last + gap - self._clock()
                while wait > 0 and not self._done and not at_once(self._received[-1]):
                    self._changed.wait(wait)
                    wait = last + gap - self._clock()
                batch, done = self._received[taken:], self._done
            taken, last = taken + len(batch), self._clock()
            if batch:
                yield batch
            if done:
                self._finish()
                return

    async def stream(self) -> AsyncIterator[Any]:
        """The events in order, one by one, for async code: it awaits each without blocking its event loop.
        An exception of the generation is raised here."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        self._wake = lambda: loop.call_soon_threadsafe(ready.set)
        taken = 0
        while True:
            ready.clear()  # before looking, so an event delivered after the look sets it again
            with self._changed:
                batch, done = self._received[taken:], self._done
            taken += len(batch)
            for event in batch:
                yield event
            if done and not batch:
                self._finish()
                return
            if not batch:
                await ready.wait()
