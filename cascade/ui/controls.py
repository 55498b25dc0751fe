"""The request's controls: one per setting the generate endpoint takes (`GENERATE_INPUTS`).

Every control that sets a request is named after its `GenerationConfig` field and takes its range,
default and help from there. The rule's dropdown offers the learned rule only when the page has a
router, which `current_router` asks for when the page is built and when it loads.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import gradio as gr

from ..engine.config import GenerationConfig, limits
from ..engine.policies import offered as offered_policies
from ..serving.examples import Example
from . import rulewords

log = logging.getLogger(__name__)

Component = gr.components.Component

# Returns the learned rule's router the page's engines use (None: none, and the rule is not offered).
RouterSource = Callable[[], Any]

RULE_LABEL = "How the small model judges its own token"


def trained_on(router: Any) -> str | None:
    """The model pair a router was trained on, as the rule's help names it (None without a router)."""
    return getattr(router, "trained_on", None) if router is not None else None


def current_router(source: RouterSource | None) -> Any:
    """The router `source` gives now (None without a source, or if asking fails: the page then offers no
    learned rule rather than breaking)."""
    if source is None:
        return None
    try:
        return source()
    except Exception:  # a router file that went missing or bad: the service says so when it loads
        log.warning("could not tell whether the page has a router", exc_info=True)
        return None


def prompt_controls(examples: Sequence[Example]) -> dict[str, Component]:
    """The prompt, the hidden field of a follow-up's earlier turns, and the mode."""
    return {
        "prompt": gr.Textbox(label="Prompt", lines=4, placeholder="Ask something, or start a text…",
                             value=examples[0].prompt if examples else ""),
        # A follow-up's earlier turns, as JSON (`conversation.py`): set by "Ask a follow-up", a branch or a
        # link, read by Generate and by "Copy link" like any other setting.
        "history": gr.Textbox(value="", visible="hidden", label="Earlier turns", elem_classes="cascade-history"),
        "mode": gr.Radio([("Chat: the model answers", "chat"), ("Raw: the model continues the text", "raw")],
                         value="chat" if limits(GenerationConfig, "chat")["default"] else "raw", label="Mode"),
    }


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
    """A slider for a GenerationConfig field: its default, its range (narrowed to what a visitor needs)
    and its help."""
    meta = limits(GenerationConfig, name)  # (the threshold's slider is the rule's: `rulewords.slider_props`)
    return gr.Slider(minimum=max(meta["min"], lo) if lo is not None else meta["min"],
                     maximum=min(meta["max"], hi) if hi is not None else meta["max"],
                     value=meta["default"], step=step, label=label, info=info or meta["help"])


def settings_controls(router: Any = None) -> dict[str, Component]:
    """The controls of every setting a visitor may change, by field name. `router`: the learned rule's,
    if the page has one (the rule is offered only then)."""
    seed_meta = limits(GenerationConfig, "seed")
    rule = limits(GenerationConfig, "rule")["default"]
    controls = {
        "policy": gr.Dropdown([(p.label, p.name) for p in offered_policies()],
                              value=limits(GenerationConfig, "policy")["default"], label="Who writes"),
        "rule": gr.Dropdown(rulewords.choices(router is not None), value=rule, label=RULE_LABEL,
                            info=rulewords.rule_info(rule, trained_on(router))),
        "threshold": gr.Slider(**rulewords.slider_props(rule)),
    }
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
            seed=gr.Number(value=seed_meta["default"], minimum=seed_meta["min"], maximum=seed_meta["max"],
                           precision=0, label="Seed", info=seed_meta["help"]),
        )
    return controls
