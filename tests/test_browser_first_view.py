"""The page as a first visitor meets it, on a desktop (1400×1000) and a phone (390×844), in a real browser
over the toy models: the prompt and Generate in the first screen, the share of tokens the big model writes as
the main control (the threshold one tick away), nothing wider than the screen, a run's verdict as one sentence,
one picture and a closed fold in that order, no output of an earlier run left under a new one, a fork that
writes with its run's own settings and says so, and the threshold's bar on the rule's own scale. It leaves the
first view and the verdict of each in artifacts/ (first-view-desktop.png, first-view-phone.png,
summary-desktop.png, summary-phone.png).
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from cascade.ui.controls import PAGE_START  # noqa: E402
from cascade.serving.examples import load_examples  # noqa: E402
from cascade.ui.controls import BAR_STEPS, BY_THRESHOLD_LABEL, SHARE_LABEL, bar_position  # noqa: E402
from cascade.ui.rulewords import slider_props  # noqa: E402

from .helpers import ARTIFACTS, finished, summary_text  # noqa: E402

pytestmark = pytest.mark.browser

VIEWPORTS = {"desktop": (1400, 1000), "phone": (390, 844)}

# Elements that reach past the screen's right edge (or its left), but for those placed far off it on
# purpose (Plotly measures text off-screen), and the page's own width.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth, wide = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.right <= 0 || getComputedStyle(e).position === 'fixed') continue;
    if (r.right > width + 1 || r.left < -1) wide.push(`${e.tagName}.${String(e.className).slice(0, 60)} ${r.left}-${r.right}`);
  }
  return {scrollWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 10)};
}"""


def opened(browser, url: str, viewport: str, query: str = ""):
    width, height = VIEWPORTS[viewport]
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url + (f"?{query}" if query else ""))
    page.get_by_role("button", name="Generate").wait_for()
    return page


def assert_nothing_overflows(page, viewport: str) -> None:
    width, _ = VIEWPORTS[viewport]
    measured = page.evaluate(OVERFLOW)
    assert measured["scrollWidth"] <= width and measured["wide"] == [], measured


@pytest.fixture(scope="module", params=list(VIEWPORTS))
def first_visit(request, browser, page_url):
    """(the page, the viewport's name): the page as a first visitor opens it at that size, one per size (a page
    costs seconds to load and draw), shared in order by the tests of that size: the first screen as it opened,
    then a run's verdict, then a comparison and the runs after it."""
    page = opened(browser, page_url, request.param)
    yield page, request.param
    page.close()


def test_the_prompt_and_generate_are_in_the_first_screen_and_nothing_overflows(first_visit):
    page, viewport = first_visit
    page.wait_for_function("() => /toy models/.test(document.body.innerText)", timeout=15_000)  # loaded
    _, height = VIEWPORTS[viewport]
    prompt, generate = page.get_by_label("Prompt"), page.get_by_role("button", name="Generate")
    for control in (prompt, generate):
        box = control.bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= height, (viewport, box)
    # The page starts with its first example, at its own start (the big model writing 10% by the margin rule):
    # the share is the main control, the threshold one tick away.
    first = next(e for e in load_examples(page=True) if e.first)
    assert prompt.input_value() == first.prompt
    assert float(page.get_by_label(f"number input for {SHARE_LABEL}").input_value()) == 100 * PAGE_START.budget
    assert not page.get_by_label(BY_THRESHOLD_LABEL).is_checked()
    assert page.locator(".cascade-threshold input[type=number]").count() == 0
    # The guide waits, closed, under the answer.
    guide = page.get_by_text("How to read this page", exact=True)
    assert guide.bounding_box()["y"] > page.locator(".cascade-text-box").first.bounding_box()["y"]
    assert not page.locator(".cascade-guide .prose").first.is_visible()
    # "Who writes": its text stops before its arrow.
    assert page.evaluate("""() => {
      const input = document.querySelector('.cascade-policy input'), arrow = document.querySelector('.cascade-policy .icon-wrap');
      return input.getBoundingClientRect().right - parseFloat(getComputedStyle(input).paddingRight)
             <= arrow.getBoundingClientRect().left + 1; }""")
    assert_nothing_overflows(page, viewport)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"first-view-{viewport}.png"))


