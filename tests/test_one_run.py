"""One run at a time per visitor, on values: a newer run ends the visitor's running comparison (`Comparisons`),
whose engine stops at its next step and whose handler draws nothing more."""

from __future__ import annotations

import threading

import pytest

from cascade.ui.generate import Comparisons, Superseded, pumped


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
    comparisons, steps, closed = Comparisons(), [], threading.Event()
    drawn = []
    with comparisons.running("visitor") as on_pump:
        handler = pumped(endless(steps, closed), 0.0, lambda events: drawn.append(len(steps)) or "picture",
                         on_pump=on_pump)
        next(handler)  # drawing
        comparisons.end("other visitor")  # someone else's run changes nothing here
        assert not closed.is_set()
        comparisons.end("visitor")  # returns once the engine has stopped
        assert closed.is_set()
        pictures = len(drawn)
        with pytest.raises(Superseded):
            next(handler)
        assert len(drawn) == pictures  # nothing drawn after the end
    comparisons.end("visitor")  # ended and gone: nothing left to end


def test_a_comparison_that_finished_is_no_longer_recorded():
    comparisons = Comparisons()
    with comparisons.running("visitor") as on_pump:
        on_pump(pump := object())
        assert comparisons._running == {"visitor": pump}
    assert comparisons._running == {}


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
