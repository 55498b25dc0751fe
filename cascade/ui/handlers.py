"""What the page does when a visitor acts: generate, compare, move the threshold, change the rule, stop.

The handlers are generators that yield the next state of the page (gpt-fast's "small named verbs",
Gradio's streaming demos): they run the engine, keep its events in a `Run`, and leave every picture to
`tokens`, `chart` and `sentences`. Each returns an `Update`, one record naming the outputs it changes;
`Update.values` turns it into the tuple Gradio expects, in one place.

The generate endpoint receives its inputs unprocessed (as a script could send them), and
`GenerationConfig.parse` is the one judge of every setting: its ValueError becomes a message.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import gradio as gr

from ..engine.analysis import Routing
from ..engine.config import GenerationConfig, ModelConfig, request_settings
from ..engine.engine import Engine
from ..engine.events import Summary, TokenEvent, complete_events
from ..engine.models import ModelError
from ..engine.policies import POLICY_TABLE
from ..engine.prompt import PromptError
from ..routing.rules import RULE_TABLE
from ..routing.curves import rule_curves
from . import chart, conversation, quality, rulewords, runfile, sentences, tokens
from .conversation import Turn
from ..serving.pump import EventPump
from ..serving.messages import SERVER_TROUBLE, public_message
from .style import visible

log = logging.getLogger(__name__)

# Given a progress callback, the engine to use, or a context manager that lends one for the request
# (a pool: `EngineService.lease`); see `lent_engine`.
EngineProvider = Callable[[Callable[[str], None]], Any]

# Rebuilding the text and the chart costs a few milliseconds, more as the text grows, and shares the
# machine with the models (which write on meanwhile, `pump`): a few pictures a second look live. As the
# text grows, pictures come further apart, so that drawing them takes at most 1/DRAW_SHARE of the time
# (with Gradio's own work on each, about as much again): at 1,000 tokens one took 11 ms on the real pair.
UPDATE_EVERY_S = 0.25
DRAW_SHARE = 50


class Pacer:
    """How long to wait before the next picture: UPDATE_EVERY_S, or DRAW_SHARE times what a picture
    costs now, the cheaper of the last two (so one slow picture, the first of a fresh process or one a
    garbage collection paused, does not hold back the next ones)."""

    def __init__(self) -> None:
        self.costs = [0.0]

    @property
    def cost(self) -> float:
        return min(self.costs)

    def interval(self) -> float:
        return max(UPDATE_EVERY_S, DRAW_SHARE * self.cost)

    def draw(self, run: "Run") -> "Update":
        started = time.perf_counter()
        update = run_update(run)
        self.costs = [self.costs[-1], time.perf_counter() - started]
        return update

# The settings a visitor controls, in the order the generate endpoint takes them after prompt and mode.
SETTINGS = request_settings(page=True)
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
    models: ModelConfig | None = None  # the models that wrote it (named in a saved run)
    comparison: Summary | None = None  # the big model alone on the same request, once compared
    comparison_tokens: tuple[int, ...] = ()  # the big model alone's token ids, for teacher forcing
    # The largest big-model share at which cascade beats the big model alone on this machine (from the
    # engine's measured costs), read after a comparison; None before one, or before any cost was measured.
    break_even: float | None = None
    # Which run this is, kept through its updates (stopped, compared): the session's branches know it by it.
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12], compare=False)
    # A follow-up's earlier questions and answers (`config.history` is their text, as the models read it),
    # with their runs where the page has them, so they are shown with their colours above this one.
    earlier: tuple[Turn, ...] = field(default=(), compare=False)

    @property
    def text(self) -> str:
        """What the models wrote (so far)."""
        return self.summary.text if self.summary else "".join(e.text for e in self.events if e.accepted)

    @property
    def answer(self) -> str:
        """The answer as a reader sees it: the given start, then what the models wrote."""
        return self.config.answer_prefix + self.text


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
    rules_box: Any = KEEP  # the accordion "Which rule decides best?"
    rules_text: Any = KEEP
    rules_chart: Any = KEEP

    def values(self, names: Sequence[str]) -> tuple:
        """The named outputs in order: what a Gradio handler returns for `outputs=[...]` in that order."""
        return tuple(gr.skip() if getattr(self, name) is KEEP else getattr(self, name) for name in names)


GENERATE_OUTPUTS = ("text_html", "chart", "summary", "plain_text", "run", "rules_box")
# (rules_box: a new run hides the previous comparison's curves, which belong to the run compared)
# (compare_html and numbers first: what the /compare endpoint has always answered first)
COMPARE_OUTPUTS = ("compare_html", "numbers", "rules_text", "rules_chart", "summary", "rules_box", "run")
WHATIF_OUTPUTS = ("text_html", "chart")
STOP_OUTPUTS = ("run", "summary")
BRANCH_OUTPUTS = GENERATE_OUTPUTS + ("compare_html", "numbers")
# After a generation, a comparison or a Stop, the file that keeps the run is written in a step of its
# own, so that the generation's own time does not include it.
DOWNLOAD_OUTPUTS = ("download",)


def request_config(mode: Any, settings: dict[str, Any]) -> GenerationConfig:
    """The request the controls describe. ValueError names a bad setting; an empty seed field is the
    default seed."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    policy = settings.get("policy")
    offered = [p.name for p in POLICY_TABLE.values() if p.on_page]
    if policy not in offered:
        known = isinstance(policy, str) and policy in POLICY_TABLE
        what = f"the policy {policy!r} is not offered on this page" if known else f"unknown policy {policy!r}"
        raise ValueError(f"{what}; choose one of {', '.join(offered)}")
    # An empty seed field is the default seed; an empty (null) text field is no text.
    values = {name: value for name, value in settings.items()
              if not (value is None and name in ("seed", "system", "answer_prefix", "history"))}
    if "history" in values:  # the hidden field's JSON text (`conversation.parse_history`)
        values["history"] = conversation.parse_history(values["history"])
        if values["history"] and mode != "chat":
            raise ValueError("a follow-up question needs chat mode (the chat template places the earlier turns); "
                             "start a new conversation to continue a text in raw mode")
    return GenerationConfig.parse({**values, "chat": mode == "chat"})


