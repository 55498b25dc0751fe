"""Engine events rendered for the page: coloured text, the perplexity chart, the what-if, the summary.

Pure functions from recorded `TokenEvent`s (and a `Summary`) to HTML strings and Plotly figure specs;
nothing here knows Gradio or runs a model, so every picture the page shows can be tested as a value.

Everything a model wrote is untrusted text: it is escaped (`html.escape`) before it goes into HTML,
into an attribute, or into a chart's hover label.
"""

from __future__ import annotations

import difflib
import html
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .events import Summary, TokenEvent

RED = "#c62828"  # the big model's tokens, in the text and on the chart
BLUE = "#3f6fb5"  # the small model's points on the chart (its text stays plain)
GREY = "#8a8a8a"
THRESHOLD_COLOUR = "#e07b00"

SMALL, BIG = "the small model (draft)", "the big model (target)"


# ---- positions of the output ------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """One position of the output: the token written there, and what the draft had proposed there.

    `proposal` is the draft's own token at this position when the target wrote it instead (escalated,
    rejected or rolled back); None where the draft's token was kept or the draft proposed nothing.
    """

    token: TokenEvent
    proposal: TokenEvent | None

    @property
    def by_target(self) -> bool:
        return self.token.source == "target"

    @property
    def routing_ppl(self) -> float | None:
        """The draft's perplexity of its own choice here: the number the threshold is compared with.

        None where the draft never scored a token of its own (the `target` policy, or the extra token
        the target adds after accepting a whole speculative batch).
        """
        if not self.by_target:
            return self.token.draft_ppl
        return self.proposal.draft_ppl if self.proposal is not None else None


def slots(events: Iterable[TokenEvent]) -> list[Slot]:
    """The accepted tokens in order, each paired with the draft's discarded proposal at its position.

    A discarded draft token comes before the target's token for its position, so the latest discard
    at that position since the previous accepted token is the draft's proposal there; discards at
    later positions (the rest of a rejected speculative batch) are stale once a token is accepted.
    """
    out: list[Slot] = []
    discarded: dict[int, TokenEvent] = {}
    for event in events:
        if not event.accepted:
            discarded[event.position] = event
            continue
        proposal = discarded.get(event.position) if event.source == "target" else None
        out.append(Slot(event, proposal))
        discarded.clear()
    return out


def would_escalate(slot: Slot, threshold: float) -> bool | None:
    """What-if: would the draft's recorded perplexity here send this position to the target?"""
    ppl = slot.routing_ppl
    return None if ppl is None else ppl > threshold


# ---- small formatting helpers -----------------------------------------------------------------

def fmt_ppl(ppl: float | None) -> str:
    if ppl is None:
        return "not scored"
    if not math.isfinite(ppl):
        return "too large to show"
    return f"{ppl:,.0f}" if ppl >= 100 else f"{ppl:.2f}" if ppl < 10 else f"{ppl:.1f}"


def fmt_threshold(threshold: float) -> str:
    return f"{threshold:g}"


def visible(text: str) -> str:
    """A token's text as a label: quoted, with newlines and tabs drawn so they can be seen."""
    return "“" + text.replace("\n", "↵").replace("\t", "⇥") + "”"


_STATUS_WORDS = {
    "escalated": "was unsure of it (above the threshold), so the big model wrote this position",
    "rejected": "the big model checked it and rejected it",
    "rolled_back": "the big model checked it and rolled it back",
}


# ---- the text -----------------------------------------------------------------------------------

_TEXT_STYLE = ("white-space:pre-wrap;word-break:break-word;line-height:1.6;font-size:1.02em;"
               "padding:10px 12px;border:1px solid rgba(128,128,128,.35);border-radius:8px;min-height:4em")
_RED_STYLE = f"color:{RED};font-weight:600;background:rgba(198,40,40,.08);border-radius:3px"
_WHATIF_RED_STYLE = _RED_STYLE + f";text-decoration:underline dotted {RED}"
_DISCARD_STYLE = f"color:{GREY};text-decoration:line-through;font-size:.92em"
_NO_WHATIF_STYLE = f"color:{GREY}"


