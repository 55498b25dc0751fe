"""A run as the page remembers it (`Run`), the outputs a handler changes (`Update`, in an output tuple's order),
what each shows (`run_update`), and how often a run being written is drawn again (`Pacer`)."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import gradio as gr

from ..engine.analysis import Decision, Routing, RunView
from ..engine.config import GenerationConfig, ModelConfig
from ..engine.events import Summary, TokenEvent
from ..engine.policies import POLICY_TABLE
from ..routing.budget import calibration_for
from . import chart, conversation, quality, sentences, timebars, tokens
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
    break_even: float | None = None  # the largest big-model share that beats the big model alone, after Compare
    alone_estimate_s: float | None = None  # the big model alone's time, estimated from this machine's costs
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12], compare=False)  # kept through its updates
    earlier: tuple[Turn, ...] = field(default=(), compare=False)  # a follow-up's earlier turns
    draft_path: str | None = field(default=None, compare=False)  # whose calibration a share's what-if reads
    # (the big model's size in billions, cascade's predicted speed over it at the map's share), from loading's costs
    pays_point: tuple[float, float] | None = field(default=None, compare=False)

    @property
    def budget(self) -> float | None:
        """The share of tokens the run asked of the big model (a policy with a rule); None: the threshold decided."""
        policy = POLICY_TABLE.get(self.config.policy)
        return self.config.budget if policy is not None and policy.uses_rule else None

    def prior(self, rule: str) -> Sequence[float] | None:
        """The calibration's scores a share's threshold starts from, for `rule` in this run's mode; None if none."""
        if self.draft_path is None:
            return None
        calibration, _own = calibration_for(self.draft_path)
        return calibration.prior(rule, self.config.chat) if calibration is not None else None

    def view(self, threshold: float | None = None, rule: str | None = None, budget: float | None = None) -> RunView:
        """This run as written, or the what-if of `rule` (None: the run's) at `budget` or else `threshold`."""
        run = Decision(self.config.rule, self.config.threshold, self.budget)
        return RunView(run, threshold, rule, budget, self.prior(rule or self.config.rule))

    @property
    def scoring(self) -> bool:
        """The answer is written (a first Summary came) and the big model is scoring it."""
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
    timebars: Any = KEEP  # where the time went (`timebars`), drawn after the run
    more_box: Any = KEEP  # the fold "More about this run"
    more: Any = KEEP  # its text (`more_markdown`)

    def values(self, names: Sequence[str]) -> tuple:
        """The named outputs in order: what a Gradio handler returns for `outputs=[...]` in that order."""
        return tuple(gr.skip() if getattr(self, name) is KEEP else getattr(self, name) for name in names)


GENERATE_OUTPUTS = ("text_html", "chart", "summary", "plain_text", "run", "rules_box")
# compare_html and numbers first: the /compare endpoint's answer keeps its order
COMPARE_OUTPUTS = ("compare_html", "numbers", "rules_text", "rules_chart", "summary", "rules_box", "run")
WHATIF_OUTPUTS = ("text_html", "chart")
STOP_OUTPUTS = ("run", "summary", "compare_html", "numbers")
BRANCH_OUTPUTS = GENERATE_OUTPUTS + ("compare_html", "numbers")
# drawn by a step of their own after a run, a comparison, a Stop or a branch shown (`verdict`)
VERDICT_OUTPUTS = ("timebars", "more_box", "more")
# cleared by a step of its own before a generation, so that the /generate endpoint's outputs stay as they are
CLEARED_OUTPUTS = ("compare_html", "numbers", "rules_box", "rules_text", "rules_chart") + VERDICT_OUTPUTS
# the run's file is written in a step of its own, outside the generation's time
DOWNLOAD_OUTPUTS = ("download",)


def pictures(run: Run, view: RunView | None = None) -> Update:
    """The run's text and chart as `view` sees them (None: as written)."""
    routing, view = Routing(run.events), view or run.view()
    panel = tokens.text_panel(routing, view, given=run.config.answer_prefix)
    line = not (run.running and run.budget is not None)
    return Update(text_html=conversation.latest_html(len(run.earlier) + 1, run.prompt, panel),
                  chart=chart.perplexity_plot(routing, view, run_line=line))


def run_update(run: Run) -> Update:
    """The text, the chart, the summary and the plain text of a run in progress or finished."""
    return replace(pictures(run), summary=summary_markdown(run), plain_text=run.answer, run=run,
                   rules_box=gr.update(visible=False))


def summary_markdown(run: Run) -> str:
    """The summary under the answer: its first line (while scoring, then a step of its own); the rest is `more`'s."""
    if run.summary is not None:
        first = f"**{first_line(run)}**"
        return f"{first}  \n*{sentences.SCORING_STEP}*" if run.scoring else first
    if not run.running:
        return f"**{sentences.stopped_sentence(run.events)}**"
    accepted = [e for e in run.events if e.accepted]
    by_target = sum(e.source == "target" for e in accepted)
    copied = sum(e.source == "lookup" for e in accepted)
    return (f"Writing… {len(accepted)} tokens so far, {by_target} by the big model (red)"
            + (f", {copied} copied from the text." if copied else "."))


def more_markdown(run: Run) -> str:
    """What the fold under the picture says of a finished run: the details, the pass rates, the break-even."""
    if run.summary is None:
        return ""
    after = sentences.break_even_sentence(run.summary, run.break_even) if run.comparison else None
    measured = measured_quality(run)
    lines = [*sentences.summary_lines(run.summary),
             f"<span class=\"cascade-quality\">{measured}</span>" if measured else None, after]
    return "\n\n".join(line for line in lines if line)


def verdict(run: Run | None) -> Update:
    """The picture of where the time went and the fold's text, once a run has a Summary (hidden otherwise)."""
    summary = run.summary if isinstance(run, Run) else None
    if summary is None:
        return Update(timebars=gr.update(value=None, visible=False), more_box=gr.update(visible=False), more="")
    picture = timebars.figure(summary, run.comparison, run.alone_estimate_s)
    return Update(timebars=gr.update(value=picture, visible=True), more_box=gr.update(visible=True),
                  more=more_markdown(run))


def first_line(run: Run) -> str:
    """The summary's first sentence, beside the big model alone's time: measured by Compare, else estimated."""
    if run.comparison is not None:
        return sentences.summary_sentence(run.summary, run.comparison.timings.wall_s, measured=True,
                                          alone_tokens=run.comparison.counts.n_tokens)
    return sentences.summary_sentence(run.summary, run.alone_estimate_s)


def measured_quality(run: Run) -> str | None:
    """The shipped pass rates' sentence (`quality`); None if they cannot be read."""
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


# a few pictures a second look live; drawing them takes at most 1/DRAW_SHARE of the models' machine
UPDATE_EVERY_S = 0.25
DRAW_SHARE = 50


class Pacer:
    """The wait before the next picture: UPDATE_EVERY_S, or DRAW_SHARE times the cheaper of the last two's cost."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.costs = [0.0]
        self._clock = clock

    def interval(self) -> float:
        return max(UPDATE_EVERY_S, DRAW_SHARE * min(self.costs))

    def draw(self, run: Run) -> Update:
        started = self._clock()
        update = run_update(run)
        self.costs = [self.costs[-1], self._clock() - started]
        return update
