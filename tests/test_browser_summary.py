"""The verdict in one sentence and one picture, in a real browser over the toy models: after Generate, the
summary's sentence, then the picture of where the time went, then the closed fold "More about this run" with the
rest, in that order and nothing between them, on a phone (390×844) and on a desktop (1400×1000); a new Generate
clears the picture and the fold. Leaves artifacts/summary-phone.png and artifacts/summary-desktop.png."""

from __future__ import annotations

import pytest

from .helpers import ARTIFACTS, finished, summary_text

pytestmark = pytest.mark.browser

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


@pytest.mark.parametrize("viewport", [(390, 844), (1400, 1000)], ids=["phone", "desktop"])
def test_after_a_run_the_sentence_then_the_picture_then_the_fold(browser, page_url, viewport):
    width, height = viewport
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(page_url)
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
    page.screenshot(path=str(ARTIFACTS / f"summary-{'phone' if width < 768 else 'desktop'}.png"))
    # Opened, the fold says the rest in the summary's words; a new Generate clears the picture and the fold.
    assert "Speed:" in summary_text(page) and "It stopped because" in summary_text(page)
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function("() => !document.querySelector('.cascade-timebars .barlayer .point')", timeout=5_000)
    assert not page.locator(".cascade-more").first.is_visible()
    finished(page)
    page.close()
