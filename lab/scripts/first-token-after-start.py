#!/usr/bin/env python3
"""A streamed question's first token straight after `python -m cascade serve` has started (4 slots): alone, four
times, then beside a title-like background request sent 0.4 s before it, three times. Whether the API itself is
slow on its first question (Open WebUI's first question after a start is: `measure-open-webui.py`).

    python lab/scripts/first-token-after-start.py DRAFT.gguf TARGET.gguf [--threads 2] [--port 8956]

Nothing else should run beside it.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab.api_load import BACKGROUND_PROMPT  # noqa: E402
from lab.local import cascade_serve  # noqa: E402


def first_token_s(url: str, question: str) -> float | None:
    body = {"model": "cascade", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": question}]}
    sent = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:]).get("choices")
                if choices and choices[0]["delta"].get("content"):
                    return time.perf_counter() - sent
    return None


def title_like(url: str, n: int) -> None:
    """A non-streamed request with a prompt of about 270 tokens, as a chat app's title request."""
    body = {"model": "cascade", "max_tokens": 30,
            "messages": [{"role": "user", "content": f"({n}) " + BACKGROUND_PROMPT[:1100]}]}
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("draft")
    parser.add_argument("target")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=8956)
    args = parser.parse_args()
    flags = ["--draft", args.draft, "--target", args.target, "--threads", str(args.threads), "--parallel", "4"]
    with cascade_serve(flags, args.port) as url:
        alone = [first_token_s(url, f"({i}) Explain what a hash table is in two sentences.") for i in range(4)]
        beside = []
        for i in range(3):
            title = threading.Thread(target=title_like, args=(url, i))
            title.start()
            time.sleep(0.4)
            beside.append(first_token_s(url, f"({i}) Explain what a hash table is in two sentences."))
            title.join()
        print(f"{args.threads} threads, 4 slots: first token alone {', '.join(f'{t:.2f}' for t in alone)} s; "
              f"beside a title-like request {', '.join(f'{t:.2f}' for t in beside)} s")


if __name__ == "__main__":
    main()
