"""Generate, Compare and Stop: generators yielding the page's next state, the engine in its own thread
(`pumped`), its events kept in a `Run`, every picture left to `run`. The generate endpoint takes raw
inputs; `GenerationConfig.parse` judges every setting and its ValueError becomes a message."""

from __future__ import annotations

import inspect
import logging
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator

import gradio as gr

from ..engine.config import GenerationConfig, RouterMissing
from ..engine.engine import Engine
from ..engine.events import Summary, TokenEvent, complete_events
from ..engine.models import ModelError
from ..engine.policies import POLICY_TABLE, offered as offered_policies
from ..engine.prompt import PromptError
from ..routing.curves import rule_curves
from ..serving.lender import Asker
from ..serving.messages import SERVER_TROUBLE, public_message
from . import chart, conversation, paysmap, rulewords, sentences, tokens
from .running import COMPARISON, GENERATION, RunHandle, Running, Superseded, pumped, visitor_of
from .run import (COMPARE_OUTPUTS, GENERATE_OUTPUTS, KEEP, STOP_OUTPUTS, UPDATE_EVERY_S, Pacer, Run, Update,
                  message_update, run_update, summary_markdown)

log = logging.getLogger(__name__)

# Given a progress callback: an engine, or a context manager lending one (`EngineService.lease`).
EngineProvider = Callable[[Callable[[str], None]], Any]

# The GenerationConfig fields a visitor controls, in the generate endpoint's order after prompt and mode.
SETTINGS = ("policy", "rule", "threshold", "budget", "k", "rollback_threshold", "bild_window", "lookup_ngram",
            "max_tokens", "temperature", "top_p", "top_k", "seed", "system", "answer_prefix", "history")
GENERATE_INPUTS = ("prompt", "mode") + SETTINGS
MODES = ("chat", "raw")


def request_config(mode: Any, settings: dict[str, Any]) -> GenerationConfig:
    """The request the controls describe; ValueError names a bad setting; a null seed or text is the default."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    policy = settings.get("policy")
    offered = [p.name for p in offered_policies()]
    if policy not in offered:
        known = isinstance(policy, str) and policy in POLICY_TABLE
        what = f"the policy {policy!r} is not offered on this page" if known else f"unknown policy {policy!r}"
        raise ValueError(f"{what}; choose one of {', '.join(offered)}")
    values = {name: value for name, value in settings.items()
              if not (value is None and name in ("seed", "system", "answer_prefix", "history"))}
    if "history" in values:  # the hidden field's JSON text (`conversation.parse_history`)
        values["history"] = conversation.parse_history(values["history"])
        if values["history"] and mode != "chat":
            raise ValueError("a follow-up question needs chat mode (the chat template places the earlier turns); "
                             "start a new conversation to continue a text in raw mode")
    return GenerationConfig.parse({**values, "chat": mode == "chat"})


class EngineUnavailable(Exception):
    """The models could not be loaded; the message is what a visitor is told."""


@contextmanager
def lent_engine(engine_provider: EngineProvider, progress: gr.Progress, visitor: str | None = None
                ) -> Iterator[Engine]:
    """The engine the provider returns or lends for one request (a visitor's, where the provider takes an
    `asker`: `EngineService.lease`); EngineUnavailable if it cannot load."""
    def report(message: str) -> None:  # shown over the text box while the models load (first run only)
        progress(0.0, desc=f"First run: {message}…")

    with ExitStack() as stack:
        try:
            answer = (engine_provider(report, asker=Asker(f"page {visitor}")) if visitor is not None
                      and takes_asker(engine_provider) else engine_provider(report))
            engine = stack.enter_context(answer) if hasattr(answer, "__enter__") else answer
        except ModelError as e:
            log.error("model loading failed: %s", e)
            raise EngineUnavailable(public_message(e)) from e
        yield engine


def takes_asker(engine_provider: EngineProvider) -> bool:
    try:
        return "asker" in inspect.signature(engine_provider).parameters
    except (TypeError, ValueError):
        return False


# The generate handler's parameters (the /generate endpoint's names): GENERATE_INPUTS, the run shown, progress.
GENERATE_SIGNATURE = inspect.Signature(
    [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in GENERATE_INPUTS]
    + [inspect.Parameter("shown", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
       inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress(track_tqdm=True)),
       inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request)])


def make_generate(engine_provider: EngineProvider, running: Running | None = None):
    """The generate handler: GENERATE_SIGNATURE in, GENERATE_OUTPUTS out (no docstring: Gradio would show it);
    recorded in `running`, where the visitor's running comparison ends first."""
    running = running or Running()

    def generate(*args: Any, **kwargs: Any) -> Iterator[tuple]:
        bound = GENERATE_SIGNATURE.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        settings = {name: values[name] for name in SETTINGS}
        visitor = visitor_of(values["request"])
        running.end(visitor, COMPARISON)
        with running.running(visitor, GENERATION) as handle:
            for update in generate_updates(engine_provider, values["prompt"], values["mode"], settings,
                                           values["progress"], values["shown"], visitor, handle):
                yield update.values(GENERATE_OUTPUTS)

    generate.__signature__ = GENERATE_SIGNATURE  # type: ignore[attr-defined]
    generate.__annotations__ = {"request": gr.Request}  # how Gradio finds the parameter it fills
    return generate


