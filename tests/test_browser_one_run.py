"""One run at a time per visitor, in a real browser: a new Generate while "Compare with the big model alone"
still writes ends that comparison (its engine stops, its box goes), and nothing of it shows under the new answer."""

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

    def __init__(self, engine) -> None:
        super().__init__(engine)
        self.alone_started = self.alone_finished = 0
        self.order: list[str] = []

    def generate(self, prompt, config, **options):
        if config.policy != "target":
            self.order.append("run started")
            yield from self.engine.generate(prompt, config, **options)
            return
        self.alone_started += 1
        try:
            for event in self.engine.generate(prompt, config, **options):
                yield event
                time.sleep(0.1)  # 128 tokens: about 13 s
            self.alone_finished += 1
        finally:
            self.order.append("comparison ended")


def compare_text(page) -> str:
    return page.evaluate("() => document.querySelector('.cascade-compare-box')?.innerText || ''")


def test_generate_ends_a_comparison_still_running(browser, toy):
    engine = SlowAlone(engine_for(toy.small, toy.related))
    demo, url = serve(lambda progress: engine)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("button", name="Generate").click()
        finished(page)
        page.get_by_role("button", name="Compare with the big model alone").click()
        page.wait_for_function("() => /alone is writing/.test(document.querySelector('.cascade-compare-box')"
                               "?.innerText || '')", timeout=30_000)
        page.get_by_role("button", name="Generate").click()
        page.wait_for_function("() => !(document.querySelector('.cascade-compare-box')?.innerText || '').trim()",
                               timeout=1_000)  # the comparison's box is gone at once
        finished(page)
        page.wait_for_timeout(1_500)  # room for a comparison left running to draw again
        assert compare_text(page).strip() == ""  # nothing of it, not even Gradio's "Error" badge
        assert engine.alone_started == 1 and engine.alone_finished == 0, "the comparison ran on"
        # the new run's engine starts only once the comparison's has stopped: they never share the CPU
        assert engine.order == ["run started", "comparison ended", "run started"], engine.order
        page.close()
    finally:
        demo.close()
