"""Timing a visitor can trust, in a real browser: the answer is marked finished (with its time) the moment
its last token is written, while the big model's scoring of it is still a step of its own on screen; the
scoring's figures come after.

On the toy pair that scoring takes milliseconds; the engine here holds it until the test has seen the
finished answer on screen (it lasts seconds on the real pair), so the step can be seen whatever the machine's
load, and the scoring's figures must wait for its end. (The mark is drawn as soon as the engine says the
answer is written: the pump hands that event on without waiting for the page's next picture.)
"""

from __future__ import annotations

import os
import threading

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from .helpers import SlowScoring, engine_for, finished, serve, summary_text  # noqa: E402

pytestmark = pytest.mark.browser

# Each state of the summary, with when it first showed and what the summary and the answer said then.
WATCH = """() => {
  window.cascadeMarks = [];
  const seen = new Set();
  const look = () => {
    const summary = document.querySelector('.cascade-summary')?.innerText || '';
    const state = /Writing/.test(summary) ? 'writing' : /score it/.test(summary) ? 'scoring'
                : document.querySelector('.cascade-more')?.getClientRects().length ? 'final' : null;
    if (state && !seen.has(state)) {
      seen.add(state);
      const text = document.querySelector('.cascade-text')?.innerText || '';
      window.cascadeMarks.push({state, t: performance.now() / 1000, summary, text});
    }
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def held_scoring(toy):
    """(the page's address, the event that ends the big model's scoring of an answer)."""
    gate = threading.Event()
    engine = SlowScoring(engine_for(toy.small, toy.related), gate=gate)
    demo, url = serve(lambda progress: engine)
    yield url, gate
    gate.set()
    demo.close()


def test_the_answer_is_marked_finished_before_the_big_model_scores_it(browser, held_scoring):
    url, scoring_ends = held_scoring
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.get_by_label("Prompt").fill("The cat sat on the mat")
    page.evaluate(WATCH)
    page.get_by_role("button", name="Generate").click()
    # Finished while the big model still scores: the answer's time, no longer "Writing", the whole text
    # shown, the scoring a step apart; and it stays so until the scoring ends.
    page.wait_for_function("() => window.cascadeMarks.some(m => m.state === 'scoring')", timeout=90_000)
    page.wait_for_timeout(500)
    marks = {m["state"]: m for m in page.evaluate("window.cascadeMarks")}
    assert list(marks)[-1] == "scoring", list(marks)
    scoring = marks["scoring"]
    assert "took" in scoring["summary"] and "tokens/s" not in scoring["summary"]
    assert "The big model is reading the answer to score it" in scoring["summary"]
    # Then the scoring's figures, with its own time, once the scoring is done; the text was whole already.
    scoring_ends.set()
    finished(page)
    assert scoring["text"] == page.inner_text(".cascade-text")
    assert [m["state"] for m in page.evaluate("window.cascadeMarks")][-2:] == ["scoring", "final"]
    summary = summary_text(page)  # the first line, and the fold under it
    assert "score it" not in summary and "The big model then scored the finished answer" in summary
    assert "tokens/s (generation, reading the prompt included; the scoring after it apart)" in summary
