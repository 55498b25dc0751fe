"""A run as the page remembers it, and the page's outputs it changes.

`Run` is one generation: what was asked and every event the engine sent. A handler answers with an
`Update`, one record naming the outputs it changes (a field left as `KEEP` stays as it is on the page);
`Update.values` turns it into the tuple Gradio expects, in the order of one of the output-name tuples
below. `run_update` draws a run (text, chart, summary) with `tokens`, `chart` and `sentences`, and the
`Pacer` decides how often a run still being written is drawn again.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import gradio as gr

from ..engine.analysis import Routing
from ..engine.config import GenerationConfig, ModelConfig
from ..engine.events import Summary, TokenEvent
from ..engine.policies import POLICY_TABLE
from ..routing.budget import calibration_for
from . import chart, conversation, quality, sentences, tokens
from .conversation import Turn

log = logging.getLogger(__name__)


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
    # The big model alone's seconds for this request, estimated from the costs the engine measured on this
    # machine (`Engine.estimate_target_alone_s`); None before any were measured. A comparison replaces it.
    alone_estimate_s: float | None = None
    # Which run this is, kept through its updates (stopped, compared): the session's branches know it by it.
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12], compare=False)
    # A follow-up's earlier questions and answers (`config.history` is their text, as the models read it),
    # with their runs where the page has them, so they are shown with their colours above this one.
    earlier: tuple[Turn, ...] = field(default=(), compare=False)
    # The draft model's file that wrote it, whose calibration a share's what-if starts from, as the run's
    # own share did (`routing.budget.calibration_for`); None where unknown.
    draft_path: str | None = field(default=None, compare=False)

    @property
    def budget(self) -> float | None:
        """The share of tokens the run asked of the big model, where a share set its rule's threshold
        (a policy with a rule); None where the threshold decided."""
        policy = POLICY_TABLE.get(self.config.policy)
        return self.config.budget if policy is not None and policy.uses_rule else None

    def prior(self, rule: str) -> Sequence[float] | None:
        """The calibration's scores a share's threshold starts from, for `rule` in this run's mode (as the
        engine's `tracker_for` reads them); None without a draft file or a calibration."""
        if self.draft_path is None:
            return None
        calibration, _own = calibration_for(self.draft_path)
        return calibration.prior(rule, self.config.chat) if calibration is not None else None

    @property
    def scoring(self) -> bool:
        """The answer is written (its Summary came, from the engine's `Written` event) and the big model is
        reading it to score it: the final Summary, with the scoring figures, follows."""
        return self.running and self.summary is not None

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
# What belonged to the run shown before, cleared by a quick step of its own when a generation is asked for
# (Generate, a fork, a follow-up; refused or not), so that the /generate endpoint's outputs stay as they were.
CLEARED_OUTPUTS = ("compare_html", "numbers", "rules_box", "rules_text", "rules_chart")
# After a generation, a comparison or a Stop, the file that keeps the run is written in a step of its
# own, so that the generation's own time does not include it.
DOWNLOAD_OUTPUTS = ("download",)


# ---- what each output shows -----------------------------------------------------------------------

def pictures(run: Run, threshold: float | None = None, rule: str | None = None,
             budget: float | None = None) -> Update:
    """The run's text and chart: as its own rule judged it, or as `rule` (None: the run's) would have at
    the share `budget` or, with none, at `threshold` (a what-if). A follow-up's question stands above its
    text; its earlier turns are a panel of their own (`followups.conversation_line`)."""
    routing, run_threshold, run_rule = Routing(run.events), run.config.threshold, run.config.rule
    shares = {"run_budget": run.budget, "budget": budget, "prior": run.prior(rule or run_rule)}
    panel = tokens.text_panel(routing, run_threshold=run_threshold, threshold=threshold, run_rule=run_rule, rule=rule,
                              given=run.config.answer_prefix, **shares)
    # A share's threshold moved as the run went: its line is replayed once the run is finished.
    line = not (run.running and run.budget is not None)
    return Update(text_html=conversation.latest_html(len(run.earlier) + 1, run.prompt, panel),
                  chart=chart.perplexity_plot(routing, run_threshold, threshold, run_rule, rule, run_line=line,
                                              **shares))


def run_update(run: Run) -> Update:
    """The text, the chart, the summary and the plain text of a run in progress or finished."""
    return replace(pictures(run), summary=summary_markdown(run), plain_text=run.answer, run=run,
                   rules_box=gr.update(visible=False))


def summary_markdown(run: Run) -> str:
    """The summary under the answer: a first line anyone reads (who wrote how much, how long it took, the
    big model alone's time beside it), then the details. While the big model scores a written answer, the
    answer is shown finished with its time, and the scoring as a step of its own."""
    if run.summary is not None:
        first = f"**{first_line(run)}**"
        if run.scoring:
            return "  \n".join(line for line in (first, sentences.budget_sentence(run.summary),
                                                 sentences.timing_sentence(run.summary),
                                                 f"*{sentences.SCORING_STEP}*") if line)
        after = sentences.break_even_sentence(run.summary, run.break_even) if run.comparison else None
        measured = measured_quality(run)
        # The measured pass rates right under the speed and the scoring; a comparison's break-even
        # sentence, which comes later, after them.
        lines = [first, *sentences.summary_lines(run.summary),
                 f"<span class=\"cascade-quality\">{measured}</span>" if measured else None, after]
        return "  \n".join(line for line in lines if line)
    if not run.running:
        return f"**{sentences.stopped_sentence(run.events)}**"
    accepted = [e for e in run.events if e.accepted]
    by_target = sum(e.source == "target" for e in accepted)
    copied = sum(e.source == "lookup" for e in accepted)
    return (f"Writing… {len(accepted)} tokens so far, {by_target} by the big model (red)"
            + (f", {copied} copied from the text." if copied else "."))


def first_line(run: Run) -> str:
    """The summary's first sentence: with the big model alone's time measured by Compare where the run was
    compared, else as estimated from this machine's costs (or nothing, before any were measured)."""
    if run.comparison is not None:
        return sentences.summary_sentence(run.summary, run.comparison.wall_s, measured=True,
                                          alone_tokens=run.comparison.n_tokens)
    return sentences.summary_sentence(run.summary, run.alone_estimate_s)


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


# ---- how often a run being written is drawn ---------------------------------------------------------

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

    def draw(self, run: Run) -> Update:
        started = time.perf_counter()
        update = run_update(run)
        self.costs = [self.costs[-1], time.perf_counter() - started]
        return update
