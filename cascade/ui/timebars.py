"""Where a run's time went: a bar of this run's seconds by who spent them (`PARTS`) and the big model alone's bar,
measured by Compare or estimated (`segments`, the data; `figure`, the Plotly picture)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from ..engine.events import Summary
from .style import BLUE, GREY, RED

THIS_RUN, ALONE = "This run", "Big model alone"
LIGHT_RED = "#ef9a9a"  # the big model reading: its red, lighter
SCORING_COLOUR = "#d7ccc8"  # the scoring after the answer: light, apart from the run's own time
HEIGHT = 200


@dataclass(frozen=True)
class Part:
    """One kind of segment: its legend name, its colour, and what it counts, in words (the hover's)."""

    name: str
    colour: str
    means: str
    pattern: str = ""  # a Plotly fill pattern ("/": estimated)
    alone_means: str = ""  # what it counts in the big model alone's bar, where that differs


PARTS = {  # in the order segments stack, left to right
    "small": Part("small model", BLUE, "the small model reading and writing"),
    "reading": Part("big model reading", LIGHT_RED,
                    "the big model reading several tokens in one go: the prompt, and the small model's tokens it "
                    "checks or catches up on (each such read also writes the token after them)"),
    "writing": Part("big model writing", RED, "the big model writing one token at a time"),
    "big": Part("big model", RED, "the big model, reading and writing (this run did not record which was which)"),
    "choosing": Part("choosing", GREY,
                     "choosing which model writes each token, and keeping count: time outside both models",
                     alone_means="keeping count: time outside the model"),
    "scoring": Part("scoring, after", SCORING_COLOUR,
                    "the big model reading the finished answer to score it: after the answer, not part of its time"),
    "estimated": Part("estimated", RED,
                      "the big model alone, estimated from the speeds measured on this machine; press Compare to "
                      "measure it", "/"),
}


@dataclass(frozen=True)
class Segment:
    """Seconds of one bar spent one way (`part`, a key of PARTS)."""

    bar: str  # THIS_RUN or ALONE
    part: str
    seconds: float


def model_segments(bar: str, summary: Summary, with_small: bool = True) -> list[Segment]:
    """A run's own time (its wall_s) by who spent it: the small model, the big model reading and writing, the rest."""
    work = summary.work
    split = work.split("target")
    big = [Segment(bar, "big", work.target.seconds)] if split is None else [
        Segment(bar, "reading", split[0]), Segment(bar, "writing", split[1])]
    small = [Segment(bar, "small", work.draft.seconds)] if with_small else []
    return small + big + [Segment(bar, "choosing", summary.overhead_s)]


def segments(summary: Summary | None, comparison: Summary | None = None,
             estimate_s: float | None = None) -> list[Segment]:
    """This run's segments (the scoring last), then the big model alone's (measured, else estimated); [] without a
    Summary; segments of no time left out; no alone bar for a run of the big model alone."""
    if summary is None:
        return []
    found = model_segments(THIS_RUN, summary)
    if summary.quality is not None:
        found.append(Segment(THIS_RUN, "scoring", summary.quality.scoring_s))
    if summary.policy != "target":
        if comparison is not None:
            found += model_segments(ALONE, comparison, with_small=False)
        elif estimate_s is not None:
            found.append(Segment(ALONE, "estimated", estimate_s))
    return [s for s in found if s.seconds > 0]


def seconds_text(x: float) -> str:
    """Seconds as the summary writes them (6.4 s, 0.62 s), and 0.004 s below a hundredth."""
    return f"{x:.1f} s" if x >= 1 else f"{x:.2f} s" if x >= 0.01 else f"{x:.3f} s"


def _trace(part: str, found: list[Segment]) -> dict[str, Any]:
    """One stacked bar trace: `part`'s segments, one per bar, each hovering its seconds and what they count."""
    kind = PARTS[part]
    marker: dict[str, Any] = {"color": kind.colour, "line": {"width": 0}}
    if kind.pattern:
        marker["pattern"] = {"shape": kind.pattern, "fgcolor": "white", "solidity": 0.3}
    means = [kind.alone_means if s.bar == ALONE and kind.alone_means else kind.means for s in found]
    return {"type": "bar", "orientation": "h", "name": kind.name, "meta": part,
            "x": [s.seconds for s in found], "y": [s.bar for s in found], "marker": marker,
            "customdata": [[seconds_text(s.seconds), "<br>".join(textwrap.wrap(m, 60)), s.bar]
                           for s, m in zip(found, means)],
            "hovertemplate": f"%{{customdata[2]}}: {kind.name}, %{{customdata[0]}}<br>%{{customdata[1]}}"
                             "<extra></extra>"}


def _tick(bar: str, found: list[Segment]) -> str:
    """The bar's name and, under it, its own time: about, if estimated; the scoring after it not counted."""
    mine = [s for s in found if s.bar == bar]
    about = "about " if any(s.part == "estimated" for s in mine) else ""
    return f"{bar}<br>{about}{seconds_text(sum(s.seconds for s in mine if s.part != 'scoring'))}"


def figure_spec(summary: Summary | None, comparison: Summary | None = None,
                estimate_s: float | None = None) -> dict[str, Any] | None:
    """The picture as a Plotly figure spec (None without a Summary): stacked bars, this run on top, seconds across."""
    if summary is None:
        return None
    found = segments(summary, comparison, estimate_s)
    bars = list(dict.fromkeys(s.bar for s in found))
    traces = [_trace(part, [s for s in found if s.part == part]) for part in PARTS
              if any(s.part == part for s in found)]
    return {"data": traces, "layout": {
        "barmode": "stack", "height": HEIGHT, "bargap": 0.3, "hovermode": "closest",
        "title": {"text": "Where the time went", "font": {"size": 13}, "x": 0.01, "xanchor": "left", "y": 0.98,
                  "yanchor": "top"},
        "margin": {"l": 10, "r": 10, "t": 24, "b": 4}, "showlegend": True,
        "legend": {"orientation": "h", "y": -0.2, "yanchor": "top", "font": {"size": 11}, "traceorder": "normal",
                   "entrywidth": 0.5, "entrywidthmode": "fraction", "x": 0},
        "xaxis": {"ticksuffix": " s", "fixedrange": True, "automargin": True, "rangemode": "tozero"},
        "yaxis": {"categoryorder": "array", "categoryarray": bars, "autorange": "reversed", "fixedrange": True,
                  "automargin": True, "tickmode": "array", "tickvals": bars,
                  "ticktext": [_tick(bar, found) for bar in bars]}}}


def figure(summary: Summary | None, comparison: Summary | None = None, estimate_s: float | None = None):
    """`figure_spec` as a `plotly.graph_objects.Figure` (None without a Summary)."""
    import plotly.graph_objects as go

    spec = figure_spec(summary, comparison, estimate_s)
    return None if spec is None else go.Figure(spec)
