"""The page's engine thread (`cascade.ui.pump`): every event in order, the generation's error raised in
the handler, a generation that never waits on the page, and a Stop that frees the engine at once."""

from __future__ import annotations

import threading
import time

import pytest

from cascade.ui.layout import PROGRESS_POLL_S, QUEUE_POLL_S, queued
from cascade.serving.pump import EventPump


def counting(n: int, every: float = 0.0, log: list | None = None, fail_at: int | None = None):
    log = [] if log is None else log
    try:
        for i in range(n):
            if i == fail_at:
                raise RuntimeError("the models failed")
            time.sleep(every)
            log.append(("made", i, time.monotonic()))
            yield i
    finally:
        log.append(("closed", threading.current_thread().name, time.monotonic()))


def test_every_event_arrives_once_in_order_in_batches():
    with EventPump(counting(50)) as pump:
        batches = list(pump.batches(every=0.0))
    assert [e for b in batches for e in b] == list(range(50))
    assert all(batches)


def test_the_engine_writes_on_while_the_page_draws():
    log: list = []
    with EventPump(counting(6, every=0.02, log=log)) as pump:
        batches = pump.batches(every=0.0)
        first = next(batches)
        time.sleep(0.3)  # the page drawing a slow picture
        drawn_at = time.monotonic()
        rest = [e for b in batches for e in b]
    assert first == [0] and rest == [1, 2, 3, 4, 5]
    made = [t for kind, _, t in log if kind == "made"]
    assert made[-1] < drawn_at  # all of it written while the page was busy


def test_batches_come_at_most_once_per_interval_and_the_last_at_once():
    with EventPump(counting(10, every=0.03)) as pump:
        stamps = []
        for batch in pump.batches(every=0.1):
            stamps.append((time.monotonic(), batch))
    assert [e for _, b in stamps for e in b] == list(range(10))
    gaps = [b - a for (a, _), (b, _) in zip(stamps, stamps[1:])]
    assert all(g >= 0.09 for g in gaps[:-1]) and len(stamps) <= 5


def test_the_generations_error_is_raised_in_the_handler_after_what_came_before_it():
    received = []
    with pytest.raises(RuntimeError, match="the models failed"):
        with EventPump(counting(10, fail_at=3)) as pump:
            for batch in pump.batches(every=0.0):
                received.extend(batch)
    assert received == [0, 1, 2]


def test_leaving_mid_stream_closes_the_generation_in_its_thread_and_waits_for_it():
    log: list = []
    with EventPump(counting(1000, every=0.01, log=log), name="engine-thread") as pump:
        for batch in pump.batches(every=0.0):
            if batch[-1] >= 3:
                left = time.monotonic()
                break
    closed = [entry for entry in log if entry[0] == "closed"]
    assert closed and closed[0][1] == "engine-thread"  # closed where it ran, before the block was left
    assert closed[0][2] - left < 0.5
    assert len([e for e in log if e[0] == "made"]) < 20  # it stopped, it did not write on to the end


def test_the_page_queue_polls_at_the_page_s_intervals():
    import gradio as gr

    with gr.Blocks() as demo:
        gr.Markdown("x")
    queue = queued(demo, max_size=3)._queue
    assert (queue.sleep_when_free, queue.progress_update_sleep_when_free, queue.max_size) == (
        QUEUE_POLL_S, PROGRESS_POLL_S, 3)


def test_pictures_come_further_apart_as_drawing_them_costs_more(monkeypatch):
    from cascade.ui import run as page_run

    pacer = page_run.Pacer()
    assert pacer.interval() == page_run.UPDATE_EVERY_S  # nothing drawn yet: the page's own pace
    cost = [0.02]
    monkeypatch.setattr(page_run, "run_update", lambda run: time.sleep(cost[0]) or "drawn")
    assert pacer.draw(None) == "drawn"
    # One slow picture alone (the first of a fresh process) does not hold back the next ones...
    assert pacer.interval() == page_run.UPDATE_EVERY_S
    # ...two in a row do.
    pacer.draw(None)
    assert pacer.interval() == pytest.approx(page_run.DRAW_SHARE * pacer.cost) and pacer.interval() >= 1.0
    # And once pictures are cheap again, so is the wait.
    cost[0] = 0.0
    pacer.draw(None)
    assert pacer.interval() == page_run.UPDATE_EVERY_S


def test_the_interval_may_change_between_batches():
    gaps = iter([0.0, 0.35] + [0.0] * 10)
    with EventPump(counting(6, every=0.1)) as pump:
        stamps = [(time.monotonic(), list(b)) for b in pump.batches(lambda: next(gaps))]
    assert stamps[1][0] - stamps[0][0] >= 0.33 and len(stamps[1][1]) >= 3  # waited, and took all that came
    assert [e for _, b in stamps for e in b] == list(range(6))


def test_an_event_asked_for_at_once_does_not_wait_out_the_interval():
    """The page's finished mark: the batch ending with it is handed on as soon as it comes."""
    def events():
        yield 1
        time.sleep(0.05)
        yield "written"
        time.sleep(0.5)
        yield 2

    with EventPump(events()) as pump:
        started = time.monotonic()
        batches = pump.batches(10.0, at_once=lambda e: e == "written")
        assert next(batches) == [1]
        assert next(batches) == ["written"] and time.monotonic() - started < 1.0
