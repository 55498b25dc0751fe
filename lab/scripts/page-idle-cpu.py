#!/usr/bin/env python3
"""What a Gradio page costs the browser: Chromium's CPU over 10 idle seconds on about:blank, on a minimal
`gr.Blocks` (one textbox) and on the project's page over the toy models; then Chromium's and this process's
(the server's) CPU for each of five runs of the page, each followed by 1.5 s idle. Headless Debian chromium.

    python lab/scripts/page-idle-cpu.py

Nothing else should run beside it.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gradio as gr  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from tests.helpers import CHROMIUM, CHROMIUM_ARGS, engine_for, finished, serve  # noqa: E402
from tests.toymodels import build_toy_models  # noqa: E402

IDLE_S = 10
BRANCHES = "(n) => document.querySelectorAll('.cascade-branches label').length === n"


def chromium_cpu_s() -> float:
    """CPU seconds of every Chromium process now running."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if "chrom" in Path(f"/proc/{pid}/comm").read_text():
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def idle_cost(page, url: str, ready) -> float:
    page.goto(url)
    ready(page)
    time.sleep(2)
    before = chromium_cpu_s()
    time.sleep(IDLE_S)
    return chromium_cpu_s() - before


def main() -> None:
    toy = build_toy_models(Path(tempfile.mkdtemp()))
    engine = engine_for(toy.small, toy.related)
    demo, url = serve(lambda progress: engine)
    with gr.Blocks() as minimal:
        gr.Textbox(label="Text")
    _, minimal_url, _ = minimal.launch(prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for name, where, ready in (
                    ("about:blank", "about:blank", lambda pg: None),
                    ("a minimal gr.Blocks", minimal_url, lambda pg: pg.get_by_label("Text").wait_for()),
                    ("the page (toy models)", url, lambda pg: pg.get_by_role("button", name="Generate").wait_for())):
                print(f"{name}: Chromium {idle_cost(page, where, ready):.2f} CPU-s over {IDLE_S} s idle")
            page.get_by_label("Prompt").fill("The cat sat")
            for i in range(5):
                chromium, server, started = chromium_cpu_s(), own_cpu_s(), time.perf_counter()
                page.get_by_role("button", name="Generate").click()
                if i:  # the list of branches shows from the second run on: this one is in it once it has finished
                    page.wait_for_function(BRANCHES, arg=i + 1, timeout=90_000)
                finished(page)
                time.sleep(1.5)
                print(f"run {i + 1}: Chromium {chromium_cpu_s() - chromium:.2f} CPU-s, server "
                      f"{own_cpu_s() - server:.2f} CPU-s, {time.perf_counter() - started:.2f} s")
            browser.close()
    finally:
        minimal.close()
        demo.close()


if __name__ == "__main__":
    main()