# ---- what each output shows -----------------------------------------------------------------------

def run_update(run: Run) -> Update:
    """The text, the chart, the summary and the plain text of a run in progress or finished (a
    follow-up's question above its text; its earlier turns are a panel of their own, `conversation_line`)."""
    routing, threshold, rule = Routing(run.events), run.config.threshold, run.config.rule
    panel = tokens.text_panel(routing, run_threshold=threshold, run_rule=rule, given=run.config.answer_prefix)
    return Update(text_html=conversation.latest_html(len(run.earlier) + 1, run.prompt, panel),
                  chart=chart.perplexity_plot(routing, threshold, run_rule=rule), summary=summary_markdown(run),
                  plain_text=run.answer, run=run, rules_box=gr.update(visible=False))


def offer_download(run: Run | None) -> Any:
    """The "Download this run" button (the one output, so Gradio takes the value itself): shown with a
    file that keeps `run` once it has finished or was stopped, hidden while there is none."""
    if run is None or run.running:
        return gr.update(value=None, visible=False)
    return gr.update(value=str(save_run_file(run)), visible=True)


# Files for "Download this run": Gradio serves them from its cache, so only the latest few are kept here.
RUN_FILES = Path(tempfile.gettempdir()) / "cascade-runs"
KEEP_RUN_FILES = 32