def token_title(slot: Slot) -> str:
    """The hover text of one output token: who wrote it and how sure each model was."""
    t = slot.token
    lines = [f"{visible(t.text)} at position {t.position}, written by {BIG if slot.by_target else SMALL}"]
    if slot.by_target:
        lines.append(f"big model's perplexity of this token: {fmt_ppl(t.target_ppl)}")
        if t.draft_ppl is not None:
            lines.append(f"small model's perplexity of this token: {fmt_ppl(t.draft_ppl)}")
        if slot.proposal is not None:
            p = slot.proposal
            lines.append(f"the small model had proposed {visible(p.text)} (its perplexity {fmt_ppl(p.draft_ppl)}) "
                         f"but {_STATUS_WORDS[p.status]}")
        else:
            lines.append("the small model proposed nothing here")
    else:
        lines.append(f"small model's perplexity of its own token: {fmt_ppl(t.draft_ppl)}")
        if t.target_ppl is not None:
            lines.append(f"big model's perplexity of it (it checked it): {fmt_ppl(t.target_ppl)}")
    return "\n".join(lines)


def _span(text: str, title: str, cls: str, style: str = "") -> str:
    style_attr = f' style="{style}"' if style else ""
    return f'<span class="{cls}" title="{html.escape(title)}"{style_attr}>{html.escape(text)}</span>'


def _discarded(event: TokenEvent) -> str:
    title = (f"{visible(event.text)}: drafted by the small model (perplexity {fmt_ppl(event.draft_ppl)}), "
             f"then {'rejected' if event.status == 'rejected' else 'rolled back'} by the big model "
             f"(its perplexity {fmt_ppl(event.target_ppl)}); not part of the text")
    return (f'<s class="tok discarded" title="{html.escape(title)}" style="{_DISCARD_STYLE}">'
            f"{html.escape(event.text)}</s>")


def tokens_html(events: Sequence[TokenEvent], whatif: float | None = None) -> str:
    """The generated text, one span per token, red where the target wrote it.

    Rejected and rolled-back draft tokens stay in the text, struck through, where they were drafted.
    Escalated draft tokens are not shown inline (a cascade escalates often and the text would become
    hard to read): the red token that replaced one says in its hover what the draft had proposed.

    With `whatif`, red instead marks the positions whose recorded draft perplexity is above that
    threshold; positions the draft never scored are grey.
    """
    parts: list[str] = []
    slot_of = {id(s.token): s for s in slots(events)}
    for event in events:
        if event.status in ("rejected", "rolled_back"):
            parts.append(_discarded(event))
            continue
        if not event.accepted or not event.text:
            continue  # escalated: told in the hover; empty: half a character, completed by the next token
        slot = slot_of[id(event)]
        title = token_title(slot)
        if whatif is None:
            cls, style = ("tok red target", _RED_STYLE) if slot.by_target else ("tok draft", "")
        else:
            verdict = would_escalate(slot, whatif)
            title += "\n" + _whatif_words(slot, whatif, verdict)
            if verdict is None:
                cls, style = "tok nowhatif", _NO_WHATIF_STYLE
            elif verdict:
                cls, style = "tok red whatif-target", _WHATIF_RED_STYLE
            else:
                cls, style = "tok whatif-draft", ""
        parts.append(_span(event.text, title, cls, style))
    return "".join(parts)


def _whatif_words(slot: Slot, threshold: float, verdict: bool | None) -> str:
    if verdict is None:
        return "what-if: none here (the small model did not score this position)"
    side = "above" if verdict else "not above"
    who = "the big model" if verdict else "the small model"
    return (f"what-if at threshold {fmt_threshold(threshold)}: the small model's perplexity "
            f"{fmt_ppl(slot.routing_ppl)} is {side} it, so {who} would have written this position")


