"""The per-token perplexity chart as a Plotly figure spec: one point per token, the threshold as a line.

A pure function of a run's `Routing`; hover labels carry model text, so they are escaped.
"""

from __future__ import annotations

import html
import math
from typing import Any

from ..analysis import Routing, Slot
from .style import (BLUE, GREY, PURPLE, RED, THRESHOLD_COLOUR, fmt_ppl, fmt_threshold, visible, whatif_words,
                    written_by)

_LOG_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000, 100_000, 1_000_000]


def _hover(slot: Slot, extra: str = "") -> str:
    t = slot.token
    lines = [f"position {t.position}: {visible(t.text)}", written_by(t.source)]
    if slot.routing_ppl is not None:
        which = "its own token" if not slot.by_target else f"its proposal {visible(slot.proposal.text)}"
        lines.append(f"small model's perplexity of {which}: {fmt_ppl(slot.routing_ppl)}")
    else:
        lines.append(f"the small model did not score this; big model's perplexity: {fmt_ppl(t.target_ppl)}")
    if extra:
        lines.append(extra)
    return "<br>".join(html.escape(line) for line in lines)


def _plotted_ppl(slot: Slot) -> float | None:
    # Where the draft scored nothing, the target's own perplexity stands in (drawn as a hollow mark),
    # so the chart still has one point per token.
    ppl = slot.routing_ppl if slot.routing_ppl is not None else slot.token.target_ppl
    return ppl if ppl is not None and math.isfinite(ppl) else None


def _points(name: str, chosen: list[Slot], color: str, symbol: str = "circle", extra=lambda s: "") -> dict:
    return {
        "type": "scatter", "mode": "markers", "name": name,
        "x": [s.token.position for s in chosen],
        "y": [_plotted_ppl(s) for s in chosen],
        "text": [_hover(s, extra(s)) for s in chosen],
        "hovertemplate": "%{text}<extra></extra>", "meta": "tokens",
        "marker": {"color": color, "size": 7, "symbol": symbol, "line": {"width": 1.5, "color": color}},
    }


def _line(name: str, y: float, span: tuple[float, float], color: str, dash: str) -> dict:
    return {"type": "scatter", "mode": "lines", "name": name, "x": list(span), "y": [y, y],
            "hovertemplate": html.escape(name) + "<extra></extra>",
            "line": {"color": color, "dash": dash, "width": 2.5}, "meta": "threshold"}


def _whatif_traces(scored: list[Slot], unscored: list[Slot], threshold: float) -> list[dict]:
    note = lambda s: whatif_words(s.routing_ppl, threshold, s.would_escalate(threshold))  # noqa: E731
    traces = [_points("what-if: would go to the big model", [s for s in scored if s.would_escalate(threshold)],
                      RED, extra=note),
              _points("what-if: would stay with the small model",
                      [s for s in scored if not s.would_escalate(threshold)], BLUE, extra=note)]
    if unscored:
        traces.append(_points("no what-if (not scored by the small model)", unscored, GREY, "diamond-open"))
    return traces


def _run_traces(scored: list[Slot], unscored: list[Slot]) -> list[dict]:
    traces = [_points("written by the small model", [s for s in scored if not s.by_target], BLUE),
              _points("written by the big model", [s for s in scored if s.by_target], RED)]
    by_target = [s for s in unscored if not s.by_lookup]
    if by_target:
        traces.append(_points("written by the big model; small model did not score it (big model's own "
                              "perplexity)", by_target, RED, "diamond-open"))
    copied = [s for s in unscored if s.by_lookup]
    if copied:
        traces.append(_points("copied from earlier in the text (prompt lookup; big model's perplexity)", copied,
                              PURPLE, "square-open"))
    return traces


def figure_spec(routing: Routing, run_threshold: float, threshold: float | None = None) -> dict[str, Any]:
    """The per-token perplexity chart as a Plotly figure dict (`plotly.graph_objects.Figure(spec)`).

    One point per output token at x = its position: the draft's perplexity of its own choice there,
    which is what the threshold is compared with. Coloured by who wrote the token, or, for a what-if
    threshold, by who would have. Threshold lines are traces whose `meta` is "threshold".
    """
    whatif = routing.whatif_threshold(run_threshold, threshold)
    scored = [s for s in routing.slots if s.routing_ppl is not None]
    unscored = [s for s in routing.slots if s.routing_ppl is None]
    span = (-0.5, max((s.token.position for s in routing.slots), default=0) + 0.5)
    if whatif is not None:
        traces = _whatif_traces(scored, unscored, whatif) + [
            _line(f"what-if threshold {fmt_threshold(whatif)}", whatif, span, THRESHOLD_COLOUR, "solid"),
            _line(f"this run's threshold {fmt_threshold(run_threshold)}", run_threshold, span, GREY, "dot")]
    else:
        traces = _run_traces(scored, unscored) + [
            _line(f"threshold {fmt_threshold(run_threshold)}", run_threshold, span, THRESHOLD_COLOUR, "dash")]
    traces = [t for t in traces if t["x"] or t["meta"] == "threshold"]  # no empty legend entries
    title = ("What-if: who would have written each token" if whatif is not None
             else "How unsure was the small model, token by token")
    return {
        "data": traces,
        "layout": {
            "title": {"text": title, "font": {"size": 15}, "x": 0.5, "xanchor": "center"},
            "height": 380,
            "margin": {"l": 60, "r": 10, "t": 40, "b": 45},
            "xaxis": {"title": {"text": "token position in the answer"}, "zeroline": False},
            "yaxis": {"title": {"text": "small model's perplexity (log scale)"}, "type": "log",
                      "tickvals": _LOG_TICKS, "ticktext": [f"{v:g}" for v in _LOG_TICKS]},
            "legend": {"orientation": "h", "y": -0.18, "font": {"size": 11}},
            "hovermode": "closest",
            "uirevision": "keep",  # keep the visitor's zoom while the chart updates
        },
    }


def perplexity_figure(routing: Routing, run_threshold: float, threshold: float | None = None):
    """The chart as a `plotly.graph_objects.Figure`."""
    import plotly.graph_objects as go

    return go.Figure(figure_spec(routing, run_threshold, threshold))