def save_run_file(run: Run, folder: Path = RUN_FILES) -> Path:
    """Write `run` as one self-contained HTML file (`runfile`) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"cascade-run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.html"
    models = run.models or ModelConfig()
    path.write_text(runfile.run_html(run.prompt, run.config, run.events, run.summary,
                                     models=runfile.model_names(models), machine=runfile.machine_info(models),
                                     comparison=run.comparison, created=runfile.now(), earlier=run.earlier),
                    encoding="utf-8")
    for old in sorted(folder.glob("cascade-run-*.html"), key=lambda p: p.stat().st_mtime)[:-KEEP_RUN_FILES]:
        old.unlink(missing_ok=True)
    return path


def summary_markdown(run: Run) -> str:
    if run.summary is not None:
        after = sentences.break_even_sentence(run.summary, run.break_even) if run.comparison else None
        measured = measured_quality(run)
        # The measured pass rates right under the speed verdict; a comparison's break-even sentence,
        # which comes later, after them.
        return (f"**{sentences.summary_sentence(run.summary)}**  \n{sentences.summary_details(run.summary)}"
                + (f"  \n<span class=\"cascade-quality\">{measured}</span>" if measured else "")
                + (f"  \n{after}" if after else ""))
    if not run.running:
        return f"**{sentences.stopped_sentence(run.events)}**"
    accepted = [e for e in run.events if e.accepted]
    by_target = sum(e.source == "target" for e in accepted)
    copied = sum(e.source == "lookup" for e in accepted)
    return (f"Writing… {len(accepted)} tokens so far, {by_target} by the big model"
            + (f", {copied} copied from the text." if copied else "."))


def measured_quality(run: Run) -> str | None:
    """Whether sharing keeps the answers right: one sentence from the shipped pass rates (`quality.py`)."""
    models = run.models or ModelConfig()
    try:
        return quality.quality_sentence(run.config, models.draft, models.target)
    except Exception:  # a results file the page cannot read costs the sentence, never the run
        log.exception("the measured pass rates could not be read")
        return None


def message_update(message: str) -> Update:
    """An error in the text's place; the chart, the plain text and the remembered run are cleared."""
    return Update(text_html=tokens.message_panel(message, "error"), chart=None, summary=f"**{message}**",
                  plain_text="", run=None, rules_box=gr.update(visible=False))


class EngineUnavailable(Exception):
    """The models could not be loaded; the message is what a visitor is told."""


@contextmanager
def lent_engine(engine_provider: EngineProvider, progress: gr.Progress) -> Iterator[Engine]:
    """The engine for one request: what the provider returns, or lends for the request when it returns
    a context manager (a pool of engines, `EngineService.lease`). EngineUnavailable if it cannot load."""
    def report(message: str) -> None:  # shown over the text box while the models load (first run only)
        progress(0.0, desc=f"First run: {message}…")

    with ExitStack() as stack:
        try:
            answer = engine_provider(report)
            engine = stack.enter_context(answer) if hasattr(answer, "__enter__") else answer
        except ModelError as e:
            log.error("model loading failed: %s", e)
            raise EngineUnavailable(public_message(e)) from e
        yield engine


# ---- the handlers --------------------------------------------------------------------------------

def make_generate(engine_provider: EngineProvider):
    def generate(prompt: Any, mode: Any, policy: Any, rule: Any, threshold: Any, k: Any, rollback_threshold: Any,
                 bild_window: Any, lookup_ngram: Any, max_tokens: Any, temperature: Any, top_p: Any, top_k: Any,
                 seed: Any, system: Any = "", answer_prefix: Any = "", history: Any = "", shown: Run | None = None,
                 progress=gr.Progress(track_tqdm=True)) -> Iterator[tuple]:
        settings = dict(zip(SETTINGS, (policy, rule, threshold, k, rollback_threshold, bild_window, lookup_ngram,
                                       max_tokens, temperature, top_p, top_k, seed, system, answer_prefix, history)))
        for update in generate_updates(engine_provider, prompt, mode, settings, progress, shown):
            yield update.values(GENERATE_OUTPUTS)

    return generate


