"""Helpers the tests share: engines over toy models, running a request, the command line, the page.

Fixtures live in conftest.py; everything a test imports by name lives here, so no test module imports
from another.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from cascade import Engine, GenerationConfig, ModelConfig, load_pair  # noqa: E402
from cascade.engine.policies import POLICY_TABLE  # noqa: E402
from cascade.engine.events import Counts, Summary, Timings, TokenEvent, Written  # noqa: E402
from cascade.routing.budget import BudgetTracker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# The policies the engine's own loop writes (every one but those with a loop of their own, the seed's):
# a test of the loop's invariants iterates over these, so a new policy cannot escape it.
ENGINE_LOOP_POLICIES = tuple(p.name for p in POLICY_TABLE.values() if not p.own_loop)

# ---- engines and requests -------------------------------------------------------------------------

# One llama.cpp thread per toy model: the same text as two, and on a busy two-core machine two threads wait
# on each other at every step (the engine's tests took 104 s at two threads against 13 s at one, load 4.5).
TOY_THREADS = 1

_ENGINES: dict[tuple, Engine] = {}


def engine_for(draft: Path, target: Path, **model_settings) -> Engine:
    """One engine per model pair and settings for the whole session: loading is the slow part."""
    key = (str(draft), str(target), tuple(sorted(model_settings.items())))
    if key not in _ENGINES:
        settings = {"n_threads": TOY_THREADS, "n_ctx": 1024, **model_settings}
        config = ModelConfig(draft=str(draft), target=str(target), **settings)
        _ENGINES[key] = Engine(load_pair(config))
    return _ENGINES[key]


def run(engine: Engine, prompt: str, **settings) -> tuple[list[TokenEvent], Summary]:
    """One request: its token events, and its Summary."""
    events = list(engine.generate(prompt, GenerationConfig(**settings)))
    summary = events.pop()
    assert isinstance(summary, Summary)
    return events, summary


def accepted_ids(events: list[TokenEvent]) -> list[int]:
    return [e.token_id for e in events if e.accepted]


def replay(rule: str, budget: float, scores, prior=None) -> list[bool]:
    """Which of a recorded answer's positions a budget would send to the big model."""
    tracker = BudgetTracker(rule, budget, prior)
    return [tracker.judge(s) for s in scores]


# ---- time, as a test controls it ---------------------------------------------------------------------

class FakeClock:
    """A clock that moves only when a test moves it (`now`), for code that takes a `clock=`."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def in_thread(work, *args) -> threading.Thread:
    """`work(*args)` started in a daemon thread (join it with a timeout: a test that hangs then fails)."""
    thread = threading.Thread(target=work, args=args, daemon=True)
    thread.start()
    return thread


# ---- snapshots: the words a visitor reads, one file per surface ---------------------------------------

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def assert_snapshot(surface: str, text: str) -> None:
    """`text` is tests/snapshots/<surface>.txt, whole; CASCADE_UPDATE_SNAPSHOTS=1 writes it instead."""
    path = SNAPSHOTS / f"{surface}.txt"
    if os.environ.get("CASCADE_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no snapshot of {surface}: run the test with CASCADE_UPDATE_SNAPSHOTS=1"
    kept = path.read_text(encoding="utf-8")
    diff = "\n".join(difflib.unified_diff(kept.splitlines(), text.splitlines(), "kept", "now", lineterm=""))
    assert text == kept, (f"the words of {surface} changed; if meant, run with CASCADE_UPDATE_SNAPSHOTS=1 "
                          f"and read the diff of {path.relative_to(ROOT)}:\n{diff}")


# ---- the command line ------------------------------------------------------------------------------

def cascade(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
            module: str = "cascade") -> subprocess.CompletedProcess:
    """`python -m cascade ARGS` (or another `module`: `lab`) in a new process, from the repository root; its
    models run on TOY_THREADS (CASCADE_THREADS) unless this process's environment, `env` or a flag says otherwise."""
    full_env = {"CASCADE_THREADS": str(TOY_THREADS), **os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=ROOT)


