#!/usr/bin/env python3
"""Where the page's own CPU goes, with no model running beside it: one request at the page's start is
written once by the engine, then its events are replayed through the page (served in this process, driven
by a client process as `page-bench` does) at a steady pace, so that only the page works. Reported for two
pacings: the page's own (a picture at most every UPDATE_EVERY_S), and pictures only at the start and the
end (what Gradio costs with nothing drawn between). For each: the page threads' CPU over the page's time,
split into Gradio's
event loop and its workers (where our handler draws), the pictures drawn and our drawing's CPU per picture.

    python lab/scripts/page-cpu.py DRAFT.gguf TARGET.gguf [TOKENS] [ROUNDS] [TOKENS_PER_S]

Linux only (reads /proc). Defaults: 64 tokens, 3 rounds, 8 tokens a second; CASCADE_THREADS threads per model (2).
"""
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository, as it is not installed
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from lab.local import free_local_port
from lab.page_speed import PageClient
from cascade.engine.config import ModelConfig
from cascade.engine.engine import Engine
from cascade.engine.events import TokenEvent
from cascade.engine.models import load_pair
from cascade.routing.router import load_router
from cascade.ui import run as page_run
from cascade.ui.generate import GENERATE_INPUTS
from cascade.ui.layout import build_demo, queued
from cascade.ui.link import page_defaults

D, T = sys.argv[1], sys.argv[2]
TOKENS = int(sys.argv[3]) if len(sys.argv) > 3 else 64
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
PACE = float(sys.argv[5]) if len(sys.argv) > 5 else 8.0
PROMPT = "Explain to a ten-year-old why the sky is blue."


class Replay:
    """The engine, but each request's events are written once and then replayed, PACE tokens a second."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.recorded = engine, {}

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompt, config, **options):
        key = (prompt, config, tuple(sorted(options.items())))
        if key not in self.recorded:
            self.recorded[key] = list(self.engine.generate(prompt, config, **options))
        for event in self.recorded[key]:
            if isinstance(event, TokenEvent):
                time.sleep(1 / PACE)
            yield event


def cpu_by_part() -> dict[str, float]:
    """CPU seconds so far of Gradio's event loop (its server thread) and of its workers (our handler)."""
    parts = {"loop": 0.0, "workers": 0.0}
    for t in threading.enumerate():
        part = "loop" if t.name.endswith("(run)") else "workers" if t.name.startswith("AnyIO worker") else None
        if part is None:
            continue
        try:
            fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parts[part] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return parts


drawn: list[float] = []
_draw = page_run.Pacer.draw


def counted_draw(self, run):
    started = time.thread_time()
    update = _draw(self, run)
    drawn.append(time.thread_time() - started)
    return update


page_run.Pacer.draw = counted_draw

pair = load_pair(ModelConfig(draft=D, target=T, n_threads=int(os.environ.get("CASCADE_THREADS", "2"))))
engine = Replay(Engine(pair, router=load_router("", pair.draft_path)))  # the page's start: the router where one ships
router = engine.router
demo = build_demo(lambda progress: engine, describe_models=None, router=(lambda: router) if router else None)
_, url, _ = queued(demo).launch(server_name="127.0.0.1", server_port=free_local_port(), prevent_thread_lock=True,
                                quiet=True)
values = {**page_defaults(), "prompt": PROMPT, "mode": "chat", "max_tokens": TOKENS}
if router is not None:
    values.update(rule="learned", threshold=None)
client = PageClient(url, tuple(values[name] for name in GENERATE_INPUTS))
every = page_run.UPDATE_EVERY_S
try:
    client.request()  # written by the models, and every code path run once
    print(f"{TOKENS} tokens, replayed at {PACE:g} tokens/s, rule {values['rule']}, {ROUNDS} rounds each")
    for name, interval in (("the page's pacing", every), ("pictures at the start and end only", 1e9)):
        page_run.UPDATE_EVERY_S = interval
        drawn.clear()
        before, wall = cpu_by_part(), 0.0
        for _ in range(ROUNDS):
            wall += client.request()[0]
        after = cpu_by_part()
        used = {part: after[part] - before[part] for part in after}
        print(f"{name}: page threads' CPU {sum(used.values()):.2f} s in {wall:.1f} s "
              f"({100 * sum(used.values()) / wall:.1f}%; event loop {used['loop']:.2f} s, workers "
              f"{used['workers']:.2f} s); pictures while writing: {len(drawn) / ROUNDS:.0f} a request, our "
              f"drawing {1000 * sum(drawn) / max(len(drawn), 1):.1f} ms each")
finally:
    page_run.UPDATE_EVERY_S = every
    client.close()
    demo.close()