def generate_updates(engine_provider: EngineProvider, prompt: Any, mode: Any, settings: dict[str, Any],
                     progress: gr.Progress, shown: "Run | None" = None) -> Iterator[Update]:
    """The updates of one generation. `shown`: the run the page shows, whose turns (and itself) keep
    their colours when the request's earlier turns are theirs (a follow-up, or asking one again)."""
    prompt = prompt if isinstance(prompt, str) else ""  # the API can send null; the engine says "empty"
    try:
        config = request_config(mode, settings)
    except ValueError as e:
        yield message_update(f"Please check the settings: {e}.")
        return
    earlier = conversation.turns_of(config.history, shown if isinstance(shown, Run) else None)
    events: list[TokenEvent] = []
    try:
        with lent_engine(engine_provider, progress) as engine:
            if config.needs_router and getattr(engine, "router", None) is None:
                yield message_update(f"Please check the settings: {NO_ROUTER}.")
                return
            run = Run(prompt, config, models=engine.pair.config, earlier=earlier)
            # The engine writes on in its own thread while each picture is drawn and sent.
            pacer = Pacer()
            with EventPump(engine.generate(prompt, config)) as pump:
                for batch in pump.batches(pacer.interval):
                    events.extend(e for e in batch if not isinstance(e, Summary))
                    if isinstance(batch[-1], Summary):
                        # The big model's alternatives where it first read the text after the run.
                        run = replace(run, events=tuple(complete_events(events, batch[-1])), summary=batch[-1],
                                      running=False)
                        break
                    yield pacer.draw(replace(run, events=tuple(events)))
    except EngineUnavailable as e:
        yield message_update(str(e))
        return
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
    """The big model alone on the run's request, then, with the same engine, each rule's curve drawn from
    the big model's text (`rules_update`)."""
    if run is None or run.running or run.summary is None:
        yield Update(compare_html=tokens.message_panel("Generate a text first and let it finish; then compare it "
                                                       "with the big model alone.", "info"), numbers=None)
        return
    events: list[TokenEvent] = []
    alone: Summary | None = None
    try:
        with lent_engine(engine_provider, progress) as engine:
            # To its end (the pump's thread is joined when the block ends): the stream lets go of the
            # models after its Summary, before the rules read them. Its speed is the comparison's
            # yardstick, so it too never waits on the page.
            with EventPump(engine.generate(run.prompt, run.config.replace(policy="target"))) as pump:
                for batch in pump.batches(UPDATE_EVERY_S):
                    events.extend(e for e in batch if not isinstance(e, Summary))
                    if isinstance(batch[-1], Summary):
                        alone = batch[-1]
                        break
                    n = sum(e.accepted for e in events)
                    yield Update(compare_html=tokens.message_panel(f"The big model alone is writing… {n} "
                                                                   f"tokens so far.", "info"))
            if alone is None:
                raise RuntimeError("the big model's run ended without a summary")
            numbers = {"this_run": run.summary.to_dict(), "big_model_alone": alone.to_dict()}
            compared = replace(run, comparison=alone, comparison_tokens=tuple(e.token_id for e in events if e.accepted))
            html = sentences.compare_html(run.summary, alone)
            yield Update(compare_html=html, numbers=numbers, run=compared,
                         rules_box=gr.update(visible=True, open=True), rules_chart=None,
                         rules_text="*Reading the big model's text with the small model, to draw each rule's curve…*")
            rules = rules_update(engine, compared)
            # The last update carries everything again: an API client reads only the last one.
            extra = {} if rules.numbers is KEEP else rules.numbers
            yield replace(rules, compare_html=html, numbers={**numbers, **extra})
    except EngineUnavailable as e:
        yield Update(compare_html=tokens.message_panel(str(e), "error"), numbers=None)
    except Exception:
        log.exception("comparison failed")
        yield Update(compare_html=tokens.message_panel(SERVER_TROUBLE, "error"), numbers=None)


RULES_AGREEMENT = 0.95  # the agreement the sentence under the rules' curves asks each rule for


