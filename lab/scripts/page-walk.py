#!/usr/bin/env python3
"""A visitor's walk through the page on a real pair in Chromium, at 1400x1000 and 390x844, with screenshots.

Serves `app.py` on DRAFT and TARGET, presses Generate at the page's start, and reports: the chart's labels (the
perplexity axis and the threshold line), the verdict's first line (with its estimate of the big model alone), the
same line after Compare (measured), how soon a new Generate removes a comparison still writing, the first-token
time of that answer against the first run's, Stop pressed 0.1 s after Generate and during a comparison, Gradio's
"Error" badges, and on a phone the order of the sentence, the time picture and the
fold (their boxes' tops). Screenshots go to OUT (default /tmp/page-walk).

    python lab/scripts/page-walk.py DRAFT.gguf TARGET.gguf [--threads 2] [--out DIR] [--port 7931]

Needs Debian's chromium at /usr/bin/chromium and the playwright package. Nothing else should run beside it.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers import CHROMIUM, CHROMIUM_ARGS, FINISHED_JS, summary_text  # noqa: E402

COMPARE_BOX = "document.querySelector('.cascade-compare-box')?.innerText || ''"
# Gradio's badge on an output whose event failed or was cancelled mid-yield: an element reading just "Error".
ERROR_BADGES = ("() => Array.from(document.querySelectorAll('body *')).filter(e => !e.children.length && "
                "e.textContent.trim() === 'Error' && e.getClientRects().length).length")


def first_token_s(page) -> float | None:
    found = re.search(r"first token came after ([\d.]+) s", summary_text(page))
    return float(found.group(1)) if found else None


def generated(page) -> None:
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function(FINISHED_JS, arg=None, timeout=300_000)
    page.wait_for_timeout(500)


def desktop(browser, url: str, out: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    generated(page)
    print("first line:", page.inner_text(".cascade-summary >> nth=0"))
    print("chart:", page.evaluate("() => Array.from(document.querySelectorAll('.cascade-chart .g-ytitle, "
                                  ".cascade-chart .gtitle, .cascade-chart .legendtext')).map(e => e.textContent)"))
    page.screenshot(path=str(out / "desktop-after-generate.png"), full_page=True)
    first = first_token_s(page)
    compare = page.get_by_role("button", name="Compare with the big model alone")
    compare.click()
    page.wait_for_function("() => /alone took/.test(document.querySelector('.cascade-summary')?.innerText || '')",
                           timeout=300_000)
    page.wait_for_function("() => /Which rule decides best/.test(document.body.innerText) && "
                           "!/Reading the big model's text/.test(document.body.innerText)", timeout=120_000)
    page.wait_for_timeout(800)  # the comparison's last step (a second click while it runs is dropped)
    print("after Compare:", page.inner_text(".cascade-summary >> nth=0"))
    page.screenshot(path=str(out / "desktop-after-compare.png"), full_page=True)
    compare.click()
    page.wait_for_function(f"() => /alone is writing/.test({COMPARE_BOX})", timeout=120_000)
    page.wait_for_timeout(1500)
    before = page.inner_text(".cascade-summary >> nth=0")
    started = time.perf_counter()
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function(f"() => !({COMPARE_BOX}).trim()", timeout=10_000)
    print(f"a comparison still writing was gone {time.perf_counter() - started:.2f} s after Generate")
    page.wait_for_function(FINISHED_JS, arg=before, timeout=300_000)  # the new run's line, not the last one's
    page.wait_for_timeout(1500)
    print("first token: first run", first, "s; after the interrupted comparison", first_token_s(page), "s;",
          "comparison box now:", repr(page.evaluate(f"() => {COMPARE_BOX}")))
    page.screenshot(path=str(out / "desktop-generate-during-compare.png"), full_page=True)
    print("Gradio error badges on the page:", page.evaluate(ERROR_BADGES))
    # Stop during a comparison (of the run just finished); then the moment after Generate.
    compare.click()
    page.wait_for_function(f"() => /alone is writing/.test({COMPARE_BOX})", timeout=120_000)
    started = time.perf_counter()
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function(f"() => !({COMPARE_BOX}).trim()", timeout=10_000)
    gone = time.perf_counter() - started
    page.wait_for_timeout(3000)
    print(f"Stop during Compare: its box gone after {gone:.2f} s; 3 s later box {page.evaluate(f'() => {COMPARE_BOX}')!r}"
          f", error badges {page.evaluate(ERROR_BADGES)}")
    page.get_by_role("button", name="Generate").click()
    page.wait_for_timeout(100)
    page.get_by_role("button", name="Stop").click()
    stopped = "() => /^Stopped/.test(document.querySelector('.cascade-summary')?.innerText || '')"
    page.wait_for_function(stopped, timeout=10_000)
    page.wait_for_timeout(3000)  # room for a run left going to draw again
    print("Stop 0.1 s after Generate:", repr(page.inner_text(".cascade-summary >> nth=0")),
          "; still stopped 3 s later:", page.evaluate(stopped))
    page.screenshot(path=str(out / "desktop-after-stops.png"), full_page=True)
    page.close()


def phone(browser, url: str, out: Path) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(url)
    generated(page)
    tops = page.evaluate("() => ['.cascade-summary', '.cascade-timebars', '.cascade-more'].map(s => "
                         "{ const e = document.querySelector(s); return e ? [s, Math.round(e.getBoundingClientRect()"
                         ".top)] : [s, null]; })")
    print("phone, boxes' tops:", tops)
    page.locator(".cascade-summary").first.scroll_into_view_if_needed()
    page.screenshot(path=str(out / "phone-summary.png"))
    page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("draft")
    parser.add_argument("target")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/page-walk"))
    parser.add_argument("--port", type=int, default=7931)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CASCADE_DRAFT": args.draft, "CASCADE_TARGET": args.target,
           "CASCADE_THREADS": str(args.threads), "GRADIO_ANALYTICS_ENABLED": "False"}
    with open(args.out / "app.log", "w") as log:
        app = subprocess.Popen([sys.executable, "app.py", "--port", str(args.port)], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{args.port}/"
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            desktop(browser, url, args.out)
            phone(browser, url, args.out)
            browser.close()
    finally:
        app.terminate()
        app.wait()
    print("screenshots:", args.out)


if __name__ == "__main__":
    main()
