"""The request's controls, one per setting the generate endpoint takes, each named after its `GenerationConfig`
field and starting at `PAGE_START`; how much the big model writes is a share in percent or, ticked, a threshold
on a bar of its own (`share_controls`), the hidden `budget` set in the browser (`share_js`)."""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Callable, Sequence

import gradio as gr

from ..engine.config import GenerationConfig, limits
from ..engine.policies import offered as offered_policies
from ..routing.rules import RULE_TABLE
from ..serving.examples import Example
from . import rulewords

log = logging.getLogger(__name__)

Component = gr.components.Component

# Returns the learned rule's router the page's engines use (None: none, and the rule is not offered).
RouterSource = Callable[[], Any]

# The big model writes 10% of the tokens, by perplexity (why: BENCHMARKS.md "Teacher-forced curves against real runs").
PAGE_START = GenerationConfig(rule="perplexity", threshold=5.0, budget=0.1)

RULE_LABEL = "How the small model judges its own token"
SHARE_LABEL = "How much the big model writes"
BY_THRESHOLD_LABEL = "Set a threshold instead"


def trained_on(router: Any) -> str | None:
    """The model pair a router was trained on, as the rule's help names it (None without a router)."""
    return getattr(router, "trained_on", None)


def current_router(source: RouterSource | None) -> Any:
    """The router `source` gives now; None without a source or if asking fails."""
    if source is None:
        return None
    try:
        return source()
    except Exception:  # a router file that went missing or bad: the service says so when it loads
        log.warning("could not tell whether the page has a router", exc_info=True)
        return None


def prompt_controls(examples: Sequence[Example]) -> dict[str, Component]:
    """The prompt (the first example) and the hidden field of a follow-up's earlier turns."""
    return {
        "prompt": gr.Textbox(label="Prompt", lines=2, max_lines=12, placeholder="Ask something, or start a text…",
                             value=examples[0].prompt if examples else "", elem_classes="cascade-prompt"),
        # As JSON (`conversation.py`), set by a follow-up, a branch or a link, read like any other setting.
        "history": gr.Textbox(value="", visible="hidden", label="Earlier turns", elem_classes="cascade-history"),
    }


def mode_control(examples: Sequence[Example]) -> dict[str, Component]:
    """Chat or raw: the first example's, or the page's start; unrendered (shown after the examples that set it)."""
    chat = examples[0].chat if examples else PAGE_START.chat
    return {"mode": gr.Radio([("Chat: the model answers", "chat"), ("Raw: the model continues the text", "raw")],
                             value="chat" if chat else "raw", label="Mode", elem_classes="cascade-mode",
                             render=False)}


def framing_controls() -> dict[str, Component]:
    """The system message and the answer's given start, in an accordion of their own."""
    with gr.Accordion("System message and the answer's start", open=False, elem_classes="cascade-framing"):
        return {
            "system": gr.Textbox(value="", label="System message (chat mode)", lines=2,
                                 placeholder="Empty: the model's own default",
                                 info="Sets the assistant's role, through the model's chat template."),
            "answer_prefix": gr.Textbox(value="", label="The answer starts with", lines=1, placeholder="e.g. ```python",
                                        info="Given text: both models read it as the start of the answer and write "
                                             "on from it; neither writes it. Shown in grey."),
        }


def _slider(name: str, label: str, *, lo: float | None = None, hi: float | None = None, step: float = 1,
            info: str | None = None) -> gr.Slider:
    """A slider for a GenerationConfig field: its default, its range (narrowed by lo, hi) and its help."""
    meta = limits(GenerationConfig, name)  # (the threshold's slider is the rule's: `rulewords.slider_props`)
    return gr.Slider(minimum=max(meta["min"], lo) if lo is not None else meta["min"],
                     maximum=min(meta["max"], hi) if hi is not None else meta["max"],
                     value=getattr(PAGE_START, name), step=step, label=label, info=info or meta["help"])


