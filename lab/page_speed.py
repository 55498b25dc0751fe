"""What the page costs the models: the same request through the engine and through the page.

`python -m lab page-bench` serves the page in this process (a local port) and drives it with a
client in a process of its own, as a visitor's browser would be; each round runs one request through the
engine (to its Summary, the big model's reading of the text included, as the page waits for it) and the
same request through the page (from submit to the last update), in alternating order. It reports the
median of the rounds' page/engine ratios, the engine's own `routing_s` (where recording alternatives
shows), and the CPU time the page's own threads took (Gradio's server and its workers, read from
/proc), which does not drift with the machine's speed as wall times do.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.local import free_local_port

# A visitor's browser, in a process of its own (a client in the page's process would share its
# interpreter, and its work would be weighed as the page's): for each line read, one request to
# /generate; it prints the seconds from submit to the last update, the summary and the answer.
PAGE_CLIENT = """
import json, sys, time
from gradio_client import Client
url, inputs = sys.argv[1], json.loads(sys.argv[2])
client = Client(url, verbose=False)
for _ in sys.stdin:
    started = time.perf_counter()
    _, _, summary, text = client.predict(*inputs, api_name="/generate")
    print(json.dumps([time.perf_counter() - started, summary, text]), flush=True)
"""


def page_threads_cpu_s() -> float:
    """CPU seconds used so far by this process's page threads: Gradio's server and its workers, where the
    page's handlers run (not the engine's thread, nor llama.cpp's); 0 where /proc is not there."""
    page = {t.native_id for t in threading.enumerate()
            if t.name.startswith("AnyIO worker") or t.name.endswith("(run)")}
    ticks = 0
    for tid in page:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks / os.sysconf("SC_CLK_TCK")


class PageClient:
    """The client process: `request()` runs one generation through the page and times it."""

    def __init__(self, url: str, inputs: tuple) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", PAGE_CLIENT, url, json.dumps(list(inputs))],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def request(self) -> tuple[float, str, str]:
        """(seconds from submit to the last update, the page's summary, the answer's text)."""
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the page's client process ended; its error is above")
        seconds, summary, text = json.loads(line)
        return seconds, summary, text

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


@dataclass
class Round:
    engine_tokens_per_s: float
    page_tokens_per_s: float
    page_s: float
    page_cpu_s: float  # the page's own threads, during the page's run
    routing_s: float  # the engine's, in its own run


@dataclass
class PageSpeed:
    policy: str
    max_tokens: int
    alternatives: int
    n_threads: int
    rounds: list[Round] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """The page's tokens/s over the engine's: the median of each round's ratio."""
        return statistics.median(r.page_tokens_per_s / r.engine_tokens_per_s for r in self.rounds)

    @property
    def page_cpu_share(self) -> float:
        """The page threads' CPU time over the page's wall time, all rounds together."""
        return sum(r.page_cpu_s for r in self.rounds) / sum(r.page_s for r in self.rounds)

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "rounds"}, "ratio": self.ratio,
                "page_cpu_share": self.page_cpu_share, "rounds": [asdict(r) for r in self.rounds]}


def measure_page(engine: Any, prompt: str, *, mode: str = "chat", policy: str = "cascade", max_tokens: int = 64,
                 rounds: int = 4, log: Callable[[str], None] = lambda msg: None) -> PageSpeed:
    """Page against engine for one request, `rounds` times in alternating order, after a warm-up of each.
    (The page records both models' alternatives, `GenerationConfig.alternatives` at its default.)"""
    from cascade.ui.generate import GENERATE_INPUTS, SETTINGS, request_config
    from cascade.ui.layout import build_demo, queued
    from cascade.ui.link import page_defaults

    values = {**page_defaults(), "prompt": prompt, "mode": mode, "policy": policy, "max_tokens": max_tokens}
    config = request_config(mode, {name: values[name] for name in SETTINGS})
    demo = build_demo(lambda progress: engine, describe_models=None)
    _, url, _ = queued(demo).launch(server_name="127.0.0.1", server_port=free_local_port(), prevent_thread_lock=True,
                                    quiet=True)
    client = PageClient(url, tuple(values[name] for name in GENERATE_INPUTS))
    result = PageSpeed(policy, max_tokens, config.alternatives, engine.pair.config.n_threads)

    def by_engine():
        *_, summary = engine.generate(prompt, config)
        scoring_s = summary.quality.scoring_s if summary.quality is not None else 0.0
        return summary.counts.n_tokens / (summary.timings.wall_s + scoring_s), summary

    def by_page():
        cpu = page_threads_cpu_s()
        seconds, summary, text = client.request()
        n = int(re.search(r"of (\d+) tokens", summary).group(1))
        return n / seconds, seconds, page_threads_cpu_s() - cpu, text

    try:
        by_engine(), by_page()  # warm-up: weights paged in, every code path run once
        for i in range(rounds):
            if i % 2 == 0:
                (engine_speed, summary), page = by_engine(), by_page()
            else:
                page, (engine_speed, summary) = by_page(), by_engine()
            if page[3] != summary.text:
                raise RuntimeError("the page and the engine wrote different texts for the same request")
            result.rounds.append(Round(engine_speed, page[0], page[1], page[2], summary.timings.routing_s))
            log(f"round {i + 1}: engine {engine_speed:.2f} tok/s, page {page[0]:.2f} tok/s, page threads' CPU "
                f"{page[2]:.2f} s in {page[1]:.1f} s")
    finally:
        client.close()
        demo.close()
    return result


@dataclass(frozen=True)
class AlternativesCost:
    policy: str
    alternatives: int
    routing_s: float  # the median over the runs
    wall_s: float
    n_events: int


def alternatives_cost(engine: Any, prompt: str, *, policy: str = "cascade", max_tokens: int = 96,
                      threshold: float | None = None, rounds: int = 3, asked: int = 5) -> list[AlternativesCost]:
    """What recording each model's `asked` likeliest tokens costs: the same request with none and with
    them, alternating, `rounds` times each (medians); the draft's share shows in `routing_s`."""
    from cascade.engine.config import GenerationConfig

    settings = {"policy": policy, "max_tokens": max_tokens, **({"threshold": threshold} if threshold else {})}
    runs: dict[int, list[tuple[float, float, int]]] = {0: [], asked: []}
    for i in range(2 * rounds):
        k = (0, asked)[i % 2]
        *events, summary = engine.generate(prompt, GenerationConfig(alternatives=k, **settings), score=False)
        runs[k].append((summary.timings.routing_s, summary.timings.wall_s, len(events)))
    return [AlternativesCost(policy, k, statistics.median(r for r, _, _ in rows), statistics.median(w for _, w, _ in rows),
                             rows[0][2]) for k, rows in runs.items()]