def legend_html(whatif: bool) -> str:
    red = f'<span style="{_RED_STYLE}">red</span>'
    struck = f'<s style="{_DISCARD_STYLE}">struck through</s>'
    if whatif:
        return (f"{red} = <b>would</b> have gone to the big model at the what-if threshold · plain = would have "
                f"stayed with the small model · <span style=\"{_NO_WHATIF_STYLE}\">grey</span> = no what-if "
                f"(the small model did not score it) · {struck} = refused by the big model in the real run")
    return (f"{red} = written by the big model · plain = written by the small model · {struck} = drafted by "
            f"the small model, then refused by the big model · hover a token for details")


def text_panel(events: Sequence[TokenEvent], *, run_threshold: float, threshold: float | None = None,
               note: str = "") -> str:
    """The whole text box: a legend, the what-if banner when the threshold differs from the run's,
    and the tokens."""
    whatif = threshold is not None and threshold != run_threshold and has_whatif(events)
    banner = whatif_banner(events, run_threshold, threshold) if threshold is not None and threshold != run_threshold \
        else ""
    body = tokens_html(events, whatif=threshold if whatif else None)
    view = "whatif" if whatif else "run"
    note_html = f'<div class="note" style="color:{GREY}">{html.escape(note)}</div>' if note else ""
    return (f'<div class="cascade-output" data-view="{view}">'
            f'<div class="legend" style="font-size:.85em;margin-bottom:6px">{legend_html(whatif)}</div>'
            f"{banner}"
            f'<div class="cascade-text" style="{_TEXT_STYLE}">{body}</div>{note_html}</div>')


def message_panel(message: str, kind: str = "info") -> str:
    """A plain message in the text box's place: an error, or what to do first."""
    colour = RED if kind == "error" else GREY
    return (f'<div class="cascade-output cascade-message" data-kind="{kind}" style="{_TEXT_STYLE};min-height:8em;'
            f'border-color:{colour};color:{colour if kind == "error" else "inherit"}">{html.escape(message)}</div>')


# ---- the what-if --------------------------------------------------------------------------------

def has_whatif(events: Sequence[TokenEvent]) -> bool:
    return any(s.routing_ppl is not None for s in slots(events))


def whatif_counts(events: Sequence[TokenEvent], threshold: float) -> tuple[int, int, int]:
    """(positions that would go to the target, positions the draft scored, all positions)."""
    all_slots = slots(events)
    verdicts = [would_escalate(s, threshold) for s in all_slots]
    return sum(v is True for v in verdicts), sum(v is not None for v in verdicts), len(all_slots)


def whatif_banner(events: Sequence[TokenEvent], run_threshold: float, threshold: float) -> str:
    style = ("padding:6px 10px;margin-bottom:6px;border-radius:6px;border:1px dashed #b26a00;"
             "background:rgba(255,170,0,.10);font-size:.92em")
    if not has_whatif(events):
        text = ("No what-if for this run: the small model did not score these tokens (the big model wrote "
                "them all). Generate with another policy to see one.")
        return f'<div class="whatif-banner" style="{style}">{html.escape(text)}</div>'
    would, scored, total = whatif_counts(events, threshold)
    actual = sum(s.by_target for s in slots(events))
    text = (f"At threshold {fmt_threshold(threshold)} (this run used {fmt_threshold(run_threshold)}), "
            f"{would} of {scored} tokens would have gone to the big model, against {actual} of {total} in the "
            f"real run. This re-reads the perplexities the small model recorded in this run; nothing was "
            f"regenerated, and after the first changed token a real run would write different text. "
            f"Press Generate to run at this threshold.")
    return f'<div class="whatif-banner" style="{style}"><b>What-if.</b> {html.escape(text)}</div>'


# ---- the chart ----------------------------------------------------------------------------------

