"""One run at a time per visitor, in a real browser: a new Generate while "Compare with the big model alone"
still writes ends that comparison (its engine stops, its box goes), and nothing of it shows under the new answer;
Stop ends a comparison and a run at once, even pressed the moment after Generate."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from .helpers import WrappedEngine, engine_for, finished, serve  # noqa: E402

pytestmark = pytest.mark.browser


class SlowAlone(WrappedEngine):
    """The engine, the big model alone (a comparison) slowed to seconds; counts how such runs end and records
    the order in which runs start and end."""

    def __init__(self, engine, run_pause_s: float = 0.0) -> None:
        super().__init__(engine)
        self.alone_started = self.alone_finished = self.runs_finished = 0
        self.order: list[str] = []
        self.run_pause_s = run_pause_s  # a pause after each event of a run (not a comparison)
        self.alone_pause_s = 0.1

    def generate(self, prompt, config, **options):
        if config.policy != "target":
            self.order.append("run started")
            try:
                for event in self.engine.generate(prompt, config, **options):
                    yield event
                    time.sleep(self.run_pause_s)
                self.runs_finished += 1
            finally:
                self.order.append("run ended")
            return
        self.alone_started += 1
        try:
            for event in self.engine.generate(prompt, config, **options):
                yield event
                time.sleep(self.alone_pause_s)  # 128 tokens: about 13 s
            self.alone_finished += 1
        finally:
            self.order.append("comparison ended")


def compare_text(page) -> str:
    return page.evaluate("() => document.querySelector('.cascade-compare-box')?.innerText || ''")


COMPARING_JS = "() => /alone is writing/.test(document.querySelector('.cascade-compare-box')?.innerText || '')"
COMPARE_GONE_JS = "() => !(document.querySelector('.cascade-compare-box')?.innerText || '').trim()"
STOPPED_JS = "() => /^Stopped/.test(document.querySelector('.cascade-summary')?.innerText || '')"


def test_generate_and_stop_each_end_a_comparison_still_running_and_stop_ends_a_run_at_once(browser, toy):
    # One page walks them all (a page load and a first run are most of each walk's cost): a comparison to its end,
    # one ended by Generate, one ended by Stop, then a run stopped the moment after Generate.
    engine = SlowAlone(engine_for(toy.small, toy.related))
    demo, url = serve(lambda progress: engine)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("button", name="Generate").click()
        finished(page)
        # A comparison to its end (fast); the next one still runs (a click while one runs would be dropped).
        engine.alone_pause_s = 0.0
        page.get_by_role("button", name="Compare with the big model alone").click()
        page.wait_for_function("() => /Which rule decides best/.test(document.body.innerText) && "
                               "!/Reading the big model's text/.test(document.body.innerText)", timeout=30_000)
        assert engine.alone_finished == 1
        engine.alone_pause_s = 0.1
        # A new Generate while the big model alone still writes ends that comparison.
        page.get_by_role("button", name="Compare with the big model alone").click()
        page.wait_for_function(COMPARING_JS, timeout=30_000)
        page.get_by_role("button", name="Generate").click()
        page.wait_for_function(COMPARE_GONE_JS, timeout=1_000)  # the comparison's box is gone at once
        finished(page)
        page.wait_for_timeout(1_500)  # room for a comparison left running to draw again
        assert compare_text(page).strip() == ""  # nothing of it, not even Gradio's "Error" badge
        assert engine.alone_started == 2 and engine.alone_finished == 1, "the comparison ran on"
        # the new run's engine starts only once the comparison's has stopped: they never share the CPU
        assert engine.order[-3:] == ["comparison ended", "run started", "run ended"], engine.order
        # Stop ends a comparison.
        page.get_by_role("button", name="Compare with the big model alone").click()
        page.wait_for_function(COMPARING_JS, timeout=30_000)
        page.get_by_role("button", name="Stop").click()
        page.wait_for_function(COMPARE_GONE_JS, timeout=5_000)
        page.wait_for_timeout(1_500)  # room for a comparison left running to draw again
        assert compare_text(page).strip() == ""  # nothing of it, not even Gradio's "Error" badge
        assert engine.alone_started == 3 and engine.alone_finished == 1, "the comparison ran on"
        assert engine.order[-1] == "comparison ended", engine.order
        # A run stopped the moment after Generate (128 tokens at 0.1 s: 13 s if it ran on).
        engine.run_pause_s = 0.1
        page.get_by_role("button", name="Generate").click()
        page.get_by_role("button", name="Stop").click()
        page.wait_for_function(STOPPED_JS, timeout=10_000)
        # Its engine ended, or never started (on a busy machine the Stop can come first).
        deadline = time.monotonic() + 10
        while engine.order.count("run started") != engine.order.count("run ended") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.order.count("run started") == engine.order.count("run ended"), "the stopped run went on"
        assert engine.runs_finished == 2, "the stopped run went on"
        page.wait_for_function(STOPPED_JS, timeout=10_000)  # still stopped (Gradio's timer may show a moment first)
        page.close()
    finally:
        demo.close()

