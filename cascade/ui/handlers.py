"""What the page does when a visitor acts: generate, compare, move the threshold, stop.

The handlers are generators that yield the next state of the page (gpt-fast's "small named verbs",
Gradio's streaming demos): they run the engine, keep its events in a `Run`, and leave every picture to
`tokens`, `chart` and `sentences`. Each returns an `Update`, one record naming the outputs it changes;
`Update.values` turns it into the tuple Gradio expects, in one place.

The generate endpoint receives its inputs unprocessed (as a script could send them), and
`GenerationConfig.parse` is the one judge of every setting: its ValueError becomes a message.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterator, Sequence

import gradio as gr

from ..analysis import Routing
from ..config import GenerationConfig
from ..engine import Engine
from ..events import Summary, TokenEvent
from ..models import ModelError
from ..policies import POLICY_TABLE
from ..prompt import PromptError
from . import chart, sentences, tokens
from .service import SERVER_TROUBLE, public_message

log = logging.getLogger(__name__)

EngineProvider = Callable[[Callable[[str], None]], Engine]

# Rebuilding the text and the chart costs a few milliseconds and, while the page's handler does it,
# the models wait: a few pictures a second look live and keep generation at the engine's own speed.
UPDATE_EVERY_S = 0.25

# The settings a visitor controls, in the order the generate endpoint takes them after prompt and mode.
SETTINGS = ("policy", "threshold", "k", "rollback_threshold", "bild_window", "max_tokens", "temperature", "top_p",
            "top_k", "seed")
GENERATE_INPUTS = ("prompt", "mode") + SETTINGS
MODES = ("chat", "raw")


class _Keep:
    """An output a handler leaves as it is on the page (Gradio's `gr.skip()`)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = _Keep()


@dataclass(frozen=True)
class Run:
    """One generation as the page remembers it: what was asked and every event the engine sent."""

    prompt: str
    config: GenerationConfig
    events: tuple[TokenEvent, ...] = ()
    summary: Summary | None = None
    running: bool = True

    @property
    def text(self) -> str:
        return self.summary.text if self.summary else "".join(e.text for e in self.events if e.accepted)


@dataclass(frozen=True)
class Update:
    """The page's outputs a handler changes; a field left as KEEP stays as it is on the page."""

    text_html: Any = KEEP
    chart: Any = KEEP
    summary: Any = KEEP
    plain_text: Any = KEEP
    run: Any = KEEP
    compare_html: Any = KEEP
    numbers: Any = KEEP

    def values(self, names: Sequence[str]) -> tuple:
        """The named outputs in order: what a Gradio handler returns for `outputs=[...]` in that order."""
        return tuple(gr.skip() if getattr(self, name) is KEEP else getattr(self, name) for name in names)


OUTPUTS = tuple(f.name for f in fields(Update))
GENERATE_OUTPUTS = ("text_html", "chart", "summary", "plain_text", "run")
COMPARE_OUTPUTS = ("compare_html", "numbers")
WHATIF_OUTPUTS = ("text_html", "chart")
STOP_OUTPUTS = ("run", "summary")


class Throttle:
    """True at most once per `every` seconds."""

    def __init__(self, every: float | None = None) -> None:
        self.every, self.last = UPDATE_EVERY_S if every is None else every, float("-inf")

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        return True


def request_config(mode: Any, settings: dict[str, Any]) -> GenerationConfig:
    """The request the controls describe. ValueError names a bad setting; an empty seed field is the
    default seed."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    policy = POLICY_TABLE.get(settings.get("policy")) if isinstance(settings.get("policy"), str) else None
    if policy is not None and not policy.on_page:
        raise ValueError(f"the policy {policy.name!r} is not offered on this page; choose one of "
                         f"{', '.join(p.name for p in POLICY_TABLE.values() if p.on_page)}")
    values = {name: value for name, value in settings.items() if not (name == "seed" and value is None)}
    return GenerationConfig.parse({**values, "chat": mode == "chat"})


# ---- what each output shows -----------------------------------------------------------------------

def run_update(run: Run) -> Update:
    """The text, the chart, the summary and the plain text of a run in progress or finished."""
    routing, threshold = Routing(run.events), run.config.threshold
    return Update(text_html=tokens.text_panel(routing, run_threshold=threshold),
                  chart=chart.perplexity_figure(routing, threshold), summary=summary_markdown(run),
                  plain_text=run.text, run=run)


def summary_markdown(run: Run) -> str:
    if run.summary is not None:
        return f"**{sentences.summary_sentence(run.summary)}**  \n{sentences.summary_details(run.summary)}"
    if not run.running:
        return f"**{sentences.stopped_sentence(run.events)}**"
    accepted = [e for e in run.events if e.accepted]
    by_target = sum(e.source == "target" for e in accepted)
    return f"Writing… {len(accepted)} tokens so far, {by_target} by the big model."


def message_update(message: str) -> Update:
    """An error in the text's place; the chart, the plain text and the remembered run are cleared."""
    return Update(text_html=tokens.message_panel(message, "error"), chart=None, summary=f"**{message}**",
                  plain_text="", run=None)


class EngineUnavailable(Exception):
    """The models could not be loaded; the message is what a visitor is told."""


def _engine(engine_provider: EngineProvider, progress: gr.Progress) -> Engine:
    def report(message: str) -> None:  # shown over the text box while the models load (first run only)
        progress(0.0, desc=f"First run: {message}…")

    try:
        return engine_provider(report)
    except ModelError as e:
        log.error("model loading failed: %s", e)
        raise EngineUnavailable(public_message(e)) from e


# ---- the handlers --------------------------------------------------------------------------------

def make_generate(engine_provider: EngineProvider):
    def generate(prompt: Any, mode: Any, policy: Any, threshold: Any, k: Any, rollback_threshold: Any,
                 bild_window: Any, max_tokens: Any, temperature: Any, top_p: Any, top_k: Any, seed: Any,
                 progress=gr.Progress(track_tqdm=True)) -> Iterator[tuple]:
        settings = dict(zip(SETTINGS, (policy, threshold, k, rollback_threshold, bild_window, max_tokens,
                                       temperature, top_p, top_k, seed)))
        for update in generate_updates(engine_provider, prompt, mode, settings, progress):
            yield update.values(GENERATE_OUTPUTS)

    return generate


def generate_updates(engine_provider: EngineProvider, prompt: Any, mode: Any, settings: dict[str, Any],
                     progress: gr.Progress) -> Iterator[Update]:
    prompt = prompt if isinstance(prompt, str) else ""  # the API can send null; the engine says "empty"
    try:
        config = request_config(mode, settings)
        engine = _engine(engine_provider, progress)
    except ValueError as e:
        yield message_update(f"Please check the settings: {e}.")
        return
    except EngineUnavailable as e:
        yield message_update(str(e))
        return
    run, events, due = Run(prompt, config), [], Throttle()
    try:
        for event in engine.generate(prompt, config):
            if isinstance(event, Summary):
                run = replace(run, events=tuple(events), summary=event, running=False)
                break
            events.append(event)
            if due():
                yield run_update(replace(run, events=tuple(events)))
    except PromptError as e:
        yield message_update(str(e).capitalize())
        return
    except Exception:  # the visitor gets a sentence; the operator gets the traceback
        log.exception("generation failed")
        yield message_update(SERVER_TROUBLE)
        return
    yield run_update(run)


def make_compare(engine_provider: EngineProvider):
    def compare(run: Run | None, progress=gr.Progress(track_tqdm=True)) -> Iterator[tuple]:
        for update in compare_updates(engine_provider, run, progress):
            yield update.values(COMPARE_OUTPUTS)

    return compare


def compare_updates(engine_provider: EngineProvider, run: Run | None, progress: gr.Progress) -> Iterator[Update]:
    if run is None or run.running or run.summary is None:
        yield Update(compare_html=tokens.message_panel("Generate a text first and let it finish; then compare it "
                                                       "with the big model alone.", "info"), numbers=None)
        return
    try:
        engine = _engine(engine_provider, progress)
        events, due = [], Throttle()
        for event in engine.generate(run.prompt, run.config.replace(policy="target")):
            if isinstance(event, Summary):
                numbers = {"this_run": run.summary.to_dict(), "big_model_alone": event.to_dict()}
                yield Update(compare_html=sentences.compare_html(run.summary, event), numbers=numbers)
                return
            events.append(event)
            if due():
                n = sum(e.accepted for e in events)
                yield Update(compare_html=tokens.message_panel(f"The big model alone is writing… {n} tokens so "
                                                               f"far.", "info"))
    except EngineUnavailable as e:
        yield Update(compare_html=tokens.message_panel(str(e), "error"), numbers=None)
    except Exception:
        log.exception("comparison failed")
        yield Update(compare_html=tokens.message_panel(SERVER_TROUBLE, "error"), numbers=None)


def whatif(threshold: float, run: Run | None) -> tuple:
    """Re-colour the recorded run for another threshold; during a run, leave the page alone."""
    if run is None or run.running or not run.events:
        return Update().values(WHATIF_OUTPUTS)
    routing, run_threshold = Routing(run.events), run.config.threshold
    return Update(text_html=tokens.text_panel(routing, run_threshold=run_threshold, threshold=float(threshold)),
                  chart=chart.perplexity_figure(routing, run_threshold, float(threshold))).values(WHATIF_OUTPUTS)


def stop(run: Run | None) -> tuple:
    """Stop pressed: the generation is cancelled; what was streamed so far stays as a finished run."""
    if run is None or not run.running:
        return Update().values(STOP_OUTPUTS)
    run = replace(run, running=False)
    return Update(run=run, summary=summary_markdown(run)).values(STOP_OUTPUTS)