def generate_updates(engine_provider: EngineProvider, prompt: Any, mode: Any, settings: dict[str, Any],
                     progress: gr.Progress, shown: Run | None = None, visitor: str | None = None,
                     handle: RunHandle | None = None) -> Iterator[Update]:
    """The updates of one generation; `shown` (the run on the page) lends its colours to earlier turns; `visitor`
    takes its fair share of the slots; ended through `handle` (Stop), it ends drawing what was written."""
    handle = handle or RunHandle()
    prompt = prompt if isinstance(prompt, str) else ""  # the API can send null; the engine says "empty"
    try:
        config = request_config(mode, settings)
    except ValueError as e:
        yield message_update(f"Please check the settings: {e}.")
        return
    run = Run(prompt, config, earlier=conversation.turns_of(config.history, shown if isinstance(shown, Run) else None))
    if handle.ended:  # stopped before its handler started
        yield run_update(replace(run, running=False))
        return
    yield Update(plain_text="", run=run)  # the page's run from now: a Stop reads it, nothing earlier lands under it
    try:
        with lent_engine(engine_provider, progress, visitor) as engine:
            try:
                config.check_router(getattr(engine, "router", None) is not None)
            except RouterMissing as e:
                yield message_update(f"Please check the settings: {e}.")
                return
            path = getattr(engine.pair, "draft_path", None)  # whose calibration a share's what-if reads
            run = replace(run, models=engine.pair.config, draft_path=None if path is None else str(path))
            pacer = Pacer()
            # The answer is drawn finished the moment it is written; the scoring pass follows as its own step.
            events, summary = yield from pumped(
                engine.generate(prompt, config, mark_written=True), pacer.interval,
                lambda events: pacer.draw(replace(run, events=events)),
                lambda events, written: pacer.draw(replace(run, events=events, summary=written,
                                                           alone_estimate_s=alone_estimate(engine, written))),
                handle.on_pump)
            run = replace(run, events=tuple(complete_events(events, summary)), summary=summary, running=False,
                          alone_estimate_s=alone_estimate(engine, summary), pays_point=paysmap.pair_point(engine))
    except Superseded as ended:
        yield run_update(replace(run, events=tuple(ended.events), running=False))
        return
    except EngineUnavailable as e:
        yield message_update(str(e))
        return
    except PromptError as e:
        yield message_update(str(e)[:1].upper() + str(e)[1:])  # unlike `str.capitalize`, the rest untouched
        return
    except Exception:  # the visitor gets a sentence; the operator gets the traceback
        log.exception("generation failed")
        yield message_update(SERVER_TROUBLE)
        return
    yield run_update(run)


def alone_estimate(engine: Engine, summary: Summary) -> float | None:
    """The big model alone's estimated seconds for this run, from the engine's measured costs; None if unknown."""
    try:
        return engine.estimate_target_alone_s(summary.prompt_tokens, summary.counts.n_tokens)
    except Exception:
        log.exception("the big model alone's time could not be estimated")
        return None


def make_compare(engine_provider: EngineProvider, running: Running | None = None):
    """The compare handler over `engine_provider`: its outputs COMPARE_OUTPUTS; recorded in `running`."""
    running = running or Running()

    def compare(run: Run | None, progress=gr.Progress(track_tqdm=True),
                request: gr.Request = None) -> Iterator[tuple]:  # type: ignore[assignment]
        visitor = visitor_of(request)
        with running.running(visitor, COMPARISON) as handle:
            for update in compare_updates(engine_provider, run, progress, handle, visitor):
                yield update.values(COMPARE_OUTPUTS)

    return compare


def alone_writing(events: tuple[TokenEvent, ...]) -> Update:
    """The comparison's place while the big model alone writes: how far it has come."""
    n = sum(e.accepted for e in events)
    return Update(compare_html=tokens.message_panel(f"The big model alone is writing… {n} tokens so far.", "info"))


def alone_written(events: tuple[TokenEvent, ...], alone: Summary) -> Update:
    """The comparison's place once the big model alone has written its answer, while it scores it."""
    return Update(compare_html=tokens.message_panel(
        f"The big model alone wrote {alone.counts.n_tokens} tokens in {alone.timings.wall_s:.1f} s. It is reading "
        f"its answer to score it…", "info"))


