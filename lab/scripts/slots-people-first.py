#!/usr/bin/env python3
"""The slots' order on a real pair, through `python -m cascade serve` (one process, 4 slots): the targets of the
slots' fairness, each measured side by side with its baseline in one run.

1. A streamed question's first token alone, then sent 0.5 s after two non-streamed requests with ~400-token
   prompts (a chat app's title and tags): both first tokens, and how long the background requests took.
2. One client (its own key) streaming 4 answers at once, then a second client's streamed question 1 s later:
   the second client's first token.
3. /health's time while every slot is busy.

    python lab/scripts/slots-people-first.py DRAFT.gguf TARGET.gguf [--threads 2] [--port 8931] [--batch-slots] \
        [--log serve.log]

Nothing else should run beside it (llama.cpp's threads spin: two busy processes slow each other far more than
twice).
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

from lab.api_load import BACKGROUND_PROMPT, stream_once  # noqa: E402
from lab.local import cascade_serve  # noqa: E402

QUESTION = "Explain in a few sentences how tides work."


def question(max_tokens: int = 32) -> dict:
    return {"model": "cascade", "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": QUESTION}]}


def background(n: int) -> dict:
    """A non-streamed request with a long prompt (about 400 tokens), as a chat app's title or tags request."""
    return {"model": "cascade", "max_tokens": 48,
            "messages": [{"role": "user", "content": f"({n}) " + BACKGROUND_PROMPT + "\n" + BACKGROUND_PROMPT[:600]}]}


def first_token_beside_two(http: httpx.Client, url: str) -> dict:
    alone = stream_once(http, url, question(), time.perf_counter(), {})
    walls: list[float] = []

    def send(n: int) -> None:
        sent = time.perf_counter()
        r = httpx.post(f"{url}/v1/chat/completions", json=background(n), timeout=600.0)
        r.raise_for_status()
        walls.append(time.perf_counter() - sent)

    threads = [threading.Thread(target=send, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    beside = stream_once(http, url, question(), time.perf_counter(), {})
    for t in threads:
        t.join()
    return {"alone_first_token_s": alone.first_token_s, "beside_two_first_token_s": beside.first_token_s,
            "background_wall_s": walls}


def second_client(http: httpx.Client, url: str) -> dict:
    streams: list = []

    def one(i: int) -> None:
        with httpx.Client(timeout=600.0) as own:
            body = question(200) | {"messages": [{"role": "user", "content": f"({i}) Tell me a long story."}]}
            streams.append(stream_once(own, url, body, time.perf_counter(), {"Authorization": "Bearer client-one"}))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    health = []
    for _ in range(5):
        sent = time.perf_counter()
        r = http.get(f"{url}/health")
        health.append((time.perf_counter() - sent, r.json()))
        time.sleep(0.1)
    other = stream_once(http, url, question(), time.perf_counter(), {"Authorization": "Bearer client-two"})
    for t in threads:
        t.join()
    return {"second_client_first_token_s": other.first_token_s,
            "first_client_first_tokens_s": sorted(s.first_token_s for s in streams if s.first_token_s),
            "health_s": [round(s, 4) for s, _ in health], "health_under_load": health[-1][1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("draft")
    parser.add_argument("target")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=8931)
    parser.add_argument("--batch-slots", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--log", type=Path, default=None, help="the server's log (a line per request) to this file")
    args = parser.parse_args()
    flags = ["--draft", args.draft, "--target", args.target, "--threads", str(args.threads)]
    flags += ["--batch-slots"] if args.batch_slots else []
    with cascade_serve(flags, args.port, env={"CASCADE_API_KEY": ""}, log=args.log) as url, \
            httpx.Client(timeout=httpx.Timeout(600.0, connect=30.0)) as http:
        stream_once(http, url, question(8), time.perf_counter(), {})  # warm
        figures = {"threads": args.threads, "batch_slots": args.batch_slots,
                   **first_token_beside_two(http, url), **second_client(http, url)}
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
