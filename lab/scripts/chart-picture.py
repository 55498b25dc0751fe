#!/usr/bin/env python3
"""A picture of a `tasks` report's charts, for the documents: the HTML that `python -m cascade tasks --html`
writes, drawn by headless Chromium (Playwright, the tests' browser) and saved as a PNG.

    python lab/scripts/chart-picture.py REPORT.json OUT.png [WIDTH]

It reads the report's JSON (`tasks --json`), so a picture can be re-made from a shipped results file
without running anything.
"""
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository, as it is not installed
from cascade.bench.tasks_report import chart_html  # noqa: E402


def picture(report: Path, out: Path, width: int = 1200) -> None:
    from playwright.sync_api import sync_playwright

    data = json.loads(report.read_text())
    with tempfile.TemporaryDirectory() as folder:
        html = Path(folder) / "chart.html"
        chart_html(data["results"], html, data["title"])
        with sync_playwright() as p:
            system = Path("/usr/bin/chromium")  # Debian's, as the tests use (scripts/setup installs it)
            browser = (p.chromium.launch(executable_path=str(system), args=["--headless", "--no-sandbox"])
                       if system.exists() else p.chromium.launch())
            page = browser.new_page(viewport={"width": width, "height": 640}, device_scale_factor=1)
            page.goto(html.as_uri())
            page.wait_for_selector(".main-svg")
            page.wait_for_timeout(500)  # plotly lays out its legend after the first paint
            page.locator(".plotly-graph-div").screenshot(path=str(out))
            browser.close()


if __name__ == "__main__":
    picture(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1200)
    print(sys.argv[2])