# The boxes of the summary's sentence, its picture and its fold, and any other text between them.
BOXES = """() => {
  const box = s => { const e = document.querySelector(s); if (!e) return null;
                     const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, width: r.width,
                                                                   height: r.height}; };
  const sentence = box('.cascade-summary'), picture = box('.cascade-timebars'), fold = box('.cascade-more');
  const between = [];
  if (sentence && fold) {
    for (const e of document.querySelectorAll('.cascade-answer *')) {
      if (e.closest('.cascade-summary, .cascade-timebars, .cascade-more') || e.children.length) continue;
      const r = e.getBoundingClientRect(), text = (e.innerText || '').trim();
      if (text && r.height > 0 && r.top >= sentence.bottom - 1 && r.bottom <= fold.top + 1) between.push(text);
    }
  }
  const bars = document.querySelectorAll('.cascade-timebars .plot-container .barlayer .point').length;
  const open = document.querySelector('.cascade-more-text')?.getBoundingClientRect().height || 0;
  return {sentence, picture, fold, between, bars, open};
}"""


def test_after_a_run_the_sentence_then_the_picture_then_the_fold(first_visit):
    """The verdict in one sentence and one picture: after Generate, the summary's sentence, then the picture of
    where the time went, then the closed fold "More about this run" with the rest, in that order and nothing
    between them; a new Generate clears the picture and the fold. Leaves artifacts/summary-<viewport>.png."""
    page, viewport = first_visit
    width, _ = VIEWPORTS[viewport]
    page.get_by_role("button", name="Generate").click()
    finished(page)
    page.wait_for_function("() => document.querySelectorAll('.cascade-timebars .barlayer .point').length > 0",
                           timeout=10_000)
    boxes = page.evaluate(BOXES)
    sentence, picture, fold = boxes["sentence"], boxes["picture"], boxes["fold"]
    assert sentence["top"] < picture["top"] < fold["top"], boxes
    assert sentence["bottom"] <= picture["top"] + 1 and picture["bottom"] <= fold["top"] + 1, boxes
    assert boxes["between"] == [], boxes
    assert 140 <= picture["height"] <= 260 and picture["width"] <= width, boxes
    assert boxes["bars"] >= 2 and boxes["open"] == 0, boxes  # the picture drawn; the fold closed
    first = page.inner_text(".cascade-summary")
    assert "This took" in first and "tokens/s" not in first  # one sentence; the speed is in the fold
    assert "Where the time went" in page.inner_text(".cascade-timebars")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".cascade-summary").first.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"summary-{viewport}.png"))
    # Opened, the fold says the rest in the summary's words; a new Generate clears the picture and the fold.
    assert "Speed:" in summary_text(page) and "It stopped because" in summary_text(page)
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function("() => !document.querySelector('.cascade-timebars .barlayer .point')", timeout=5_000)
    assert not page.locator(".cascade-more").first.is_visible()
    finished(page)


