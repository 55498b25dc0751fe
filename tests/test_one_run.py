"""One run at a time per visitor, on values: a newer run ends the visitor's running comparison, Stop ends their
generation too (`Running`); the engine stops at its next step and the handler draws nothing more."""

from __future__ import annotations

import threading
import time

import pytest

from cascade.ui.running import COMPARISON, GENERATION, Running, Superseded, pumped


def endless(steps: list[int], closed: threading.Event):
    """A generation that never ends by itself, one event per step, recording that it was closed."""
    try:
        n = 0
        while True:
            n += 1
            steps.append(n)
            yield n
    finally:
        closed.set()


def test_a_newer_run_stops_the_visitors_comparison_and_nothing_more_is_drawn():
    running, steps, closed = Running(), [], threading.Event()
    drawn = []
    with running.running("visitor", COMPARISON) as handle:
        handler = pumped(endless(steps, closed), 0.0, lambda events: drawn.append(len(steps)) or "picture",
                         on_pump=handle.on_pump)
        next(handler)  # drawing
        assert not running.end("other visitor", COMPARISON)  # someone else's run changes nothing here
        assert not running.end("visitor", GENERATION)  # nor a run of another kind
        assert not closed.is_set()
        assert running.end("visitor", COMPARISON)  # returns once the engine has stopped
        assert closed.is_set()
        pictures = len(drawn)
        with pytest.raises(Superseded):
            next(handler)
        assert len(drawn) == pictures  # nothing drawn after the end
    assert not running.end("visitor", COMPARISON)  # ended and gone: nothing left to end


def test_a_stop_before_the_handler_starts_ends_the_run_it_expected():
    running, closed = Running(), threading.Event()
    running.expect("visitor", GENERATION)  # the click
    assert running.end("visitor", GENERATION, wait=False)  # Stop, while the handler waits in Gradio's queue
    with running.running("visitor", GENERATION) as handle:
        assert handle.ended
        with pytest.raises(Superseded):  # its engine, if it got that far, ends before its first event
            next(pumped(endless([], closed), 0.0, lambda events: "picture", on_pump=handle.on_pump))
    # A click while the last run's handler runs does not take that run's place: Stop still reaches it.
    with running.running("visitor", COMPARISON) as handle:
        running.expect("visitor", COMPARISON)  # its own click, heard after its handler started
        assert running.end("visitor", COMPARISON, wait=False) and handle.ended
    running.expect("visitor", GENERATION)
    with running.running("visitor", GENERATION) as handle:  # not stopped: runs
        assert not handle.ended


def test_a_new_run_ends_the_visitors_earlier_one_of_its_kind_and_a_late_click_step_ends_nothing():
    running, closed = Running(), threading.Event()
    with running.running("visitor", GENERATION) as first:
        handler = pumped(endless([], closed), 0.0, lambda events: "picture", on_pump=first.on_pump)
        next(handler)
        with running.running("visitor", GENERATION) as second:  # a fork's run, say, started while it writes
            assert first.ended and closed.is_set() and not second.ended
            running.expect("visitor", GENERATION)  # the fork click's quick step, heard late
            assert running._runs[("visitor", GENERATION)] is second and not second.ended


def test_a_run_that_finished_is_no_longer_recorded():
    running = Running()
    with running.running("visitor", COMPARISON):
        assert ("visitor", COMPARISON) in running._runs
    assert running._runs == {}


def test_a_page_visitor_asks_for_a_slot_as_a_client_of_its_own():
    from cascade.ui.generate import lent_engine

    asked = []

    def lease(progress, asker=None):
        asked.append(asker)
        return "engine"

    with lent_engine(lease, lambda *a, **k: None, visitor="session-1") as engine:
        assert engine == "engine"
    assert asked[0].client == "page session-1" and asked[0].interactive
    with lent_engine(lambda progress: "engine", lambda *a, **k: None, visitor="session-1") as engine:
        assert engine == "engine"  # a provider that takes no asker (a plain engine) is called as before


def test_stop_ends_the_visitors_generation_even_when_gradios_cancel_never_comes(toy):
    """A client's cancel sent before it has learnt its event's id names nothing and is lost (gradio_client, and a
    browser pressing Stop within a moment of Generate): the Stop handler ends the visitor's generation itself."""
    from types import SimpleNamespace

    from cascade.ui.generate import GENERATE_SIGNATURE, make_generate, make_stop
    from .helpers import CountingEngine, HeldWriting, engine_for, page_inputs

    gate = threading.Event()  # held after its first token: the generation is running when Stop comes
    counting = CountingEngine(engine_for(toy.small, toy.related))
    running = Running()
    request = SimpleNamespace(session_hash="visitor")
    handler = make_generate(lambda progress: HeldWriting(counting, gate), running)
    inputs = dict(zip(GENERATE_SIGNATURE.parameters, page_inputs(policy="target", max_tokens=200)))
    updates = handler(**inputs, progress=lambda *a, **k: None, request=request)
    next(updates)  # started: the run is the page's
    waiter = threading.Thread(target=lambda: [None for _ in updates])  # Gradio reading the stream, never cancelled
    waiter.start()
    deadline = time.monotonic() + 30
    while getattr(running._runs.get(("visitor", GENERATION)), "pump", None) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # until the engine runs (its pump recorded)
    make_stop(running)(None, request)  # the page's Stop, with no Gradio cancel
    gate.set()
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "the generation went on after Stop"
    assert counting.ended.wait(30) and counting.finished == 0, "the stopped generation reached its end"


def test_a_comparison_ended_while_it_waited_in_the_queue_empties_its_box_and_never_runs():
    from cascade.ui.generate import compare_updates

    running = Running()
    running.expect("visitor", COMPARISON)  # Compare clicked; its handler waits in Gradio's queue
    running.end("visitor", COMPARISON, wait=False)  # a new Generate's quick step (or Stop)
    asked = []
    with running.running("visitor", COMPARISON) as handle:
        updates = list(compare_updates(lambda progress: asked.append(progress), None, lambda *a, **k: None, handle))
    assert asked == [] and [(u.compare_html, u.numbers) for u in updates] == [("", None)]
