"""The event pump (`cascade.serving.pump`): every event in order, the generation's error raised in the
handler, a generation that never waits on its reader, batches paced by the pump's clock, and a Stop that
closes the generation in its own thread. Time here is a fake clock and events a test hands over one by one:
what is checked is the order of things, not how fast this machine runs them."""

from __future__ import annotations

import queue
import threading

import pytest

from cascade.serving.pump import EventPump
from cascade.ui.layout import PROGRESS_POLL_S, QUEUE_POLL_S, queued

from .helpers import FakeClock, in_thread

END = object()


class Feed:
    """A generation the test writes: `put` returns once the pump holds the event; `end` ends it."""

    def __init__(self) -> None:
        self._next: queue.Queue = queue.Queue()
        self._taken: queue.Queue = queue.Queue()

    def events(self):
        while (event := self._next.get()) is not END:
            yield event
            self._taken.put(event)  # runs when the pump asks for the next one: it has delivered this one

    def put(self, *events) -> None:
        for event in events:
            self._next.put(event)
            assert self._taken.get(timeout=30) == event, "the pump did not take the event"

    def end(self) -> None:
        self._next.put(END)


def read(pump: EventPump, every, **options) -> queue.Queue:
    """The pump's batches, read in a thread of their own as a page handler would: each is put on the
    queue, then END."""
    batches: queue.Queue = queue.Queue()

    def reader() -> None:
        try:
            for batch in pump.batches(every, **options):
                batches.put(list(batch))
        finally:
            batches.put(END)

    in_thread(reader)
    return batches


def counting(n: int, log: list | None = None, fail_at: int | None = None):
    log = [] if log is None else log
    try:
        for i in range(n):
            if i == fail_at:
                raise RuntimeError("the models failed")
            log.append(("made", i))
            yield i
    finally:
        log.append(("closed", threading.current_thread().name))


def test_every_event_arrives_once_in_order_in_batches():
    with EventPump(counting(50)) as pump:
        batches = list(pump.batches(every=0.0))
    assert [e for b in batches for e in b] == list(range(50))
    assert all(batches)


def test_the_engine_writes_on_while_the_page_draws():
    first_taken, all_made = threading.Event(), threading.Event()

    def events():
        yield 0
        first_taken.wait(timeout=30)
        yield from range(1, 6)
        all_made.set()

    with EventPump(events()) as pump:
        batches = pump.batches(every=0.0)
        first = next(batches)
        first_taken.set()
        # The page holds its first batch (drawing a picture) and asks for nothing: the engine goes on.
        assert all_made.wait(timeout=30), "the generation waited for its reader"
        rest = [e for b in batches for e in b]
    assert first == [0] and rest == [1, 2, 3, 4, 5]


def test_batches_come_at_most_once_per_interval_and_the_last_at_once():
    feed, clock = Feed(), FakeClock()
    with EventPump(feed.events(), clock=clock) as pump:
        try:
            batches = read(pump, every=0.125)
            feed.put(0)
            assert batches.get(timeout=30) == [0]  # the first as soon as there is one
            feed.put(1, 2)
            assert batches.empty()  # the interval has not passed on the pump's clock: both wait
            clock.now += 0.125
            assert batches.get(timeout=30) == [1, 2]
            feed.put(3)
        finally:
            feed.end()
        assert batches.get(timeout=30) == [3]  # the last as the generation ends, the clock unmoved
        assert batches.get(timeout=30) is END


def test_the_interval_may_change_between_batches():
    feed, clock = Feed(), FakeClock()
    gaps = iter([0.0, 0.5] + [0.0] * 10)
    with EventPump(feed.events(), clock=clock) as pump:
        try:
            batches = read(pump, lambda: next(gaps))
            feed.put(0)
            assert batches.get(timeout=30) == [0]
            feed.put(1, 2, 3)
            clock.now += 0.25
            feed.put(4)
            assert batches.empty()  # 0.5 asked: 0.25 is not enough
            clock.now += 0.25
            assert batches.get(timeout=30) == [1, 2, 3, 4]  # waited, and took all that came
            feed.put(5)
            assert batches.get(timeout=30) == [5]  # the interval back at 0: at once
        finally:
            feed.end()
        assert batches.get(timeout=30) is END


def test_an_event_asked_for_at_once_does_not_wait_out_the_interval():
    """The page's finished mark: the batch ending with it is handed on as soon as it comes."""
    feed, clock = Feed(), FakeClock()
    with EventPump(feed.events(), clock=clock) as pump:
        try:
            batches = read(pump, 10.0, at_once=lambda e: e == "written")
            feed.put(1)
            assert batches.get(timeout=30) == [1]
            feed.put("written")
            assert batches.get(timeout=30) == ["written"]  # the clock has not moved
            feed.put(2)
            assert batches.empty()
        finally:
            feed.end()
        assert batches.get(timeout=30) == [2] and batches.get(timeout=30) is END


def test_the_generations_error_is_raised_in_the_handler_after_what_came_before_it():
    received = []
    with pytest.raises(RuntimeError, match="the models failed"):
        with EventPump(counting(10, fail_at=3)) as pump:
            for batch in pump.batches(every=0.0):
                received.extend(batch)
    assert received == [0, 1, 2]


def test_leaving_mid_stream_closes_the_generation_in_its_thread_and_waits_for_it():
    log: list = []

    def endless():
        i = 0
        try:
            while True:
                log.append(("made", i))
                yield i
                i += 1
        finally:
            log.append(("closed", threading.current_thread().name))

    with EventPump(endless(), name="engine-thread") as pump:
        for batch in pump.batches(every=0.0):
            if batch[-1] >= 3:
                break
    # An endless generation ended (the block was left at all), closed where it ran, before the block was left.
    assert log[-1] == ("closed", "engine-thread")


def test_the_page_queue_polls_at_the_page_s_intervals():
    import gradio as gr

    with gr.Blocks() as demo:
        gr.Markdown("x")
    queue_ = queued(demo, max_size=3)._queue
    assert (queue_.sleep_when_free, queue_.progress_update_sleep_when_free, queue_.max_size) == (
        QUEUE_POLL_S, PROGRESS_POLL_S, 3)


def test_pictures_come_further_apart_as_drawing_them_costs_more(monkeypatch):
    from cascade.ui import run as page_run

    clock, cost = FakeClock(), [0.02]

    def drawing(run):
        clock.now += cost[0]
        return "drawn"

    monkeypatch.setattr(page_run, "run_update", drawing)
    pacer = page_run.Pacer(clock=clock)
    assert pacer.interval() == page_run.UPDATE_EVERY_S  # nothing drawn yet: the page's own pace
    assert pacer.draw(None) == "drawn"
    # One slow picture alone (the first of a fresh process) does not hold back the next ones...
    assert pacer.interval() == page_run.UPDATE_EVERY_S
    # ...two in a row do: DRAW_SHARE times their cost.
    pacer.draw(None)
    assert pacer.interval() == pytest.approx(page_run.DRAW_SHARE * 0.02)
    assert pacer.interval() > page_run.UPDATE_EVERY_S
    # And once pictures are cheap again, so is the wait.
    cost[0] = 0.0
    pacer.draw(None)
    assert pacer.interval() == page_run.UPDATE_EVERY_S
