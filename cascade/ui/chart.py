"""The per-token chart (each point the number a rule compares with its threshold) and the rules' curves, as
Plotly figure specs from a run's `Routing`; hover labels carry model text, so they are escaped."""

from __future__ import annotations

import functools
import html
import json
import math
from collections.abc import Sequence
from typing import Any

from ..engine.analysis import Decision, Routing, RunView, Slot, WhatIf, as_rule
from ..routing.rules import Rule
from . import rulewords
from .style import (BLUE, GREY, PURPLE, RED, RULE_COLOURS, THRESHOLD_COLOUR, fmt_ppl, fmt_threshold, pct, visible,
                    written_by)

_LOG_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000, 100_000, 1_000_000]


def _hover(slot: Slot, extra: str, rule: Rule) -> str:
    t = slot.token
    lines = [f"position {t.position}: {visible(t.text)}", written_by(t.source)]
    score = slot.score(rule)
    if score is not None:
        which = "its own token" if not slot.by_target else f"its proposal {visible(slot.proposal.text)}"
        if rule.name == "perplexity":
            lines.append(f"small model's perplexity of {which}: {fmt_ppl(score)}")
        else:
            lines.append(f"{rulewords.WORDS[rule.name].number} for {which}: {rulewords.fmt_score(rule, score)}"
                         + (" (the big model writes where this is below the threshold)" if rule.below else ""))
    elif rule.name == "perplexity":
        lines.append(f"the small model did not score this; big model's perplexity: {fmt_ppl(t.target_ppl)}")
    else:
        lines.append(f"no {rule.name} score here ({rulewords.unscored(rule)}); drawn along the bottom")
    if extra:
        lines.append(extra)
    return "<br>".join(html.escape(line) for line in lines)


def _plotted(slot: Slot, rule: Rule) -> float | None:
    value = slot.score(rule)
    if value is None and rule.name == "perplexity":  # the target's own perplexity stands in (a hollow mark)
        value = slot.token.target_ppl
    return value if value is not None and math.isfinite(value) else None


_BOTTOM = 0.03  # where a position without the rule's number is drawn, on a hidden second axis


def _points(name: str, chosen: list[Slot], rule: Rule, color: str, symbol: str = "circle", extra=lambda s: "",
            bottom: bool = False) -> dict:
    return {
        "type": "scatter", "mode": "markers", "name": name,
        "x": [s.token.position for s in chosen],
        "y": [_BOTTOM if bottom else _plotted(s, rule) for s in chosen],
        "text": [_hover(s, extra(s), rule) for s in chosen],
        "hovertemplate": "%{text}<extra></extra>", "meta": "tokens",
        "marker": {"color": color, "size": 7, "symbol": symbol, "line": {"width": 1.5, "color": color}},
        **({"yaxis": "y2"} if bottom else {}),
    }


def _line(name: str, xs: list, ys: list, color: str, dash: str, moving: bool = False) -> dict:
    """A threshold's trace: flat, or (`moving`) stepped position by position with a gap where it is infinite."""
    return {"type": "scatter", "mode": "lines", "name": name, "x": xs, "y": ys, "connectgaps": False,
            "hovertemplate": html.escape(name) + (": %{y:.3g}" if moving else "") + "<extra></extra>",
            "line": {"color": color, "dash": dash, "width": 2.5, **({"shape": "hvh"} if moving else {})},
            "meta": "threshold"}


def _threshold_line(routing: Routing, decision: Decision, span: tuple[float, float], prefix: str, named: bool,
                    color: str, dash: str, whatif: WhatIf | None = None, prior: Sequence[float] | None = None) -> dict:
    """`decision`'s threshold: with a share, the one it set at each position (`whatif`, else replayed from
    `prior`), else a flat line; its name (the rule's if `named`) short enough for a phone's legend."""
    rule = as_rule(decision.rule)
    by = f" ({rule.name})" if named else ""
    if decision.budget is not None and (whatif := whatif or routing.whatif(decision, prior)) is not None:
        ys = [t if math.isfinite(t) else None for t in whatif.thresholds]
        return _line(f"{prefix}, moved for a {rulewords.share(decision.budget)} share{by}",
                     [s.token.position for s in routing.slots], ys, color, dash, moving=True)
    below = " (below it, the big model writes)" if rule.below else ""
    return _line(f"{prefix} {fmt_threshold(decision.threshold)}{by}{below}", list(span), [decision.threshold] * 2,
                 color, dash)


def _whatif_traces(routing: Routing, whatif: WhatIf, named: bool) -> list[dict]:
    rule = whatif.rule
    index = routing.index_of

    def verdict(s: Slot) -> bool | None:
        return whatif.verdicts[index[id(s.token)]]

    def note(s: Slot) -> str:
        i = index[id(s.token)]
        return rulewords.whatif_words(rule, s.score(rule), whatif.thresholds[i], whatif.verdicts[i], named,
                                      whatif.decision.budget)

    scored = [s for s in routing.slots if verdict(s) is not None]
    unscored = [s for s in routing.slots if verdict(s) is None]
    traces = [_points("what-if: would go to the big model", [s for s in scored if verdict(s)], rule, RED,
                      extra=note),
              _points("what-if: would stay with the small model", [s for s in scored if not verdict(s)], rule, BLUE,
                      extra=note)]
    if unscored:
        bottom = rule.name != "perplexity"
        why = "no router score" if rule.name == "learned" else "not scored by the small model"
        traces.append(_points(f"no what-if ({why}; along the bottom)" if bottom else f"no what-if ({why})", unscored,
                              rule, GREY, "diamond-open", bottom=bottom))
    return traces