def lab(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m lab ARGS` in a new process, from the repository root."""
    return cascade(*args, env=env, timeout=timeout, module="lab")


def json_lines(stdout: str) -> tuple[list[dict], dict]:
    """`generate --json` output: the token events, and the summary."""
    records = [json.loads(line) for line in stdout.splitlines()]
    assert "summary" in records[-1]
    return records[:-1], records[-1]["summary"]


# ---- the page --------------------------------------------------------------------------------------

# A request as the tests send it to the page: the margin rule with a 10% share (the page itself starts at
# perplexity with a 10% share, `PAGE_START`; the library and the API at perplexity 5 with no budget).
PAGE_DEFAULTS: dict[str, Any] = {"prompt": "The cat sat on the mat", "mode": "raw", "policy": "cascade",
                                  "rule": "margin", "threshold": 0.1, "budget": 0.1, "k": 4, "rollback_threshold": 20.0,
                                  "bild_window": 32,
                                  "lookup_ngram": 3, "max_tokens": 32, "temperature": 0.0, "top_p": 1.0, "top_k": 0,
                                  "seed": 0, "system": "", "answer_prefix": "", "history": ""}


def page_inputs(**changes: Any) -> tuple:
    """The /generate endpoint's inputs in its order: the page's defaults with `changes`. A threshold changed
    without a rule is a perplexity, and without a budget decides alone (no budget), as the page reads a link
    that names a threshold and neither (one made before the page started at the margin rule with a budget,
    `link.LINK_RULE_BEFORE`)."""
    from cascade.ui.generate import GENERATE_INPUTS  # the page's modules load Gradio: only where a test needs them
    from cascade.ui.link import LINK_RULE_BEFORE

    unknown = set(changes) - set(GENERATE_INPUTS)
    assert not unknown, f"not an input of the page: {unknown}"
    if "threshold" in changes and "rule" not in changes:
        changes = {"rule": LINK_RULE_BEFORE, **changes}
    if "threshold" in changes and "budget" not in changes:
        changes = {"budget": None, **changes}
    values = {**PAGE_DEFAULTS, **changes}
    return tuple(values[name] for name in GENERATE_INPUTS)


def engine_text(engine: Engine, inputs: tuple) -> str:
    """The text the engine writes for these page inputs, mapped to a request exactly as the page maps them."""
    from cascade.ui.generate import GENERATE_INPUTS, request_config

    values = dict(zip(GENERATE_INPUTS, inputs))
    prompt, mode = values.pop("prompt"), values.pop("mode")
    events = list(engine.generate(prompt, request_config(mode, values)))
    assert isinstance(events[-1], Summary)
    return events[-1].text


class WrappedEngine:
    """An engine with its own `generate`, for tests; everything else (its `pair`, ...) is the wrapped one's."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def __getattr__(self, name: str):
        return getattr(self.engine, name)


class SlowEngine(WrappedEngine):
    """The engine, with a pause after each event: the stream then lasts long enough on any machine for
    the page's throttled updates to show up more than once."""

    def __init__(self, engine, pause_s: float = 0.02) -> None:
        super().__init__(engine)
        self.pause_s = pause_s

    def generate(self, prompt, config, **options):
        for event in self.engine.generate(prompt, config, **options):
            yield event
            time.sleep(self.pause_s)


class CountingEngine(WrappedEngine):
    """The engine, counting the generations the page started and the ones that reached their Summary."""

    def __init__(self, engine) -> None:
        super().__init__(engine)
        self.started, self.finished = 0, 0
        self.ended = threading.Event()  # a generation ended: at its Summary, or closed before it
        self._lock = threading.Lock()

    def generate(self, prompt, config, **options):
        with self._lock:
            self.started += 1
        try:
            for event in self.engine.generate(prompt, config, **options):
                if isinstance(event, Summary):
                    with self._lock:
                        self.finished += 1
                yield event
        finally:
            self.ended.set()


class HeldWriting(WrappedEngine):
    """The engine, holding each generation after its first event while `gate` is clear (a minute at most): a
    test clears it to keep an answer being written for as long as it needs, whatever the machine's load, and
    sets it to let the answer finish."""

    def __init__(self, engine, gate: threading.Event) -> None:
        super().__init__(engine)
        self.gate = gate

    def generate(self, prompt, config, **options):
        for i, event in enumerate(self.engine.generate(prompt, config, **options)):
            yield event
            if i == 0:
                self.gate.wait(timeout=60)


class SlowScoring(WrappedEngine):
    """The engine, with the big model's scoring of a finished answer (after its `Written` event) lasting at
    least `pause_s`, as on the real pair, where it takes seconds: long enough to be seen as a step of its
    own. `estimate`: what it says the big model alone would take (None: nothing measured yet). `gate`: the
    scoring waits for this event instead (a minute at most), so a test says when it ends, whatever the
    machine's load."""

    def __init__(self, engine, pause_s: float = 1.5, estimate: float | None = None,
                 gate: threading.Event | None = None) -> None:
        super().__init__(engine)
        self.pause_s, self.estimate, self.gate = pause_s, estimate, gate

    def generate(self, prompt, config, **options):
        for event in self.engine.generate(prompt, config, **options):
            yield event
            if isinstance(event, Written):
                if self.gate is not None:
                    self.gate.wait(timeout=60)
                else:
                    time.sleep(self.pause_s)

    def estimate_target_alone_s(self, prompt_tokens: int, n_tokens: int) -> float | None:
        return self.estimate


# ---- the API ---------------------------------------------------------------------------------------

class Server:
    """An app served by uvicorn in a thread, on a free local port."""

    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        # A page visitor's gradio_client keeps a heartbeat stream open that ends only with its next beat
        # (every 15 s): shutting down, the server waits a second for it, then closes it.
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the server did not shut down"


class AnsweringEngine:
    """An engine without models: every request's answer is the one token "Hi", written by the draft."""

    class tuner:  # what the API reads of `auto`'s tuner: the target's measured step
        class target_step:
            value = 0.05

    def generate(self, prompt: str, config: GenerationConfig, score: bool = True):
        yield TokenEvent(0, 1, "Hi", "draft", "accepted", draft_ppl=1.5, target_ppl=None, t=0.01)
        yield Summary(text="Hi", policy=config.policy, stop_reason="eos", prompt_tokens=len(prompt),
                      counts=Counts(n_tokens=1, n_draft_tokens=1, n_target_tokens=0, n_drafted=1),
                      timings=Timings(wall_s=0.01))


class AnsweringService:
    """An EngineService that never loads a model: always ready, its engine an `AnsweringEngine`; for
    tests of what the API makes of requests, thousands of them in seconds."""

    config = ModelConfig(draft="small.gguf", target="large.gguf")
    loaded = True

    def ready(self) -> bool:
        return True

    def wait_ready(self, timeout_s: float) -> bool:
        return True

    def status(self) -> tuple[str, str]:
        return "ok", ""

    def retry_in_s(self) -> float:
        return 0.0

    def lease(self, progress=None, asker=None):
        return nullcontext(AnsweringEngine())


# ---- the Hub ---------------------------------------------------------------------------------------

def hub_at(monkeypatch, endpoint: str, cache) -> None:
    """huggingface_hub, in this process, pointed at `endpoint` (a server of this machine) with the cache
    `cache`: what HF_ENDPOINT and HF_HUB_CACHE do for a process that starts with them set."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    try:  # huggingface_hub >= 2.4 fetches a registry from the endpoint once per process, with its own 3 s
        # timeout, at its first request: against a Hub that never answers, that would add 3 s to whichever
        # test asks first (the tests time our timeout, not this one-time look-up).
        from huggingface_hub.utils import _detect_agent
    except ImportError:
        return
    monkeypatch.setattr(_detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}}, raising=False)


def cancel_once_known(job, timeout: float = 30) -> None:
    """`job.cancel()`, once the client knows the job's event id: gradio_client names the event to cancel by
    that id, learnt from the server's answer to the request, and a cancel sent before it names nothing and is
    lost (the page's Stop also ends the run itself, `ui.generate.Running`; a client calling the API has no Stop)."""
    communicator = getattr(job, "communicator", None)
    deadline = time.monotonic() + timeout
    while communicator is not None and not communicator.event_id and not job.done() and time.monotonic() < deadline:
        time.sleep(0.005)
    job.cancel()


def free_port() -> int:
    from lab.local import free_local_port

    return free_local_port()


def serve(provider, describe=lambda: "toy models", concurrency: int = 1, router=None):
    """The page on a free local port, over `provider`; returns (demo, url). Close with demo.close().
    `router()`: the learned rule's router the page offers (None: the page offers no learned rule)."""
    from cascade.ui.layout import build_demo, queued

    demo = build_demo(provider, describe_models=describe, concurrency=concurrency, router=router)
    _, url, _ = queued(demo).launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                                     quiet=True)
    return demo, url


# ---- the browser ------------------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts"  # screenshots the browser tests leave
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# A finished run's fold is shown under its picture (a stopped run's first line gives its speed); with an
# argument, the first line must differ from it (a new run's).
FINISHED_JS = """(unlike) => {
  const first = document.querySelector('.cascade-summary')?.innerText || '';
  const fold = document.querySelector('.cascade-more');
  const shown = !!fold && fold.getClientRects().length > 0;
  return (/tokens\\/s/.test(first) || (shown && !/Writing|score it/.test(first))) && first !== unlike;
}"""


def finished(page, timeout=90_000, unlike: str | None = None):
    """Once the run shown is finished (`FINISHED_JS`), its first line other than `unlike` if given."""
    page.wait_for_function(FINISHED_JS, arg=unlike, timeout=timeout)


def summary_reads(page, text: str, timeout: float = 15_000) -> None:
    """Waits until the summary's first line is `text` (Gradio may show its timer there a moment longer)."""
    page.wait_for_function("(t) => document.querySelector('.cascade-summary')?.innerText === t", arg=text,
                           timeout=timeout)


def summary_text(page) -> str:
    """The summary as a visitor can read it all: its first line, then its fold "More about this run" (opened
    if it is shown and closed: the page draws a closed fold's text only once opened)."""
    first = page.inner_text(".cascade-summary")
    fold, text = page.locator(".cascade-more").first, page.locator(".cascade-more-text").first
    if not fold.is_visible():
        return first
    if not text.is_visible():
        fold.get_by_text("More about this run").click()
        text.wait_for(state="visible", timeout=5_000)
    page.wait_for_function("() => (document.querySelector('.cascade-more-text')?.innerText || '').trim()",
                           timeout=5_000)
    return f"{first}\n{text.inner_text()}"


def opened_link(browser, url: str, query: str):
    """A new page at `url` with the link's `query`, once the page has read it (and, with run=1, finished)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}?{query}")
    if "run=1" in query:
        finished(page)
    else:
        page.wait_for_function("() => /from the link/.test(document.querySelector('.cascade-summary')?.innerText)",
                               timeout=30_000)
    return page


# ---- a page in the browser tier ---------------------------------------------------------------------

PROMPT = "The cat sat on the mat"  # the toy prompt the browser tests type
CHART_TRACES = """() => {
  const plot = document.querySelector('.cascade-chart .js-plotly-plot');
  return plot && plot.data ? plot.data.map(t => ({name: t.name, meta: t.meta, n: t.x.length, y: Array.from(t.y)}))
                           : null;
}"""
COUNT = "(selector) => document.querySelectorAll(selector).length"


def chart(page) -> list[dict]:
    page.wait_for_function(f"() => ({CHART_TRACES})() !== null", timeout=30_000)
    return page.evaluate(CHART_TRACES)


def write_at_most(page, n_tokens: int) -> None:
    """Sets "Most tokens to write" under "More settings" (open)."""
    most = page.get_by_label("number input for Most tokens to write")
    most.fill(str(n_tokens))
    most.press("Enter")


MODE_LABELS = {"raw": "Raw: the model continues the text", "chat": "Chat: the model answers"}


def generated(browser, url: str, mode: str = "raw", height: int = 1000):
    """A new page at `url` that has generated the toy prompt (as raw text, or a chat message), and finished."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    page.goto(url)
    page.get_by_label("Prompt").fill(PROMPT)
    page.get_by_label(MODE_LABELS[mode]).check()
    page.get_by_role("button", name="Generate").click()
    finished(page)
    return page


def copied_link(page) -> str:
    """What "Copy link" gives for the page as it is."""
    page.get_by_role("button", name="Copy link").click()
    page.wait_for_function("() => { const e = document.querySelector('.cascade-link textarea, .cascade-link input');"
                           " return e && e.value.length > 0 && e.value !== window.__lastLink; }", timeout=15_000)
    link = page.locator(".cascade-link textarea, .cascade-link input").input_value()
    page.evaluate("(l) => { window.__lastLink = l; }", link)
    return link
