"""What-if: a finished run re-coloured for another share, threshold or rule, without running the models;
choosing a rule also gives the threshold's slider that rule's range (`rulewords.slider_props`)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..routing.rules import RULE_TABLE
from . import rulewords
from .controls import RouterSource, current_router, trained_on
from .run import WHATIF_OUTPUTS, Run, Update, pictures


def whatif_update(threshold: Any, run: Run | None, rule: Any = None, budget: Any = None) -> Update:
    """The finished run re-coloured at `budget` or else `threshold` by `rule` (None: the run's); else Update()."""
    if run is None or run.running or not run.events:
        return Update()
    try:
        threshold = float(threshold)
        budget = None if budget is None or budget == "" else float(budget)
    except (TypeError, ValueError):
        return Update()
    if budget is not None and not (0.0 <= budget <= 1.0):
        return Update()
    return pictures(run, run.view(threshold, rule if rule in RULE_TABLE else run.config.rule, budget))


def whatif(threshold: Any, run: Run | None, rule: Any = None, budget: Any = None) -> tuple:
    """`whatif_update` as the outputs WHATIF_OUTPUTS."""
    return whatif_update(threshold, run, rule, budget).values(WHATIF_OUTPUTS)


def rule_changed(rule: Any, run: Run | None, trained_on: str | None = None, budget: Any = None) -> tuple:
    """Another rule chosen: its help line, the slider in its units (the run's threshold for its own), the what-if."""
    if rule not in RULE_TABLE:
        return (gr.skip(), gr.skip()) + Update().values(WHATIF_OUTPUTS)
    props = rulewords.slider_props(rule)
    if run is not None and not run.running and run.config.rule == rule:
        props["value"] = run.config.threshold
    info = gr.update(info=rulewords.rule_info(rule, trained_on))
    return (info, gr.update(**props)) + whatif_update(props["value"], run, rule, budget).values(WHATIF_OUTPUTS)


def make_rule_changed(router: RouterSource | None = None):
    """`rule_changed`, its help naming the pair the page's router (if any) was trained on now."""
    def changed(rule: Any, run: Any, budget: Any = None) -> tuple:
        return rule_changed(rule, run, trained_on(current_router(router)), budget)

    return changed
