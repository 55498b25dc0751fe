"""Where sharing pays: the big model's size against the speed of writing together over the big model alone, at
one share (rows as `python -m cascade where-it-pays` writes them; the shipped map is the reference machine's)."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Sequence

from .controls import PAGE_START
from .style import BLUE, GREY, RED

SHIPPED = Path(__file__).resolve().parent.parent / "results" / "where-it-pays-cpu.json"
PAGE_BUDGET = PAGE_START.budget or 0.1  # the share the page starts at


def load_map(path: Path = SHIPPED) -> dict[str, Any] | None:
    """A where-it-pays results file, or None when there is none (or it cannot be read)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _at(rows: Sequence[dict], budget: float) -> list[dict]:
    return sorted((r for r in rows if r["policy"] == "cascade" and r["budget"] is not None
                   and abs(r["budget"] - budget) < 1e-9), key=lambda r: r["params_b"])


def _trace(name: str, rows: list[dict], key: str, symbol: str, color: str, how: str) -> dict:
    return {"type": "scatter", "mode": "markers+lines" if len(rows) > 1 else "markers", "name": name,
            "x": [r["params_b"] for r in rows], "y": [r[key] for r in rows],
            "text": [html.escape(f"{r['target']} big model "
                                 f"({'stand-in: its speed, not its text' if r['stand_in'] else 'real weights'}): "
                                 f"{how} {r[key]:.2f}× the big model alone") for r in rows],
            "hovertemplate": "%{text}<extra></extra>",
            "line": {"color": color, "dash": "dot" if key == "predicted_vs_target" else "solid", "width": 1.5},
            "marker": {"symbol": symbol, "size": 11, "color": color, "line": {"width": 1.5, "color": color}}}


def map_figure_spec(rows: Sequence[dict], budget: float = PAGE_BUDGET,
                    own: tuple[float, float, str] | None = None) -> dict[str, Any]:
    """x: the big model's size (billions of parameters, log); y: speed of sharing over the big model alone.
    Measured points are filled, predicted ones open; a stand-in's measured point is a diamond. `own`: this
    page's pair, (size, speed, label), a star."""
    at = _at(rows, budget)
    traces = []
    for stand_in, symbol in ((False, "circle"), (True, "diamond")):
        measured = [r for r in at if r["stand_in"] == stand_in and r["measured_vs_target"] is not None]
        if measured:
            traces.append(_trace(f"measured ({'stand-in' if stand_in else 'real weights'})", measured,
                                 "measured_vs_target", symbol, BLUE, "measured"))
    predicted = [r for r in at if r["predicted_vs_target"] is not None]
    if predicted:
        traces.append(_trace("predicted (cost model)", predicted, "predicted_vs_target", "circle-open", GREY,
                             "predicted"))
    xs = [r["params_b"] for r in at] + ([own[0]] if own else [])
    span = (min(xs, default=1.0) / 1.4, max(xs, default=10.0) * 1.4)
    traces.append({"type": "scatter", "mode": "lines", "name": "as fast as the big model alone", "x": list(span),
                   "y": [1, 1], "hoverinfo": "skip", "line": {"color": RED, "dash": "dash", "width": 1.5}})
    if own is not None:
        traces.append({"type": "scatter", "mode": "markers", "name": own[2], "x": [own[0]], "y": [own[1]],
                       "text": [html.escape(f"{own[2]}: {own[1]:.2f}× the big model alone")],
                       "hovertemplate": "%{text}<extra></extra>",
                       "marker": {"symbol": "star", "size": 15, "color": RED, "line": {"width": 1, "color": "#222"}}})
    return {"data": traces, "layout": {
        "title": {"text": f"The big model writes {budget:.0%}", "font": {"size": 14}, "x": 0.5, "xanchor": "center"},
        "height": 380, "margin": {"l": 55, "r": 10, "t": 40, "b": 60},
        "xaxis": {"title": {"text": "big model (billions of parameters)"}, "type": "log", "tickangle": 0,
                  "tickvals": [1.5, 3, 7, 14], "ticktext": ["1.5B", "3B", "7B", "14B"],
                  "range": [math.log10(x) for x in span]},
        "yaxis": {"title": {"text": "speed over the big model alone"}, "ticksuffix": "×", "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.3, "yanchor": "top", "font": {"size": 11}}, "hovermode": "closest"}}


def map_figure(rows: Sequence[dict], budget: float = PAGE_BUDGET, own: tuple[float, float, str] | None = None):
    """`map_figure_spec` as a `plotly.graph_objects.Figure`."""
    import plotly.graph_objects as go

    return go.Figure(map_figure_spec(rows, budget, own))


def map_words(data: dict[str, Any], budget: float = PAGE_BUDGET) -> str:
    """The map in sentences a visitor can follow: what a point means, and what was measured where."""
    at = _at(data.get("rows", []), budget)
    if not at:
        return ""
    machine = data.get("machine", {})
    where = f"{machine.get('cpu', 'a CPU')}, {machine.get('threads', '?')} threads"
    stand_ins = [r["target"] for r in at if r["stand_in"]]
    said = (f" The {', '.join(stand_ins)} point{'s' if len(stand_ins) > 1 else ''} used a stand-in: a file of the "
            "real model's shape with random weights, so its speed is real and its text is not.") if stand_ins else ""
    return (f"Each point is how fast the small and a big model write together when the big model writes "
            f"{budget:.0%} of the tokens, against that big model writing alone: above the red line, sharing "
            f"saves time. Measured on {where} ({data.get('date', '')[:10]}).{said} "
            f"{(data.get('sentence') or '').replace('On this machine', 'On that machine', 1)}").strip()


OWN_LABEL = "this page's pair (predicted)"  # the guide says from what


def pair_point(engine: Any, budget: float = PAGE_BUDGET) -> tuple[float, float] | None:
    """The engine's pair on the map: its big model's size and cascade's predicted speed at `budget`, from the
    costs `auto` measured (None before they are measured, or for an engine without them)."""
    try:
        speed = engine.cascade_speed(budget)
        return None if speed is None else (engine.pair.target_params_b, speed)
    except AttributeError:
        return None


def map_update(point: tuple[float, float] | None, data: dict[str, Any] | None = None):
    """The map as the page draws it (the shipped one unless `data`), with the page's pair as a star; None if no map."""
    data = load_map() if data is None else data
    if data is None:
        return None
    own = None if point is None else (point[0], point[1], OWN_LABEL)
    return map_figure(data.get("rows", []), own=own)