def share_controls(start: GenerationConfig) -> tuple[dict[str, Component], dict[str, Component]]:
    """The request's `budget` (hidden) and `threshold` controls, and the parts that set them, by name."""
    by_share = start.budget is not None
    percent = round(100 * start.budget, 2) if by_share else 10.0  # the slider's start without a share: 10%
    with gr.Group(elem_classes="cascade-share-box"):
        share = gr.Slider(0, 100, value=percent, step=1, label=SHARE_LABEL, visible=by_share,
                          info="In % of the tokens: those the small model is least sure of go to the big model, "
                               "about this share of them (the threshold moves as the answer is written to keep it). "
                               "Move it after a run to see a what-if.", elem_classes="cascade-share")
        by_threshold = gr.Checkbox(value=not by_share, label=BY_THRESHOLD_LABEL, elem_classes="cascade-by-threshold",
                                   info="Fix the threshold yourself, in the units of the small model's judgement "
                                        "(below), instead of a share.")
        budget = gr.Number(value=start.budget, visible="hidden", minimum=0, maximum=1,
                           label="Share of tokens for the big model (0 to 1; empty: the threshold decides)",
                           elem_classes="cascade-budget")
    with gr.Group(elem_classes="cascade-threshold-box", visible=not by_share) as threshold_box:
        threshold = gr.Slider(**{**rulewords.slider_props(start.rule), "value": start.threshold},
                              elem_classes="cascade-threshold")
        bar = threshold_bar(start)
    parts = {"share": share, "by_threshold": by_threshold, "threshold_box": threshold_box, "threshold_bar": bar}
    return {"budget": budget, "threshold": threshold}, parts


def settings_controls(router: Any) -> tuple[dict[str, Component], dict[str, Component]]:
    """Every setting's control by field, at `PAGE_START`, and the share's parts; the learned rule needs `router`."""
    seed_meta = limits(GenerationConfig, "seed")
    start = PAGE_START  # with a router too: the learned rule is offered, not started with
    policies = [(rulewords.policy_label(p.name), p.name) for p in offered_policies()]
    controls = {"policy": gr.Dropdown(policies, value=start.policy, label="Who writes", elem_classes="cascade-policy")}
    deciding, shares = share_controls(start)
    controls.update(deciding)
    controls["rule"] = gr.Dropdown(rulewords.choices(router is not None), value=start.rule, label=RULE_LABEL,
                                   info=rulewords.rule_info(start.rule, trained_on(router)),
                                   elem_classes="cascade-rule")
    with gr.Accordion("More settings", open=False):
        controls.update(
            k=_slider("k", "k: tokens the small model drafts per check (speculative)"),
            rollback_threshold=_slider("rollback_threshold", "Rollback threshold (bild)", hi=1000.0, step=0.5,
                                       info="BiLD: when the big model checks the small model's recent tokens, "
                                            "it rolls back from the first whose perplexity (to the big model) "
                                            "is above this."),
            bild_window=_slider("bild_window", "Most unchecked tokens (bild)"),
            lookup_ngram=_slider("lookup_ngram", "Longest n-gram to look up (lookup)",
                                 info="Lookup: the text's last tokens (this many at most, fewer if need be) are "
                                      "looked for earlier in the prompt and the answer; what followed them there "
                                      "is proposed."),
            max_tokens=_slider("max_tokens", "Most tokens to write", lo=1, hi=1024),
            temperature=_slider("temperature", "Temperature (0 = always the likeliest token)", step=0.05),
            top_p=_slider("top_p", "Top-p (nucleus sampling; 1 keeps every token)", step=0.01),
            top_k=_slider("top_k", "Top-k (0 keeps every token)", hi=200),
            seed=gr.Number(value=PAGE_START.seed, minimum=seed_meta["min"], maximum=seed_meta["max"],
                           precision=0, label="Seed", info=seed_meta["help"]),
        )
    return controls, shares