def test_after_compare_a_new_generate_shows_nothing_of_the_old_run(first_visit):
    page, viewport = first_visit
    prompt, generate = page.get_by_label("Prompt"), page.get_by_role("button", name="Generate")
    # A short run (16 tokens of raw text), then its comparison with the big model alone.
    prompt.fill("The cat sat")
    page.get_by_label("Raw: the model continues the text").check()
    page.get_by_text("More settings").click()
    most = page.get_by_label("number input for Most tokens to write")
    most.fill("16")
    most.press("Enter")
    shown = page.inner_text(".cascade-summary")  # a run shown before (an earlier test's, on this page)
    generate.click()
    finished(page, unlike=shown)
    page.get_by_role("button", name="Compare with the big model alone").click()
    page.wait_for_function("() => !!document.querySelector('.cascade-rules-chart .js-plotly-plot')", timeout=90_000)
    assert "big model alone" in page.inner_text(".cascade-compare-box")
    assert_nothing_overflows(page, viewport)  # the comparison, its diff and the curves fit too

    def nothing_of_the_comparison() -> None:
        page.wait_for_function("() => !document.querySelector('.cascade-compare-box')?.innerText.trim()",
                               timeout=15_000)
        page.locator(".cascade-rules").first.wait_for(state="hidden", timeout=10_000)

    # Refused (an empty prompt): the old comparison goes all the same.
    prompt.fill("")
    generate.click()
    page.wait_for_function("() => /prompt is empty/i.test(document.querySelector('.cascade-summary')?.innerText)",
                           timeout=30_000)
    nothing_of_the_comparison()
    # (The old run's file goes with the step that follows the request: wait for it, do not race it. After a
    # written answer the button comes back with that answer's own file, so only a refusal can show it gone.)
    page.get_by_role("button", name="Download this run").wait_for(state="hidden", timeout=10_000)
    # Written: its own answer, and no comparison until one is asked for.
    prompt.fill("The dog ran")
    generate.click()
    finished(page)
    nothing_of_the_comparison()
    page.get_by_text("Measured numbers (comparison)").click()
    assert "big_model_alone" not in page.inner_text("body")


def test_the_perplexity_bar_is_logarithmic_and_moves_the_what_if_and_a_fork_after_it_writes_with_its_runs_threshold(
        browser, page_url):
    page = opened(browser, page_url, "desktop", "prompt=The+cat+sat&mode=raw&rule=perplexity&threshold=5&max_tokens=16"
                                                "&run=1")  # the threshold decides
    finished(page)
    threshold = page.get_by_label(f"number input for {slider_props('perplexity')['label']}")
    bar = page.locator(".cascade-threshold-bar input[type=range]")
    assert float(threshold.input_value()) == 5.0 and int(bar.input_value()) == bar_position("perplexity", 5.0)
    # The middle of the bar is 10: perplexity 1 to 10 is half its length, not a tenth.
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("() => Math.abs(Number(document.querySelector('.cascade-threshold input[type=number]')"
                           ".value) - 10) <= 0.5", timeout=10_000)
    # ... and a what-if at that threshold, with no new run.
    page.wait_for_selector('.cascade-output[data-view="whatif"]', timeout=15_000)
    banner = page.inner_text(".whatif-banner")
    assert re.search(r"threshold (9\.\d|10(\.\d)?)\b", banner), banner
    # A threshold typed in moves the bar to it.
    threshold.fill("2")
    threshold.press("Enter")
    page.wait_for_function("(n) => Number(document.querySelector('.cascade-threshold-bar input[type=range]').value)"
                           " === n", arg=bar_position("perplexity", 2.0), timeout=10_000)
    assert bar_position("perplexity", 10.0) == BAR_STEPS // 2

    # A fork after moving the slider (a what-if at 2.5) writes with its run's threshold, and says so.
    threshold.fill("2.5")
    threshold.press("Enter")
    page.wait_for_function(r"() => /threshold 2\.5\b/.test(document.querySelector('.whatif-banner')?.innerText)",
                           timeout=15_000)
    page.locator(".cascade-text .tok").nth(2).click()
    tip = page.locator("body > .cascade-alts")
    tip.wait_for(state="visible", timeout=10_000)
    tip.locator(".alts-columns > div").nth(0).locator("tr.choice:not(.chosen)").first.click()
    said = page.get_by_text("This fork writes with the settings of the run it comes from")
    said.wait_for(timeout=15_000)
    assert "threshold 5, not the 2.5 the slider shows" in said.inner_text()
    # Listed as the second branch once it has run (its summary's first line may read as the first run's).
    page.wait_for_function("() => /2 · fork of 1 at token 2/.test(document.querySelector('.cascade-branches')"
                           "?.innerText)", timeout=90_000)
    finished(page)
    # The controls show the threshold it wrote with, and its chart draws that line.
    assert float(threshold.input_value()) == 5.0
    lines = page.evaluate("() => document.querySelector('.cascade-chart .js-plotly-plot').data"
                          ".filter(t => t.meta === 'threshold').map(t => t.y[0])")
    assert lines == [5.0]
    page.close()
