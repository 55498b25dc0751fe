"""The page's colours and the small formatting every view of a run shares."""

from __future__ import annotations

import math

RED = "#c62828"  # the big model's tokens, in the text and on the chart
BLUE = "#3f6fb5"  # the small model's points on the chart (its text stays plain)
GREY = "#8a8a8a"
GREEN = "#1b7a34"  # text only in the big model's version, in a comparison
PURPLE = "#7b3fa0"  # tokens copied from earlier in the text (prompt lookup), in the text and on the chart
THRESHOLD_COLOUR = "#e07b00"
# Each deferral rule's colour wherever rules are drawn side by side (the page's curves, the bench's reports).
RULE_COLOURS = {"perplexity": THRESHOLD_COLOUR, "entropy": BLUE, "margin": PURPLE, "learned": GREEN}

SMALL, BIG = "the small model (draft)", "the big model (target)"
LOOKUP = "copied from earlier in the text (prompt lookup), checked by the big model"


def written_by(source: str) -> str:
    """Who wrote an output token, in words, from its event's `source`."""
    return {"draft": f"written by {SMALL}", "target": f"written by {BIG}", "lookup": LOOKUP}.get(source, source)


TEXT_STYLE = ("white-space:pre-wrap;word-break:break-word;line-height:1.6;font-size:1.02em;"
              "padding:10px 12px;border:1px solid rgba(128,128,128,.35);border-radius:8px;min-height:4em")


def fmt_ppl(ppl: float | None) -> str:
    if ppl is None:
        return "not scored"
    if not math.isfinite(ppl):
        return "too large to show"
    return f"{ppl:,.0f}" if ppl >= 100 else f"{ppl:.2f}" if ppl < 10 else f"{ppl:.1f}"


def fmt_threshold(threshold: float) -> str:
    return f"{threshold:g}"


def pct(x: float) -> str:
    """A share (0 to 1) as a whole percent: 0.314 → "31%"."""
    return f"{100 * x:.0f}%"


def visible(text: str) -> str:
    """A token's text as a label: quoted, with newlines and tabs drawn so they can be seen."""
    return "“" + text.replace("\n", "↵").replace("\t", "⇥") + "”"