def rules_update(engine: Engine, run: Run) -> Update:
    """Which rule decides best, for a compared run: the small model reads the big model's text once
    (`Engine.teacher_force`), each rule's curve is swept from those readings (`teacher.rule_curves`), and
    the engine's measured costs give the machine's break-even share. The caller holds the engine."""
    try:
        positions = engine.teacher_force(run.prompt, run.config.chat, run.comparison_tokens, run.config.system,
                                         run.config.answer_prefix, history=run.config.history)
        curves = rule_curves(positions)
        break_even = engine.break_even_share(max(1, run.summary.n_tokens))
    except Exception:
        log.exception("the rules' curves failed")
        return Update(rules_text=f"The rules' curves could not be drawn. {SERVER_TROUBLE}", rules_chart=None,
                      summary=summary_markdown(run), run=run)
    run = replace(run, break_even=break_even)
    summary = run.summary
    point = ((summary.target_share, summary.target_agreement)
             if summary.target_agreement is not None and summary.n_tokens else None)
    text = f"**{sentences.rules_sentence(curves, break_even, RULES_AGREEMENT)}**  \n{sentences.RULES_HOW}"
    return Update(rules_text=text, rules_chart=chart.rules_figure(curves, point, break_even, run_name(run.config)),
                  summary=summary_markdown(run), run=run,
                  numbers={"rules": {name: c.to_dict() for name, c in curves.items()}, "break_even_share": break_even})


def run_name(config: GenerationConfig) -> str:
    """This run in a legend: "this run (cascade, entropy 1.5)"."""
    policy = POLICY_TABLE.get(config.policy)
    if policy is not None and "threshold" in policy.settings:
        return f"this run ({config.policy}, {config.rule} {config.threshold:g})"
    return f"this run ({config.policy})"


def whatif_update(threshold: Any, run: Run | None, rule: Any = None) -> Update:
    """The recorded run re-coloured for another threshold, or another rule (None: the run's) at that
    threshold; during a run, or for a value no rule reads, the page is left alone."""
    if run is None or run.running or not run.events:
        return Update()
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        return Update()
    rule = rule if rule in RULE_TABLE else run.config.rule
    routing, run_threshold, run_rule = Routing(run.events), run.config.threshold, run.config.rule
    panel = tokens.text_panel(routing, run_threshold=run_threshold, threshold=threshold, run_rule=run_rule, rule=rule,
                              given=run.config.answer_prefix)
    return Update(text_html=conversation.latest_html(len(run.earlier) + 1, run.prompt, panel),
                  chart=chart.perplexity_plot(routing, run_threshold, threshold, run_rule, rule))


def whatif(threshold: Any, run: Run | None, rule: Any = None) -> tuple:
    """Re-colour the recorded run for another threshold (and rule); during a run, leave the page alone."""
    return whatif_update(threshold, run, rule).values(WHATIF_OUTPUTS)


def rule_changed(rule: Any, run: Run | None, trained_on: str | None = None) -> tuple:
    """The visitor chose another rule: the threshold slider takes that rule's range, step, label and
    default (the run's own threshold when it is the run's own rule, so the page shows the run again),
    the line under the dropdown says what the rule reads, and a finished run is re-coloured by the rule
    at that threshold (a what-if)."""
    if rule not in RULE_TABLE:
        return (gr.skip(), gr.skip()) + Update().values(WHATIF_OUTPUTS)
    props = rulewords.slider_props(rule)
    if run is not None and not run.running and run.config.rule == rule:
        props["value"] = run.config.threshold
    slider = gr.update(**props)
    info = gr.update(info=rulewords.rule_info(rule, trained_on))
    return (info, slider) + whatif_update(props["value"], run, rule).values(WHATIF_OUTPUTS)


NO_ROUTER = ("the learned rule needs a router, and none is loaded on this page; choose another way for the small "
             "model to judge its token")


# ---- branches: a session's runs, and forks from a token ----------------------------------------------

# Runs a session keeps as branches (each with its events and both models' alternatives); past it, the
# oldest is let go, and the list says so.
MAX_BRANCHES = 30


@dataclass(frozen=True)
class Fork:
    """Where the next run starts from: a position of branch `parent`, and the token chosen there."""

    parent: int
    position: int
    was: str  # the token the parent had there
    chosen: str


