"""Many clients at once against the OpenAI-compatible API at a base URL (`serve`, or Ray Serve's proxy in
front of replicas): how many answers were lost, how soon each first token came, the tokens per second of
all answers together, and which replica answered each (its `X-Cascade-Replica` header) from when on.

`python -m lab api-load --url URL --concurrency 20` sends 20 streaming requests at once, each client
one; `--duration S` keeps the 20 clients asking, one request after another, for S seconds, to watch
replicas added under load (the first token of each replica's first answer is timed from the start).
An answer is lost unless its stream ends with `data: [DONE]`: an error status, an error chunk, a
connection that breaks or a stream that stops short all count, with their reason.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Stream:
    started_s: float  # when the request was sent, from the start of the load
    first_token_s: float | None  # from the request to its first token; None if none came
    wall_s: float  # from the request to the end of its stream
    n_tokens: int
    replica: str  # X-Cascade-Replica ("" from a server that sends none)
    attempts: int  # X-Cascade-Attempts: 2 when a replica died before it answered and another did
    lost: str = ""  # why the answer did not end with [DONE]; "" when it did


@dataclass
class Load:
    url: str
    concurrency: int
    wall_s: float = 0.0
    streams: list[Stream] = field(default_factory=list)

    @property
    def lost(self) -> list[Stream]:
        return [s for s in self.streams if s.lost]

    @property
    def tokens_per_s(self) -> float:
        """Every answer's tokens over the load's wall time: what the server wrote per second in all."""
        return sum(s.n_tokens for s in self.streams) / self.wall_s if self.wall_s > 0 else 0.0

    def first_token(self, quantile: float) -> float | None:
        times = sorted(s.first_token_s for s in self.streams if s.first_token_s is not None)
        return times[min(len(times) - 1, int(quantile * len(times)))] if times else None

    def replicas(self) -> dict[str, dict[str, Any]]:
        """Each replica that answered: how many answers it wrote, and when (from the start of the load) the
        first token of its first answer came (None if none did), in that order."""
        out: dict[str, dict[str, Any]] = {}
        for s in self.streams:
            if s.lost and not s.replica:
                continue  # no server answered it
            entry = out.setdefault(s.replica or "the server", {"answers": 0, "first_token_at_s": None})
            entry["answers"] += 1
            if s.first_token_s is not None:
                at, earliest = s.started_s + s.first_token_s, entry["first_token_at_s"]
                entry["first_token_at_s"] = at if earliest is None else min(at, earliest)
        return dict(sorted(out.items(), key=lambda item: (item[1]["first_token_at_s"] is None,
                                                          item[1]["first_token_at_s"] or 0.0)))

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "concurrency": self.concurrency, "wall_s": self.wall_s,
                "requests": len(self.streams), "lost": len(self.lost), "tokens_per_s": self.tokens_per_s,
                "first_token_median_s": self.first_token(0.5), "first_token_p90_s": self.first_token(0.9),
                "retried": sum(s.attempts > 1 for s in self.streams), "replicas": self.replicas(),
                "streams": [asdict(s) for s in self.streams]}

    def lines(self) -> list[str]:
        """The report, in words."""
        def ms(t: float | None) -> str:
            return "-" if t is None else f"{1000 * t:.0f} ms"

        retried = sum(s.attempts > 1 for s in self.streams)
        out = [(f"{len(self.streams)} streaming requests, {self.concurrency} at a time, in {self.wall_s:.1f} s: "
                f"{len(self.lost)} lost, {retried} retried on another replica"),
               (f"first token: median {ms(self.first_token(0.5))}, 90th percentile {ms(self.first_token(0.9))}; "
                f"{self.tokens_per_s:.1f} tokens/s in all")]
        for replica, entry in self.replicas().items():
            at = entry["first_token_at_s"]
            out.append(f"  {'' if replica == 'the server' else 'replica '}{replica}: {entry['answers']} answers, " +
                       ("no token" if at is None else f"its first token at {at:.1f} s"))
        for s in self.lost[:5]:
            out.append(f"  lost (sent at {s.started_s:.1f} s): {s.lost}")
        return out


def count_tokens(choice: dict[str, Any]) -> int:
    """A chunk's tokens: those its `cascade` extension lists, or one for text from a server without it."""
    return len((choice.get("cascade") or {}).get("tokens", [])) or int(bool((choice.get("delta") or {}).get("content")))


def stream_once(client: Any, url: str, body: dict[str, Any], start: float, headers: dict[str, str]) -> Stream:
    """One streamed chat completion, read to its end; never raises (a failure is the stream's `lost`)."""
    sent = time.perf_counter()
    first, n, replica, attempts, lost, done = None, 0, "", 0, "", False
    try:
        with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            replica, attempts = r.headers.get("x-cascade-replica", ""), int(r.headers.get("x-cascade-attempts", "1"))
            if r.status_code != 200:
                lost = f"HTTP {r.status_code}: {r.read().decode(errors='replace')[:200]}"
            for line in r.iter_lines() if not lost else ():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                chunk = json.loads(line[len("data: "):])
                if "error" in chunk:
                    lost = f"an error chunk: {chunk['error'].get('message')}"
                    continue
                tokens = sum(count_tokens(choice) for choice in chunk.get("choices", []))
                if tokens and first is None:
                    first = time.perf_counter() - sent
                n += tokens
    except Exception as e:  # noqa: BLE001 - a broken connection is a lost answer, reported as such
        lost = f"{type(e).__name__}: {e}"
    if not lost and not done:
        lost = "the stream ended without [DONE]"
    return Stream(sent - start, first, time.perf_counter() - sent, n, replica, attempts, lost)