def _hover(slot: Slot, extra: str = "") -> str:
    t = slot.token
    lines = [f"position {t.position}: {visible(t.text)}", f"written by {BIG if slot.by_target else SMALL}"]
    if slot.routing_ppl is not None:
        which = "its own token" if not slot.by_target else f"its proposal {visible(slot.proposal.text)}"
        lines.append(f"small model's perplexity of {which}: {fmt_ppl(slot.routing_ppl)}")
    else:
        lines.append(f"the small model did not score this; big model's perplexity: {fmt_ppl(t.target_ppl)}")
    if extra:
        lines.append(extra)
    return "<br>".join(html.escape(line) for line in lines)


def _points(name: str, chosen: list[Slot], color: str, symbol: str = "circle", extra=lambda s: "") -> dict:
    return {
        "type": "scatter", "mode": "markers", "name": name,
        "x": [s.token.position for s in chosen],
        "y": [_plotted_ppl(s) for s in chosen],
        "text": [_hover(s, extra(s)) for s in chosen],
        "hovertemplate": "%{text}<extra></extra>", "meta": "tokens",
        "marker": {"color": color, "size": 7, "symbol": symbol,
                   "line": {"width": 1.5, "color": color}},
    }


def _plotted_ppl(slot: Slot) -> float | None:
    # Where the draft scored nothing, the target's own perplexity stands in (drawn as a hollow mark),
    # so the chart still has one point per token.
    ppl = slot.routing_ppl if slot.routing_ppl is not None else slot.token.target_ppl
    return ppl if ppl is not None and math.isfinite(ppl) else None


def _line(name: str, y: float, span: tuple[float, float], color: str, dash: str) -> dict:
    return {"type": "scatter", "mode": "lines", "name": name, "x": list(span), "y": [y, y],
            "hovertemplate": html.escape(name) + "<extra></extra>",
            "line": {"color": color, "dash": dash, "width": 2.5}, "meta": "threshold"}


_LOG_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000, 100_000, 1_000_000]