def _run_traces(scored: list[Slot], unscored: list[Slot], rule: Rule) -> list[dict]:
    traces = [_points("written by the small model", [s for s in scored if not s.by_target], rule, BLUE),
              _points("written by the big model", [s for s in scored if s.by_target], rule, RED)]
    bottom = rule.name != "perplexity"
    why = f"no {rule.name} score, along the bottom" if bottom else None
    by_target = [s for s in unscored if (s.by_target if bottom else not s.by_lookup)]
    if by_target:
        traces.append(_points(f"written by the big model; {why}" if bottom else
                              "written by the big model; small model did not score it (big model's own "
                              "perplexity)", by_target, rule, RED, "diamond-open", bottom=bottom))
    copied = [s for s in unscored if s.by_lookup]
    if copied:
        traces.append(_points(f"copied from earlier in the text (prompt lookup; {why})" if bottom else
                              "copied from earlier in the text (prompt lookup; big model's perplexity)", copied,
                              rule, PURPLE, "square-open", bottom=bottom))
    by_draft = [s for s in unscored if not s.by_target and not s.by_lookup]  # the learned rule without a router
    if by_draft and bottom:
        traces.append(_points(f"written by the small model; {why}", by_draft, rule, BLUE, "circle-open", bottom=True))
    return traces


def _yaxis(rule: Rule) -> dict[str, Any]:
    if rule.log_scale:
        return {"title": {"text": rulewords.WORDS[rule.name].axis}, "type": "log",
                "tickvals": _LOG_TICKS, "ticktext": [f"{v:g}" for v in _LOG_TICKS]}
    axis: dict[str, Any] = {"title": {"text": rulewords.WORDS[rule.name].axis}, "type": "linear",
                            "rangemode": "tozero", "zeroline": False}
    if rule.high <= 1:  # a probability or a difference of two: the whole range
        axis["range"] = [-0.03, 1.03]
    return axis


def figure_spec(routing: Routing, view: RunView, *, run_line: bool = True) -> dict[str, Any]:
    """The per-token chart: a point per token coloured by who wrote it (or would, in `view`'s what-if); threshold
    traces have `meta` "threshold"; `run_line` False leaves the run's own out (a run still being written)."""
    run, prior = view.run, view.prior
    run_rule = as_rule(run.rule)
    whatif = view.whatif(routing)
    shown = whatif.rule if whatif is not None else run_rule
    span = (-0.5, max((s.token.position for s in routing.slots), default=0) + 0.5)
    other = shown != run_rule
    if whatif is not None:
        traces = _whatif_traces(routing, whatif, named=other) + [_threshold_line(
            routing, whatif.decision, span, "what-if threshold", other, THRESHOLD_COLOUR, "solid", whatif)]
        if not other:  # the run's own threshold is in another rule's units otherwise
            traces.append(_threshold_line(routing, run, span, "this run's threshold", False, GREY, "dot", prior=prior))
    else:
        scored = [s for s in routing.slots if s.score(shown) is not None]
        unscored = [s for s in routing.slots if s.score(shown) is None]
        traces = _run_traces(scored, unscored, shown) + ([_threshold_line(
            routing, run, span, "threshold", False, THRESHOLD_COLOUR, "dash", prior=prior)] if run_line else [])
    traces = [t for t in traces if t["x"] or t["meta"] == "threshold"]  # no empty legend entries
    if whatif is None:
        title = "How unsure was the small model, token by token"
    elif other:
        title = f"What-if by {rulewords.plain_name(shown)}"
    else:
        title = "What-if: who would have written each token"
    # the visitor's zoom kept while the chart updates; a new rule's axis (a two-line title) starts afresh
    layout = _layout(title, 380, 40, left=60 if shown.name == "perplexity" else 75, yaxis=_yaxis(shown),
                     xaxis={"title": {"text": "token position in the answer"}, "zeroline": False},
                     uirevision="keep" if shown.name == "perplexity" else f"keep-{shown.name}")
    if any(t.get("yaxis") == "y2" for t in traces):
        layout["yaxis2"] = {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}
    return {"data": traces, "layout": layout}


def _layout(title: str, height: int, top: int, left: int = 60, **more: Any) -> dict[str, Any]:
    """A chart's layout: its title centred over it, its legend under it, hovers at the nearest point."""
    return {"title": {"text": title, "font": {"size": 15}, "x": 0.5, "xanchor": "center"}, "height": height,
            "margin": {"l": left, "r": 10, "t": top, "b": 45},
            "legend": {"orientation": "h", "y": -0.18, "font": {"size": 11}}, "hovermode": "closest", **more}


