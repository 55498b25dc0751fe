"""The engine writes in a thread of its own while the page draws what it has written so far.

A page handler that pulled the engine's events itself would stop the models for as long as Gradio
takes to render, diff and send each picture (a few milliseconds at every update, more as the text grows:
4% of a 400-token answer's time on the real pair). Here the engine never waits on the page: a thread
runs its generator and keeps every event; the handler wakes at most once per interval and takes all
that came since (`batches`). Leaving the `with` block, as Gradio's Stop does when it closes the
handler, cancels the generation at its next event and waits for the thread, so the engine is free
(and its lease can end) when the block is left.
"""

from __future__ import annotations

import threading
import time
from contextlib import closing
from typing import Callable, Iterator, Sequence

from ..events import Event


class EventPump:
    """`events` (an engine's generator) consumed in a thread; `batches()` hands them on in order."""

    def __init__(self, events: Iterator[Event], name: str = "cascade-page-generation") -> None:
        self._events = events
        self._received: list[Event] = []
        self._error: BaseException | None = None
        self._done = False
        self._cancelled = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._work, daemon=True, name=name)

    def __enter__(self) -> "EventPump":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._cancelled.set()
        self._thread.join()

    def _work(self) -> None:
        try:
            with closing(self._events) as events:
                for event in events:
                    with self._changed:
                        self._received.append(event)
                        self._changed.notify()
                    if self._cancelled.is_set():
                        return  # closing the generator leaves both models ready for the next request
        except BaseException as e:  # noqa: BLE001 - raised again in the handler's thread, by batches()
            self._error = e
        finally:
            with self._changed:
                self._done = True
                self._changed.notify()

    def batches(self, every: float | Callable[[], float]) -> Iterator[Sequence[Event]]:
        """The events in order, in batches at most one per `every` seconds (a number, or a function asked
        before each batch; the first as soon as there is one, the last as soon as the generation ends).
        An exception of the generation is raised here."""
        interval = every if callable(every) else (lambda: every)
        taken, last = 0, float("-inf")
        while True:
            gap = interval()
            with self._changed:
                while taken == len(self._received) and not self._done:
                    self._changed.wait()
                wait = last + gap - time.monotonic()
                while wait > 0 and not self._done:
                    self._changed.wait(wait)
                    wait = last + gap - time.monotonic()
                batch, done = self._received[taken:], self._done
            taken, last = taken + len(batch), time.monotonic()
            if batch:
                yield batch
            if done:
                if self._error is not None:
                    raise self._error
                return