def run_load(url: str, concurrency: int, requests: int | None = None, duration_s: float | None = None,
             model: str = "cascade", max_tokens: int = 64, prompt: str = "Explain in a few sentences how tides work.",
             key: str = "", log: Callable[[str], None] = lambda _m: None) -> Load:
    """`concurrency` clients at once, until `requests` answers were asked for in all (default: one each) or,
    with `duration_s`, until that many seconds have passed (each client asks again as soon as it has read
    an answer)."""
    import httpx

    if concurrency < 1 or (requests is not None and requests < 1) or (duration_s is not None and duration_s <= 0):
        raise ValueError("--concurrency and --requests must be at least 1, --duration above 0")
    url = url.rstrip("/").removesuffix("/v1")
    total = requests if requests is not None else (None if duration_s else concurrency)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    load, lock, asked = Load(url, concurrency), threading.Lock(), [0]
    start = time.perf_counter()

    def client(i: int) -> None:
        with httpx.Client(timeout=httpx.Timeout(600.0, connect=30.0)) as http:
            while True:
                with lock:
                    if (total is not None and asked[0] >= total) or \
                            (duration_s is not None and time.perf_counter() - start >= duration_s):
                        return
                    asked[0] += 1
                    n = asked[0]
                body = {"model": model, "stream": True, "max_tokens": max_tokens,
                        "messages": [{"role": "user", "content": f"{prompt} ({n})"}]}
                stream = stream_once(http, url, body, start, headers)
                with lock:
                    load.streams.append(stream)
                log(f"[{stream.started_s + stream.wall_s:6.1f} s] answer {n}: {stream.n_tokens} tokens from "
                    f"{stream.replica or 'the server'}" + (f", lost: {stream.lost}" if stream.lost else ""))

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(client, range(concurrency)))
    load.wall_s = time.perf_counter() - start
    load.streams.sort(key=lambda s: s.started_s)
    return load


# ---- one answer beside another: a chat app's own request and its user's --------------------------------

# Like the request a chat app sends to name a new chat (Open WebUI: about 270 prompt tokens, non-streamed),
# but asking for a long answer, so that it is still being written when the user's question comes.
BACKGROUND_PROMPT = ("### Chat History:\n<chat_history>\n" +
                     "USER: Tell me about the tides and the moon, and why there are two tides a day.\n"
                     "ASSISTANT: The moon's gravity pulls the ocean toward it on the near side, and the earth is "
                     "pulled away from the water on the far side, so two bulges travel around the earth.\n" * 4 +
                     "</chat_history>\n### Task:\nRetell the chat above as a story for children of about 300 words, "
                     "in several paragraphs.")


@dataclass(frozen=True)
class Beside:
    alone_first_token_s: float | None  # the user's streamed request with nothing else running
    first_token_s: float | None  # the same request sent `delay_s` after the background one
    background_wall_s: float  # the non-streamed background request, from sent to answered
    background_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_token_beside(url: str, background_tokens: int = 200, delay_s: float = 0.5, model: str = "cascade",
                       prompt: str = "Explain in a few sentences how tides work.", key: str = "") -> Beside:
    """A streamed request alone, then the same request sent `delay_s` after a non-streamed one of
    `background_tokens` (how a chat app's title request and its user's question arrive): each first token."""
    import httpx

    url = url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    question = {"model": model, "stream": True, "max_tokens": 32, "messages": [{"role": "user", "content": prompt}]}
    background = {"model": model, "max_tokens": background_tokens,
                  "messages": [{"role": "user", "content": BACKGROUND_PROMPT}]}
    with httpx.Client(timeout=httpx.Timeout(600.0, connect=30.0)) as http:
        alone = stream_once(http, url, question, time.perf_counter(), headers)
        answered: dict[str, Any] = {}

        def send_background() -> None:
            sent = time.perf_counter()
            try:
                r = httpx.post(f"{url}/v1/chat/completions", json=background, headers=headers, timeout=600.0)
                r.raise_for_status()
                answered.update(wall=time.perf_counter() - sent,
                                tokens=r.json().get("usage", {}).get("completion_tokens", 0))
            except Exception as e:  # noqa: BLE001 - told in the caller's words
                answered.update(error=f"{type(e).__name__}: {e}")

        thread = threading.Thread(target=send_background)
        thread.start()
        time.sleep(delay_s)
        beside = stream_once(http, url, question, time.perf_counter(), headers)
        thread.join()
    if alone.lost or beside.lost or "error" in answered:
        raise ValueError(f"an answer from {url} was lost: {alone.lost or beside.lost or answered['error']}")
    return Beside(alone.first_token_s, beside.first_token_s, answered["wall"], answered["tokens"])