@dataclass(frozen=True)
class Branch:
    number: int  # 1, 2, … in the order of the session
    run: Run
    fork: Fork | None = None  # None: a run of its own (Generate), not a fork
    after: int | None = None  # a follow-up: the branch whose answer it follows (None: not one, or let go)

    @property
    def label(self) -> str:
        f = self.fork
        if f is not None:
            return f"{self.number} · from {f.parent} at token {f.position}: {visible(f.was)} → {visible(f.chosen)}"
        words = " ".join(self.run.prompt.split())
        words = words[:48] + "…" if len(words) > 48 else words
        if self.run.earlier:
            return f"{self.number} · follow-up to {self.after}: {words}" if self.after else \
                f"{self.number} · follow-up {len(self.run.earlier) + 1}: {words}"
        return f"{self.number} · {words}"


def fork_prefix(run: Run | None, current: int | None, position: Any, chosen: Any) -> tuple[str, Fork]:
    """A fork from token `position` of `run` with the token `chosen` there: the new run's answer prefix
    (the run's answer before that token, then the chosen token) and where it forked from. ValueError
    for a run still writing or a position it has no token at."""
    if run is None or run.running:
        raise ValueError("let the run finish (or stop it) before writing on from one of its tokens")
    if not isinstance(position, int) or isinstance(position, bool) or not isinstance(chosen, str) or not chosen:
        raise ValueError("choose a token from the list to write on from it")
    kept = [e for e in run.events if e.accepted]
    at = [e for e in run.events if e.position == position and e.status != "escalated"]
    if not at:
        raise ValueError(f"the run has no token at position {position}")
    before = "".join(e.text for e in kept if e.position < position)
    was = next((e.text for e in at if e.accepted), at[0].text)
    return run.config.answer_prefix + before + chosen, Fork(current or 0, position, was, chosen)


def record_branch(run: Run | None, branches: Sequence[Branch] | None, fork: Fork | None) -> tuple:
    """After a run (or its Stop, or its comparison): the session's branches with it, as a new branch or
    in place of its earlier self; (branches, the list's update, the current branch's number, the pending
    fork cleared)."""
    branches = list(branches or [])
    if run is None:
        return branches, gr.skip(), gr.skip(), fork
    mine = next((i for i, b in enumerate(branches) if b.run.id == run.id), None)
    if mine is not None:
        branches[mine] = replace(branches[mine], run=run)
        return branches, gr.skip(), branches[mine].number, fork
    number = branches[-1].number + 1 if branches else 1
    before = run.earlier[-1].run if run.earlier else None
    after = next((b.number for b in branches if before is not None and b.run.id == before.id), None)
    branches = (branches + [Branch(number, run, fork, after)])[-MAX_BRANCHES:]
    return branches, branches_update(branches, number), number, None


def branches_update(branches: Sequence[Branch], current: int) -> Any:
    labels = [b.label for b in branches]
    gone = branches[0].number - 1 if branches else 0
    info = ("Each run of this session; a fork says which run it came from, at which token, with which "
            "token instead, and a follow-up which answer it follows. Choose one to show it again."
            + (f" (The first {gone} are no longer kept.)" if gone else ""))
    value = next((b.label for b in branches if b.number == current), None)
    return gr.update(choices=labels, value=value, visible=len(branches) > 1, info=info)


# The controls that say what a run asked, which showing a branch sets back to its request: Generate then
# asks that again, a fork or a follow-up starts from it, and "Copy link" links to it.
REQUEST_CONTROLS = ("prompt", "mode", "system", "answer_prefix", "history")


def request_values(run: Run) -> tuple:
    """The values of REQUEST_CONTROLS for `run`'s request."""
    config = run.config
    return (run.prompt, "chat" if config.chat else "raw", config.system, config.answer_prefix,
            conversation.history_json(config.history))