def figure_spec(events: Sequence[TokenEvent], run_threshold: float, threshold: float | None = None) -> dict[str, Any]:
    """The per-token perplexity chart as a Plotly figure dict (`plotly.graph_objects.Figure(spec)`).

    One point per output token at x = its position: the draft's perplexity of its own choice there,
    which is what the threshold is compared with. Coloured by who wrote the token, or, for a what-if
    threshold, by who would have. Threshold lines are traces whose `meta` is "threshold".
    """
    all_slots = slots(events)
    whatif = threshold is not None and threshold != run_threshold and any(s.routing_ppl is not None for s in all_slots)
    scored = [s for s in all_slots if s.routing_ppl is not None]
    unscored = [s for s in all_slots if s.routing_ppl is None]
    traces: list[dict] = []
    if whatif:
        up = [s for s in scored if would_escalate(s, threshold)]
        down = [s for s in scored if not would_escalate(s, threshold)]
        note = lambda s: _whatif_words(s, threshold, would_escalate(s, threshold))  # noqa: E731
        traces += [_points("what-if: would go to the big model", up, RED, extra=note),
                   _points("what-if: would stay with the small model", down, BLUE, extra=note)]
        if unscored:
            traces.append(_points("no what-if (not scored by the small model)", unscored, GREY, "diamond-open"))
    else:
        traces += [_points("written by the small model", [s for s in scored if not s.by_target], BLUE),
                   _points("written by the big model", [s for s in scored if s.by_target], RED)]
        if unscored:
            traces.append(_points("written by the big model; small model did not score it (big model's own "
                                  "perplexity)", unscored, RED, "diamond-open"))
    span = (-0.5, max((s.token.position for s in all_slots), default=0) + 0.5)
    if whatif:
        traces.append(_line(f"what-if threshold {fmt_threshold(threshold)}", threshold, span,
                            THRESHOLD_COLOUR, "solid"))
        traces.append(_line(f"this run's threshold {fmt_threshold(run_threshold)}", run_threshold, span, GREY, "dot"))
    else:
        traces.append(_line(f"threshold {fmt_threshold(run_threshold)}", run_threshold, span, THRESHOLD_COLOUR, "dash"))
    traces = [t for t in traces if t["x"] or t["meta"] == "threshold"]  # no empty legend entries
    title = ("What-if: who would have written each token" if whatif
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


def perplexity_figure(events: Sequence[TokenEvent], run_threshold: float, threshold: float | None = None):
    """The chart as a `plotly.graph_objects.Figure`."""
    import plotly.graph_objects as go

    return go.Figure(figure_spec(events, run_threshold, threshold))


# ---- the summary --------------------------------------------------------------------------------

_STOPS = {"eos": "the answer was complete", "max_tokens": "it reached the most tokens allowed",
          "stop_string": "it wrote a stop string", "context_full": "the context was full",
          "cancelled": "you pressed Stop"}


def summary_sentence(summary: Summary) -> str:
    """One line a non-programmer can read: how much the big model did, and the measured speed."""
    n, t = summary.n_tokens, summary.n_target_tokens
    speed = f"{summary.tokens_per_s:.1f} tokens/s"
    if n == 0:
        return f"No tokens were written · {summary.wall_s:.1f} s"
    if summary.policy == "target":
        return f"The big model wrote all {n} tokens by itself · {speed}"
    if t == 0:
        return f"0 of {n} tokens needed the big model · {speed}"
    return f"{t} of {n} tokens ({round(100 * t / n)}%) needed the big model · {speed}"


def summary_details(summary: Summary) -> str:
    """The measured facts behind the sentence, in plain words."""
    parts = [f"{summary.n_tokens} tokens in {summary.wall_s:.2f} s, measured on this machine (reading the "
             f"prompt included); it stopped because {_STOPS.get(summary.stop_reason, summary.stop_reason)}."]
    if summary.n_drafted:
        kept = f"The small model proposed {summary.n_drafted} tokens and {summary.n_draft_tokens} were kept"
        why = [f"{summary.n_escalated} it was unsure of" if summary.n_escalated else "",
               f"{summary.n_rejected} the big model rejected" if summary.n_rejected else "",
               f"{summary.n_rolled_back} the big model rolled back" if summary.n_rolled_back else ""]
        why = [w for w in why if w]
        parts.append(kept + (" (the others: " + ", ".join(why) + ")." if why else "."))
    return " ".join(parts)


def stopped_sentence(events: Sequence[TokenEvent]) -> str:
    """The summary of a run the visitor stopped: no Summary came, so count what was streamed."""
    accepted = [e for e in events if e.accepted]
    n, t = len(accepted), sum(e.source == "target" for e in accepted)
    if not accepted:
        return "Stopped before the first token."
    speed = n / accepted[-1].t if accepted[-1].t > 0 else 0.0
    share = f" ({round(100 * t / n)}%)" if n else ""
    return f"Stopped after {n} tokens · {t} of {n}{share} needed the big model · {speed:.1f} tokens/s until then"


# ---- comparing with the target alone -------------------------------------------------------------

def word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """Word-level differences from text `a` to text `b` as (op, text) pieces, op in equal/delete/insert.

    Whitespace runs are pieces of their own, so the joined "equal"+"delete" pieces give `a` back and
    "equal"+"insert" give `b`.
    """
    wa, wb = re.findall(r"\s+|\S+", a), re.findall(r"\s+|\S+", b)
    pieces: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
        if op == "equal":
            pieces.append(("equal", "".join(wa[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(("delete", "".join(wa[i1:i2])))
        if j2 > j1:
            pieces.append(("insert", "".join(wb[j1:j2])))
    return pieces


def diff_html(a: str, b: str) -> str:
    style = {"delete": f"color:{RED};text-decoration:line-through;background:rgba(198,40,40,.08)",
             "insert": "color:#1b7a34;text-decoration:underline;background:rgba(27,122,52,.10)"}
    tag = {"delete": "del", "insert": "ins"}
    out = []
    for op, text in word_diff(a, b):
        if op == "equal":
            out.append(html.escape(text))
        else:
            out.append(f'<{tag[op]} class="diff-{op}" style="{style[op]}">{html.escape(text)}</{tag[op]}>')
    return "".join(out)


def _differing_words(a: str, b: str) -> int:
    return sum(len(text.split()) for op, text in word_diff(a, b) if op != "equal")


def writing_speed(events: Sequence[TokenEvent]) -> float | None:
    """Tokens per second after the first token: the speed of writing, without reading the prompt."""
    accepted = [e for e in events if e.accepted]
    if len(accepted) < 2 or accepted[-1].t <= accepted[0].t:
        return None
    return (len(accepted) - 1) / (accepted[-1].t - accepted[0].t)


def _table(rows: list[tuple[str, ...]]) -> str:
    """A small HTML table; the first row is the header. Cells are escaped."""
    cell = "padding:4px 12px;border-bottom:1px solid rgba(128,128,128,.3);text-align:left"
    body = "".join("<tr>" + "".join(f'<{tag} style="{cell}">{html.escape(c)}</{tag}>' for c in row) + "</tr>"
                   for tag, row in (("th" if i == 0 else "td", row) for i, row in enumerate(rows)))
    return f'<table style="border-collapse:collapse;margin-bottom:8px">{body}</table>'


def compare_html(run: Summary, alone: Summary, run_events: Sequence[TokenEvent] = (),
                 alone_events: Sequence[TokenEvent] = ()) -> str:
    """This run and the target alone, side by side: measured speeds, then where the texts differ."""
    ratio = run.tokens_per_s / alone.tokens_per_s if alone.tokens_per_s > 0 else None
    if ratio is None:
        verdict = "The big model alone wrote nothing, so there is no speed to compare."
    elif ratio >= 1:
        verdict = f"Measured just now, this run was {ratio:.2f}× as fast as the big model alone."
    else:
        verdict = (f"Measured just now, this run was slower than the big model alone "
                   f"({ratio:.2f}× its speed): on this machine the small model's help cost more than it saved.")
    lengths = sorted((run.n_tokens, alone.n_tokens))
    if lengths[0] and lengths[1] > 1.5 * lengths[0]:
        verdict += (f" The texts differ in length ({run.n_tokens} and {alone.n_tokens} tokens) and reading the "
                    f"prompt weighs more on a short one: the writing speeds compare more fairly.")
    speed = lambda v: f"{v:.1f} tokens/s" if v else "–"  # noqa: E731
    table = _table([
        ("", f"this run ({run.policy})", "big model alone"),
        ("speed (from pressing Generate)", speed(run.tokens_per_s), speed(alone.tokens_per_s)),
        ("writing speed (after the first token)", speed(writing_speed(run_events)), speed(writing_speed(alone_events))),
        ("tokens", str(run.n_tokens), str(alone.n_tokens)),
        ("time", f"{run.wall_s:.2f} s", f"{alone.wall_s:.2f} s"),
        ("written by the big model", f"{run.n_target_tokens} of {run.n_tokens}",
         f"{alone.n_tokens} of {alone.n_tokens}"),
    ])
    if run.text == alone.text:
        diff = "<p>The two texts are <b>identical</b>.</p>"
    else:
        n = _differing_words(run.text, alone.text)
        diff = (f"<p>The texts differ ({n} words changed). "
                f'<del style="color:{RED}">Struck through</del>: only in this run; '
                f'<ins style="color:#1b7a34">underlined</ins>: only in the big model\'s text.</p>'
                f'<div class="cascade-diff" style="{_TEXT_STYLE}">{diff_html(run.text, alone.text)}</div>')
    return (f'<div class="cascade-compare">{table}'
            f"<p><b>{html.escape(verdict)}</b> The two runs ran one after the other on the same machine; other "
            f"work on it shifts both numbers.</p>{diff}</div>")