def compare_updates(engine_provider: EngineProvider, run: Run | None, progress: gr.Progress,
                    handle: RunHandle | None = None, visitor: str | None = None) -> Iterator[Update]:
    """The big model alone on the run's request, then each rule's curve from its text (`rules_update`); ended
    through `handle` (Stop, a newer run), its box emptied."""
    handle = handle or RunHandle()
    if handle.ended:
        yield Update(compare_html="", numbers=None)
        return
    if run is None or run.running or run.summary is None:
        yield Update(compare_html=tokens.message_panel("Generate a text first and let it finish; then compare it "
                                                       "with the big model alone.", "info"), numbers=None)
        return
    yield alone_writing(())  # the box says at once that the big model is writing
    try:
        with lent_engine(engine_provider, progress, visitor) as engine:
            # Run to its end (the models are let go) before the rules read them; timed as the run was.
            events, alone = yield from pumped(
                engine.generate(run.prompt, run.config.replace(policy="target"), mark_written=True),
                UPDATE_EVERY_S, alone_writing, alone_written, handle.on_pump)
            numbers = {"this_run": run.summary.to_dict(), "big_model_alone": alone.to_dict()}
            compared = replace(run, comparison=alone, comparison_tokens=tuple(e.token_id for e in events if e.accepted))
            html = sentences.compare_html(run.summary, alone)
            yield Update(compare_html=html, numbers=numbers, run=compared, summary=summary_markdown(compared),
                         rules_box=gr.update(visible=True, open=True), rules_chart=None,
                         rules_text="*Reading the big model's text with the small model, to draw each rule's curve…*")
            rules = rules_update(engine, compared)
            # The last update carries everything: an API client reads only the last one.
            extra = {} if rules.numbers is KEEP else rules.numbers
            yield replace(rules, compare_html=html, numbers={**numbers, **extra})
    except Superseded:  # ended by Stop or a newer run: its box emptied, in case a last picture landed after theirs
        yield Update(compare_html="", numbers=None)
    except EngineUnavailable as e:
        yield Update(compare_html=tokens.message_panel(str(e), "error"), numbers=None)
    except Exception:
        log.exception("comparison failed")
        yield Update(compare_html=tokens.message_panel(SERVER_TROUBLE, "error"), numbers=None)


RULES_AGREEMENT = 0.95  # the agreement the sentence under the rules' curves asks each rule for


def rules_update(engine: Engine, run: Run) -> Update:
    """Each rule's curve over the big model's text (one teacher-forced read) and the break-even share; engine held."""
    try:
        positions = engine.teacher_force(run.prompt, run.config.chat, run.comparison_tokens, run.config.system,
                                         run.config.answer_prefix, history=run.config.history)
        curves = rule_curves(positions)
        break_even = engine.break_even_share(max(1, run.summary.counts.n_tokens))
    except Exception:
        log.exception("the rules' curves failed")
        return Update(rules_text=f"The rules' curves could not be drawn. {SERVER_TROUBLE}", rules_chart=None,
                      summary=summary_markdown(run), run=run)
    run = replace(run, break_even=break_even)
    counts, quality = run.summary.counts, run.summary.quality
    point = (counts.target_share, quality.target_agreement) if quality is not None and counts.n_tokens else None
    text = f"**{sentences.rules_sentence(curves, break_even, RULES_AGREEMENT)}**  \n{sentences.RULES_HOW}"
    return Update(rules_text=text, rules_chart=chart.rules_figure(curves, point, break_even, run_name(run.config)),
                  summary=summary_markdown(run), run=run,
                  numbers={"rules": {name: c.to_dict() for name, c in curves.items()}, "break_even_share": break_even})


def run_name(config: GenerationConfig) -> str:
    """This run in a (short) legend: "this run (cascade, entropy 1.5)" or "this run (cascade, margin, 10%)"."""
    policy = POLICY_TABLE.get(config.policy)
    if policy is None or not policy.uses_rule:
        return f"this run ({config.policy})"
    decided = f", {rulewords.share(config.budget)}" if config.budget is not None else f" {config.threshold:g}"
    return f"this run ({config.policy}, {config.rule}{decided})"


def make_stop(running: Running):
    """The Stop handler: the visitor's generation and comparison end at once (`Running.end`, not waiting); a
    comparison's box is emptied here, before its handler next wakes."""
    def stop_pressed(run: Run | None, request: gr.Request = None) -> tuple:  # type: ignore[assignment]
        visitor = visitor_of(request)
        compared = running.end(visitor, COMPARISON, wait=False)
        running.end(visitor, GENERATION, wait=False)
        return stop(run, Update(compare_html="", numbers=None) if compared else Update())

    return stop_pressed


def stop(run: Run | None, update: Update | None = None) -> tuple:
    """Stop pressed: what was streamed so far stays as a finished run (with `update`'s other changes)."""
    update = update or Update()
    if run is None or not run.running:
        return update.values(STOP_OUTPUTS)
    run = replace(run, running=False)
    return replace(update, run=run, summary=summary_markdown(run)).values(STOP_OUTPUTS)
