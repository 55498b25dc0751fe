"""An engine's generation in a thread of its own, so the engine never waits on its reader: the page takes
its events in batches (`batches`), the API awaits them one by one (`stream`). Leaving the `with` block
cancels the generation at its next event and waits for the thread; async code calls `cancel()` instead."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from contextlib import closing
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

# The generation thread wants the GIL back after every llama.cpp call; the default 5 ms makes it wait each time.
SWITCH_INTERVAL_S = 0.0005


def tune_interpreter() -> None:
    """Set the process's GIL switch interval for serving (a server calls it once at start, never a library)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


class EventPump:
    """A generator of events consumed in a thread from `start()` (or `with`), handed on by `batches` or `stream`."""

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

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the generation's thread to end (at most `timeout_s`); whether it has."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

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
        """The events in order, in batches at most one per `every` seconds (or `every()`), the first, the last and
        any `at_once` event at once; the generation's exception is raised here."""
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
        """The events in order, one by one, awaited without blocking the event loop; its exception is raised here."""
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
