"""Code shown as code, in a real browser: an answer whose start opens a fence ("```python" and a new line,
given through "The answer starts with") shows a monospace block that keeps its spaces and line breaks,
with the models' tokens inside it in their colours, each with its hover table and its fork; a long line wraps
inside the block at 1400 and 390 px, nothing cut off. Leaves artifacts/code-answer.png.
"""

from __future__ import annotations

import pytest

from .helpers import ARTIFACTS, finished

pytestmark = pytest.mark.browser

FENCE = "```python\n"
LONG_LINE = "# " + "a comment line far longer than any window is wide, " * 5 + "\n"

BLOCK = """() => {
  const block = document.querySelector('.cascade-text .cascade-code');
  if (!block) return null;
  const style = getComputedStyle(block), box = block.getBoundingClientRect();
  const tokens = [...block.querySelectorAll('.tok')];
  return {font: style.fontFamily, space: style.whiteSpace, right: box.right, text: block.innerText,
          clipped: block.scrollWidth > block.clientWidth + 1,
          tokens: tokens.map(t => ({cls: t.className, colour: getComputedStyle(t).color,
                                    alt: t.hasAttribute('data-alt')})),
          outside: [...document.querySelectorAll('.cascade-text .tok')].filter(t => !block.contains(t)).length};
}"""


def test_a_code_answer_shows_a_monospace_block_with_its_tokens_coloured_hover_and_fork(browser, page_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_url)
    page.get_by_label("Prompt").fill("def is_palindrome(word):")
    page.get_by_label("Raw: the model continues the text").check()
    page.get_by_text("System message and the answer's start").click()
    start = page.get_by_label("The answer starts with")
    start.fill(FENCE + LONG_LINE)
    assert start.input_value() == FENCE + LONG_LINE
    page.get_by_role("button", name="Generate").click()
    finished(page)

    block = page.evaluate(BLOCK)
    assert block, "no code block in the answer"
    assert "monospace" in block["font"] and block["space"] == "pre-wrap" and not block["clipped"]
    assert block["text"].startswith("```python\n") and block["outside"] == 0  # the fence is open to the end
    written = [t for t in block["tokens"] if "given" not in t["cls"]]
    assert written and all(t["alt"] for t in written)  # every token keeps the hover's data
    red = [t for t in written if "red" in t["cls"].split()]
    assert red and all(t["colour"] == "rgb(198, 40, 40)" for t in red)  # the big model's tokens, red in the block
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".cascade-text").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "code-answer.png"), full_page=False)

    # A token in the block hovers and forks as anywhere else: its table, and a click pins it with choices.
    token = page.locator(".cascade-code .tok.red").first
    token.hover()
    tip = page.locator("body > .cascade-alts")
    tip.wait_for(state="visible", timeout=10_000)
    assert "written by the big model" in tip.locator(".alts-details").inner_text()
    token.click()
    assert tip.locator("tr.choice").count() > 0 and "write on from it" in tip.inner_text()
    page.keyboard.press("Escape")

    # On a phone the block stays inside the screen, its long line wrapped, none cut off.
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function(f"() => {{ const b = ({BLOCK})(); return b && b.right <= 390 && !b.clipped; }}",
                           timeout=5_000)  # laid out anew at that width (a block that never fits times out here)
    phone = page.evaluate(BLOCK)
    assert phone["right"] <= 390 and not phone["clipped"]
    page.close()