def show_branch(label: Any, branches: Sequence[Branch] | None) -> tuple:
    """A branch chosen in the list: its text, chart and numbers again, with no generation; then the
    current branch's number, and its request in the controls (REQUEST_CONTROLS)."""
    branch = next((b for b in branches or [] if b.label == label), None)
    if branch is None:
        return Update().values(BRANCH_OUTPUTS) + (gr.skip(),) * (1 + len(REQUEST_CONTROLS))
    run = branch.run
    compared = sentences.compare_html(run.summary, run.comparison) if run.comparison and run.summary else ""
    numbers = ({"this_run": run.summary.to_dict(), "big_model_alone": run.comparison.to_dict()}
               if run.comparison and run.summary else None)
    update = replace(run_update(run), compare_html=compared, numbers=numbers)
    return update.values(BRANCH_OUTPUTS) + (branch.number,) + request_values(run)


def turn_branch(run: Run | None, number: Any, branches: Sequence[Branch] | None) -> Branch:
    """The branch of the earlier turn `number` (1, 2, …) of the conversation `run` follows. ValueError
    where there is none: a turn a link gave (its text alone), or one the branch list has let go."""
    if run is None or not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= len(run.earlier):
        raise ValueError("the answer shown has no such earlier turn")
    turn = run.earlier[number - 1].run
    if turn is None:
        raise ValueError("this turn came with a link, which keeps its text alone, not its run")
    branch = next((b for b in branches or [] if b.run.id == turn.id), None)
    if branch is None:
        raise ValueError(f"this turn is no longer kept (the list keeps the latest {MAX_BRANCHES} branches)")
    return branch


# ---- follow-up questions -----------------------------------------------------------------------------

def followup_request(question: Any, run: Run | None) -> tuple[str, str]:
    """"Ask a follow-up": the next request's prompt and its earlier turns (the hidden field's JSON), the
    conversation of `run` so far. ValueError says why not: no finished chat answer, or no question."""
    if run is None:
        raise ValueError("generate an answer first, then ask a follow-up about it")
    if run.running:
        raise ValueError("let the answer finish (or stop it) before asking a follow-up")
    if not run.config.chat:
        raise ValueError("follow-up questions need chat mode: this run continued a text in raw mode")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("type a follow-up question first")
    return question, conversation.history_json(conversation.conversation_of(run))


def ask_followup(question: Any, run: Run | None) -> tuple:
    """The follow-up's request in the controls: prompt, earlier turns, no answer start (the earlier
    answer's start was its own), and the follow-up box emptied. A gr.Error says why not (the chained
    generation then does not run)."""
    try:
        prompt, history = followup_request(question, run)
    except ValueError as e:
        raise gr.Error(f"Cannot ask a follow-up: {e}.") from e
    return prompt, history, "", ""


def followup_box(run: Run | None) -> Any:
    """The follow-up box is offered under a finished (or stopped) chat answer."""
    return gr.update(visible=run is not None and not run.running and run.config.chat)


def conversation_line(history: Any, shown: Run | None = None) -> tuple:
    """When the request's conversation changes (a follow-up asked, a branch shown, a link, "New
    conversation"): the row by the prompt (its line, and "New conversation"), shown while the request
    continues a conversation, and the earlier turns' panel above the answer, with the colours of the
    runs that wrote them where `shown` (the run on the page) has them."""
    try:
        turns = conversation.parse_history(history)
    except ValueError as e:
        words = f"**The conversation cannot be read:** {e}. Start a new conversation."
        return gr.update(visible=True), words, gr.update(value="", visible=False)
    panel = conversation.conversation_panel(conversation.turns_of(turns, shown if isinstance(shown, Run) else None))
    words = conversation.conversation_words(turns)
    return gr.update(visible=bool(words)), words, gr.update(value=panel, visible=bool(panel))


def stop(run: Run | None) -> tuple:
    """Stop pressed: the generation is cancelled; what was streamed so far stays as a finished run."""
    if run is None or not run.running:
        return Update().values(STOP_OUTPUTS)
    run = replace(run, running=False)
    return Update(run=run, summary=summary_markdown(run)).values(STOP_OUTPUTS)
