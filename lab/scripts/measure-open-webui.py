"""The first answer's first token through Open WebUI, as its users meet it: title generation on, so a
non-streamed title request reaches the API beside the user's streamed answer.

Starts `python -m cascade serve` (with --parallel N) and Open WebUI (installed apart: it is about 7.5 GB,
`python -m venv ~/.venvs/owui && ~/.venvs/owui/bin/pip install open-webui`), opens Open WebUI in Chromium,
and for each round starts a new chat, types a question and times, from the key press, when the answer's
first text shows.

    python lab/scripts/measure-open-webui.py --open-webui ~/.venvs/owui/bin/open-webui \
        --draft D.gguf --target T.gguf --parallel 4 --rounds 3

With --stand-in, an API that answers at once (`openai-stand-in.py`) replaces the models: Open WebUI's own time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ["Write a Python function that returns the n-th Fibonacci number.",
             "Explain what a hash table is in two sentences.",
             "Give three tips for writing clear commit messages.",
             "Write a Python function that checks whether a string is a palindrome."]


def wait_for(url: str, seconds: float, ok=lambda status: status == 200) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if ok(r.status):
                    return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


def start_api(args, port: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "cascade", "serve", "--draft", args.draft, "--target", args.target,
               "--threads", str(args.threads), "--parallel", str(args.parallel), "--port", str(port)]
    if args.stand_in:  # Open WebUI's own cost: an API that answers at once
        command = [sys.executable, str(Path(__file__).with_name("openai-stand-in.py")), str(port)]
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            cwd=ROOT)


def start_open_webui(args, api_port: int, port: int, data: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "DATA_DIR": str(data), "WEBUI_SECRET_KEY": "measure", "WEBUI_AUTH": "False",
           "ENABLE_OLLAMA_API": "False", "ENABLE_OPENAI_API": "True",
           "OPENAI_API_BASE_URL": f"http://127.0.0.1:{api_port}/v1", "OPENAI_API_KEY": "none",
           "DEFAULT_MODELS": args.model, "OFFLINE_MODE": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "RAG_EMBEDDING_MODEL": "", "RAG_EMBEDDING_MODEL_AUTO_UPDATE": "False",
           "RAG_RERANKING_MODEL_AUTO_UPDATE": "False", "WHISPER_MODEL_AUTO_UPDATE": "False",
           "ENABLE_VERSION_UPDATE_CHECK": "False", "ENABLE_TITLE_GENERATION": "True"}
    return subprocess.Popen([args.open_webui, "serve", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def first_token_s(page, base: str, question: str, settle_s: float) -> float:
    page.goto(base + "/")
    box = page.locator("#chat-input")
    box.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    for _ in range(5):  # a first visit's changelog or welcome dialog
        dialog = page.locator("[role=dialog]")
        if not dialog.count() or not dialog.first.is_visible():
            break
        buttons = dialog.first.get_by_role("button", name=re.compile("okay|let's go|close|dismiss|got it", re.I))
        if buttons.count():
            buttons.first.click()
        else:
            page.keyboard.press("Escape")
        page.wait_for_timeout(500)
    box.click()
    page.keyboard.type(question)
    before = page.evaluate("document.querySelectorAll('#response-content-container').length")
    page.keyboard.press("Enter")
    sent = time.perf_counter()
    page.wait_for_function(
        """n => { const all = document.querySelectorAll('#response-content-container');
                  return all.length > n && all[all.length - 1].innerText.trim().length > 0; }""",
        arg=before, timeout=120_000, polling=20)
    took = time.perf_counter() - sent
    # Let the answer and Open WebUI's own requests after it (title, tags, follow-ups) finish.
    page.wait_for_timeout(settle_s * 1000)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--open-webui", required=True, help="the open-webui executable")
    parser.add_argument("--draft", default="")
    parser.add_argument("--target", default="")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--model", default="cascade", help="the policy Open WebUI chats with (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chromium", default="/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else "",
                        help="a Chromium to drive (default: /usr/bin/chromium where it exists, else Playwright's)")
    parser.add_argument("--settle", type=float, default=20, help="seconds after each first token, for the rest")
    parser.add_argument("--stand-in", action="store_true",
                        help="an API that answers at once instead of the models (Open WebUI's own time)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="measure-open-webui-"))
    sys.path.insert(0, str(ROOT))
    from lab.local import free_local_port

    api_port, ui_port = free_local_port(), free_local_port()
    api = start_api(args, api_port, work / "api.log")
    ui = start_open_webui(args, api_port, ui_port, work / "data", work / "open-webui.log")
    try:
        wait_for(f"http://127.0.0.1:{api_port}/health", 600)
        wait_for(f"http://127.0.0.1:{ui_port}/health", 600)
        times = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium or None,
                                        args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for r in range(args.rounds):
                took = first_token_s(page, f"http://127.0.0.1:{ui_port}", QUESTIONS[r % len(QUESTIONS)],
                                     args.settle)
                times.append(took)
                print(f"round {r + 1}: first text after {took:.2f} s", flush=True)
            browser.close()
        print(f"--parallel {args.parallel}, {args.threads} threads, model {args.model}: first text after "
              f"{statistics.median(times):.2f} s (median of {len(times)}; {', '.join(f'{t:.2f}' for t in times)})")
        print(f"logs: {work}")
    finally:
        for process in (ui, api):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
