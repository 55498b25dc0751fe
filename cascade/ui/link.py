"""A link that replays a run: the page's settings as query parameters named after `GenerationConfig`'s
fields (only those in `GENERATE_INPUTS`, so never a model file), read into the controls when the page loads
(`make_apply_link`), `run=1` to generate at once; "Copy link" writes one in the browser (`copy_link_js`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import gradio as gr

from ..routing.rules import RULE_TABLE, RULES
from . import rulewords
from .branches import request_controls
from .controls import PAGE_START, RouterSource, current_router, trained_on
from .conversation import (HISTORY_LINK_LIMIT, LINK_LIMIT, TOO_LONG_FOR_A_LINK, history_json, parse_history,
                           waiting_html)
from .generate import GENERATE_INPUTS, MODES, SETTINGS, EngineProvider, make_generate, request_config
from .run import GENERATE_OUTPUTS, Update

# Query parameters Gradio itself uses, which are no settings of ours.
_GRADIO_PARAMETERS = ("view", "__theme", "lang")


@dataclass(frozen=True)
class LinkSettings:
    values: dict[str, Any] = field(default_factory=dict)  # control name -> value to show
    problems: list[str] = field(default_factory=list)  # one sentence each, naming the parameter
    run: bool = False  # the link asks to generate at once

    def message(self) -> str | None:
        """What the page says about the link, or None when it named no setting."""
        if self.problems:
            return ("This link's settings could not all be used: " + "; ".join(self.problems)
                    + ". The page's defaults stand in for those.")
        if self.values:
            return "The settings come from the link." + ("" if self.run else " Press **Generate** to run them.")
        return None


# The rule of a link that names a threshold and no rule, as docs/page.md's example link does.
LINK_RULE_BEFORE = "perplexity"


def page_defaults() -> dict[str, Any]:
    """The controls' values when the page opens (`PAGE_START`), as a link reads and "Copy link" writes them."""
    return request_controls("", PAGE_START)


def read_link(query: Mapping[str, str], rules: Sequence[str] = RULES) -> LinkSettings:
    """The controls' values a link names, each checked alone (a threshold in its rule's units, deciding alone
    without a budget); `rules`: those the page offers."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    defaults = page_defaults()
    if "threshold" in query and "rule" not in query:
        query = {**query, "rule": LINK_RULE_BEFORE}
    if "threshold" in query and "budget" not in query:  # a threshold without a share decides alone
        values["budget"] = None
    # The rule first: it says in which units the threshold is read.
    for name in sorted(query, key=lambda n: (n != "rule", n == "history")):  # history: after the mode
        raw = query[name]
        if name == "run" or name in _GRADIO_PARAMETERS:
            continue
        if name not in GENERATE_INPUTS:
            problems.append(f"{name!r} is not a setting of this page")
            continue
        if name == "rule" and raw in RULE_TABLE and raw not in rules:
            problems.append(f"rule: the {raw} rule is not offered on this page (it needs a router, and none is loaded)")
            continue
        try:
            values[name] = _one(name, raw, {**defaults, **values})
        except ValueError as e:
            problems.append(f"{name}: {e}")
            continue
        if name == "rule":  # the threshold in the linked rule's units, unless the link names a good one (read next)
            values["threshold"] = RULE_TABLE[values["rule"]].default
    return LinkSettings(values, problems, run=query.get("run", "").strip().lower() in ("1", "true", "yes"))


def _one(name: str, raw: str, defaults: dict[str, Any]) -> Any:
    """One parameter's value for its control; ValueError says what is wrong with it."""
    if name == "prompt":
        return raw
    if name == "mode":
        if raw not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {raw!r}")
        return raw
    settings = {**{n: defaults[n] for n in SETTINGS}, name: raw}
    if name == "history":
        if len(raw) > HISTORY_LINK_LIMIT:
            raise ValueError(f"the conversation is {len(raw):,} characters, more than a link carries "
                             f"({HISTORY_LINK_LIMIT:,}); {TOO_LONG_FOR_A_LINK}")
        request_config(defaults["mode"], settings)  # parses it, and checks it against the mode
        return history_json(parse_history(raw))
    if name == "rule" and raw in RULE_TABLE:  # a rule alone is judged with its own default threshold
        settings["threshold"] = RULE_TABLE[raw].default
    config = request_config(defaults["mode"], settings)  # the page's one validator, for this setting alone
    return getattr(config, name)


def copy_link_js() -> str:
    """The browser side of "Copy link": the URL with the values that differ from the page's start (the request and
    its decision always), copied and shown; past LINK_LIMIT, a sentence saying to download the run instead."""
    names, defaults = json.dumps(list(GENERATE_INPUTS)), json.dumps(page_defaults())
    always = json.dumps(["prompt", "mode", "policy", "rule", "threshold", "budget"])
    too_long = json.dumps(f"This link would be more than {LINK_LIMIT:,} characters long, too long to be "
                          f"opened reliably: {TOO_LONG_FOR_A_LINK}.")
    return f"""(...values) => {{
  const names = {names}, defaults = {defaults}, always = {always}, limit = {LINK_LIMIT}, tooLong = {too_long};
  const url = new URL(window.location.href);
  url.search = "";
  names.forEach((name, i) => {{
    const value = values[i];
    if (value === null || value === undefined || value === "") return;
    if (always.includes(name) || String(value) !== String(defaults[name]))
      url.searchParams.set(name, value);
  }});
  const link = url.toString();
  if (link.length > limit) return tooLong;
  if (navigator.clipboard) navigator.clipboard.writeText(link).catch(() => {{}});
  return link;
}}"""


def make_apply_link(router: RouterSource | None = None):
    """On load: the controls a link sets (a rule with its own slider), a message about them, and whether to run."""

    def apply_link(request: gr.Request) -> tuple:
        loaded = current_router(router)
        link = read_link(dict(request.query_params) if request is not None else {},
                         rules=rulewords.offered(loaded is not None))
        updates = {name: gr.update(value=link.values[name]) if name in link.values else gr.skip()
                   for name in GENERATE_INPUTS}
        start = PAGE_START  # a link that names no rule: the page's start, as it is now
        rule = link.values.get("rule", start.rule)
        updates["rule"] = gr.update(choices=rulewords.choices(loaded is not None), value=rule,
                                    info=rulewords.rule_info(rule, trained_on(loaded)))
        threshold = link.values["threshold"] if "rule" in link.values else start.threshold
        updates["threshold"] = gr.update(**{**rulewords.slider_props(rule), "value": threshold})
        message = link.message()
        # A conversation's question waits under its earlier turns (drawn when the history field changes).
        history = parse_history(link.values.get("history", ""))
        waiting = waiting_html(len(history) // 2 + 1, link.values.get("prompt", "")) if history else gr.skip()
        return tuple(updates[name] for name in GENERATE_INPUTS) + (gr.skip() if message is None else message,
                                                                     link.run, waiting)

    return apply_link


def make_autorun(engine_provider: EngineProvider):
    """The generation a link with `run=1` starts when the page loads; nothing otherwise."""
    generate = make_generate(engine_provider)

    def autorun(asked: Any, *values: Any):
        if asked is True:  # (loading messages are not shown on this path: Gradio passes no progress)
            yield from generate(*values)
        else:
            yield Update().values(GENERATE_OUTPUTS)  # leave the page as the link made it

    return autorun