def perplexity_figure(routing: Routing, view: RunView):
    """`figure_spec` as a `plotly.graph_objects.Figure`."""
    import plotly.graph_objects as go

    return go.Figure(figure_spec(routing, view))


def perplexity_plot(routing: Routing, view: RunView, *, run_line: bool = True):
    """`figure_spec` as a `gr.Plot`'s JSON, skipping the Figure (its validation is too slow for a live run)."""
    from gradio.components.plot import PlotData

    spec = figure_spec(routing, view, run_line=run_line)
    layout = {**spec["layout"], "template": _default_template()}
    return PlotData(type="plotly", plot=json.dumps({"data": spec["data"], "layout": layout}))


@functools.lru_cache(maxsize=1)
def _default_template() -> dict[str, Any]:
    """Plotly's default template, as a Figure writes it into its layout."""
    import plotly.graph_objects as go

    return json.loads(go.Figure().to_json())["layout"]["template"]


BREAK_EVEN_NAME = "sharing pays left of here on this machine"
BREAK_EVEN_LABEL = "break-even"
AXIS_PAD = 3  # percentage points past each end of the rules' axes


def _as_percent(x: float) -> float:
    """A share (0 to 1) as a number on a percent axis."""
    return round(100 * x, 3)


def rules_figure_spec(curves: dict[str, Any], run_point: tuple[float, float] | None = None,
                      break_even: float | None = None, run_name: str = "this run") -> dict[str, Any]:
    """The rules' curves (x the big model's share, y agreement with its text, in %), `run_point` a star,
    `break_even` a dashed line; traces' `meta`: "curve", "run", "break_even"."""
    traces = []
    for name, curve in curves.items():
        rule_name = rulewords.plain_name(name)
        text = []
        for share, agreed, threshold in zip(curve.shares, curve.agreements, curve.thresholds):
            at = "" if threshold is None else f" at threshold {fmt_threshold(round(threshold, 4))}"
            text.append(html.escape(f"{rule_name}{at}: the big model writes {pct(share)} of the tokens; "
                                    f"{pct(agreed)} are the big model's own"))
        traces.append({"type": "scatter", "mode": "lines", "name": rule_name, "meta": "curve",
                       "x": [_as_percent(s) for s in curve.shares], "y": [_as_percent(a) for a in curve.agreements],
                       "text": text, "hovertemplate": "%{text}<extra></extra>", "line": {
                           "color": RULE_COLOURS.get(name, GREY), "width": 2.5}})
    lows = [a for c in curves.values() for a in c.agreements]
    if run_point is not None:
        lows.append(run_point[1])
        traces.append({"type": "scatter", "mode": "markers", "name": run_name, "meta": "run",
                       "x": [_as_percent(run_point[0])], "y": [_as_percent(run_point[1])],
                       "text": [html.escape(f"{run_name}: the big model wrote {pct(run_point[0])} of the tokens; "
                                            f"it would have written {pct(run_point[1])} of them itself")],
                       "hovertemplate": "%{text}<extra></extra>",
                       "marker": {"color": RED, "size": 13, "symbol": "star", "line": {"width": 1, "color": "#222"}}})
    bottom = max(-AXIS_PAD, 100 * min(lows, default=0.0) - AXIS_PAD)
    annotations = []
    if break_even is not None:
        x = _as_percent(min(max(break_even, 0.0), 1.0))
        traces.append({"type": "scatter", "mode": "lines", "name": BREAK_EVEN_NAME, "meta": "break_even",
                       "x": [x, x], "y": [bottom, 101], "hovertemplate": html.escape(
                           f"{BREAK_EVEN_NAME}: {pct(break_even)} by the big model") + "<extra></extra>",
                       "line": {"color": GREY, "dash": "dash", "width": 2}})
        annotations.append({"x": x, "y": 101, "xref": "x", "yref": "y", "text": BREAK_EVEN_LABEL,
                            "showarrow": False, "xanchor": "left" if x < 50 else "right", "yanchor": "bottom",
                            "font": {"size": 11}})
    return {
        "data": traces,
        # the axes padded past 0% and 100%, so that a star there is drawn whole
        "layout": _layout("Which rule decides best? (up and to the left is better)", 400, 50, annotations=annotations,
                          xaxis={"title": {"text": "tokens written by the big model (%)"},
                                 "range": [-AXIS_PAD, 100 + AXIS_PAD], "ticksuffix": "%", "zeroline": False},
                          yaxis={"title": {"text": "agreement with the big model's text (%)"},
                                 "range": [bottom, 100 + AXIS_PAD], "ticksuffix": "%"}),
    }


def rules_figure(curves: dict[str, Any], run_point: tuple[float, float] | None, break_even: float | None,
                 run_name: str):
    """The rules' curves as a `plotly.graph_objects.Figure`."""
    import plotly.graph_objects as go

    return go.Figure(rules_figure_spec(curves, run_point, break_even, run_name))