def share_js(direction: str) -> str:
    """The browser step "to_budget" (share / 100, null when ticked) or "from_budget" (the controls follow it)."""
    if direction == "to_budget":
        return "(share, byThreshold) => byThreshold ? null : Math.round(Number(share) * 100) / 10000"
    return ("(budget, share) => (budget === null || budget === undefined || budget === '' || isNaN(Number(budget)))"
            " ? [share, true] : [Math.round(Number(budget) * 10000) / 100, false]")


def shown_by(by_threshold: Any) -> tuple:
    """The tick changed: show the share's slider or the threshold's box."""
    ticked = bool(by_threshold)
    return gr.update(visible=not ticked), gr.update(visible=ticked)


# A bar of even steps, logarithmic where the rule is, drives the hidden (linear) threshold slider.
BAR_STEPS = 1000


def bar_scales() -> dict[str, dict[str, Any]]:
    """Each rule's slider range and step, and whether its bar is logarithmic (the bar's JavaScript reads it)."""
    props = {name: rulewords.slider_props(name) for name in RULE_TABLE}
    return {name: {"lo": p["minimum"], "hi": p["maximum"], "step": p["step"],
                   "log": RULE_TABLE[name].log_scale and p["minimum"] > 0} for name, p in props.items()}


def bar_position(rule: str, threshold: float) -> int:
    """Where `threshold` lies on `rule`'s bar (0 to BAR_STEPS): the browser's `toBar`, for the first view."""
    s = bar_scales()[rule]
    t = min(max(threshold, s["lo"]), s["hi"])
    f = math.log(t / s["lo"]) / math.log(s["hi"] / s["lo"]) if s["log"] else (t - s["lo"]) / (s["hi"] - s["lo"])
    return round(f * BAR_STEPS)


def threshold_bar(start: GenerationConfig) -> gr.Slider:
    """The bar a visitor drags to set the threshold (its number and label are the threshold slider's)."""
    return gr.Slider(0, BAR_STEPS, value=bar_position(start.rule, start.threshold), step=1,
                     label="the threshold's bar", show_label=False, container=False,
                     elem_classes="cascade-threshold-bar", buttons=[])


_BAR_FUNCTIONS = """
  const scales = __SCALES__, steps = __STEPS__;
  const scale = (rule) => scales[rule] || scales.perplexity;
  const toThreshold = (bar, rule) => {
    const s = scale(rule), f = Math.min(Math.max(Number(bar) / steps, 0), 1);
    const t = s.log ? s.lo * Math.pow(s.hi / s.lo, f) : s.lo + (s.hi - s.lo) * f;
    const digits = Math.max(0, -Math.floor(Math.log10(s.step) + 1e-9));
    return Number(Math.min(Math.max(Math.round(t / s.step) * s.step, s.lo), s.hi).toFixed(digits));
  };
  const toBar = (threshold, rule) => {
    const s = scale(rule), t = Math.min(Math.max(Number(threshold), s.lo), s.hi);
    const f = s.log ? Math.log(t / s.lo) / Math.log(s.hi / s.lo) : (t - s.lo) / (s.hi - s.lo);
    return Math.round(f * steps);
  };
"""


def bar_js(direction: str) -> str:
    """The bar's browser step: "to_threshold" (dragged) or "to_bar" (kept where it stands, so rounding never
    pulls a drag back)."""
    body = ("return toThreshold(bar, rule);" if direction == "to_threshold" else
            "return toThreshold(bar, rule) === Number(threshold) ? bar : toBar(threshold, rule);")
    functions = _BAR_FUNCTIONS.replace("__SCALES__", json.dumps(bar_scales())).replace("__STEPS__", str(BAR_STEPS))
    arguments = "(bar, rule)" if direction == "to_threshold" else "(threshold, rule, bar)"
    return f"{arguments} => {{{functions}  {body}\n}}"
