"""A run in sentences a non-programmer can read: the summary, a stopped run, and the comparison with
the big model alone (measured speeds side by side, then where the two texts differ, word by word)."""

from __future__ import annotations

import difflib
import html
import math
import re
from typing import Sequence

from ..engine.events import Summary, TokenEvent
from ..routing.rules import RULE_TABLE
from . import rulewords
from .style import GREEN, RED, TEXT_STYLE

_STOPS = {"eos": "the answer was complete", "max_tokens": "it reached the most tokens allowed",
          "stop_string": "it wrote a stop string", "context_full": "the context was full",
          "cancelled": "you pressed Stop"}


def _copied(n_lookup: int) -> str:
    return f", {n_lookup} {'was' if n_lookup == 1 else 'were'} copied from the text" if n_lookup else ""


def summary_sentence(summary: Summary) -> str:
    """One line a non-programmer can read: how much the big model did (and by which rule, when not the
    seed's perplexity), the measured speed, and how the big model reads the text."""
    n, t = summary.n_tokens, summary.n_target_tokens
    speed = f"{summary.tokens_per_s:.1f} tokens/s"
    if n == 0:
        return f"No tokens were written · {summary.wall_s:.1f} s"
    if summary.policy == "target":
        return f"The big model wrote all {n} tokens by itself · {speed}" + _quality(summary)
    copied = _copied(summary.n_lookup_tokens)
    rule = (f", judged by {rulewords.plain_name(summary.rule)}"
            if summary.rule in RULE_TABLE and summary.rule != "perplexity" else "")
    if t == 0:
        return f"0 of {n} tokens needed the big model{rule}{copied} · {speed}" + _quality(summary)
    return f"{t} of {n} tokens ({round(100 * t / n)}%) needed the big model{rule}{copied} · {speed}" + _quality(summary)


def _quality(summary: Summary) -> str:
    """How the big model reads the finished text: the share of tokens it would have written itself, and
    its perplexity of the text; nothing for a cancelled run or a value not measured."""
    if summary.stop_reason == "cancelled":
        return ""
    parts = []
    agreement = summary.target_agreement
    if agreement is not None and math.isfinite(agreement) and summary.policy != "target":
        parts.append(f"the big model would have written {agreement:.0%} of these tokens itself")
    ppl = summary.text_ppl_by_target
    if ppl is not None and math.isfinite(ppl):
        parts.append(f"the big model's perplexity of this text: {ppl:.1f}" if ppl < 100
                     else f"the big model's perplexity of this text: {ppl:,.0f}")
    return "".join(f" · {p}" for p in parts)


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
    if summary.n_lookup_proposed:
        parts.append(f"Prompt lookup proposed {summary.n_lookup_proposed} tokens copied from earlier in the text "
                     f"and the big model, checking them, kept {summary.n_lookup_tokens}.")
    return " ".join(parts)


def stopped_sentence(events: Sequence[TokenEvent]) -> str:
    """The summary of a run the visitor stopped: no Summary came, so count what was streamed."""
    accepted = [e for e in events if e.accepted]
    n, t = len(accepted), sum(e.source == "target" for e in accepted)
    if not accepted:
        return "Stopped before the first token."
    speed = n / accepted[-1].t if accepted[-1].t > 0 else 0.0
    share = f" ({round(100 * t / n)}%)" if n else ""
    copied = _copied(sum(e.source == "lookup" for e in accepted))
    return (f"Stopped after {n} tokens · {t} of {n}{share} needed the big model{copied} · {speed:.1f} tokens/s "
            f"until then")


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
             "insert": f"color:{GREEN};text-decoration:underline;background:rgba(27,122,52,.10)"}
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


def _table(rows: list[tuple[str, ...]]) -> str:
    """A small HTML table; the first row is the header. Cells are escaped."""
    cell = "padding:4px 12px;border-bottom:1px solid rgba(128,128,128,.3);text-align:left"
    body = "".join("<tr>" + "".join(f'<{tag} style="{cell}">{html.escape(c)}</{tag}>' for c in row) + "</tr>"
                   for tag, row in (("th" if i == 0 else "td", row) for i, row in enumerate(rows)))
    return f'<table style="border-collapse:collapse;margin-bottom:8px">{body}</table>'


def compare_html(run: Summary, alone: Summary) -> str:
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
        ("writing speed (after the first token)", speed(run.writing_tokens_per_s), speed(alone.writing_tokens_per_s)),
        ("tokens", str(run.n_tokens), str(alone.n_tokens)),
        ("time", f"{run.wall_s:.2f} s", f"{alone.wall_s:.2f} s"),
        ("written by the big model", f"{run.n_target_tokens} of {run.n_tokens}",
         f"{alone.n_tokens} of {alone.n_tokens}"),
    ] + ([("copied from the text (prompt lookup)", f"{run.n_lookup_tokens} of {run.n_tokens}", "–")]
         if run.n_lookup_proposed else []))
    if run.text == alone.text:
        diff = "<p>The two texts are <b>identical</b>.</p>"
    else:
        n = _differing_words(run.text, alone.text)
        diff = (f"<p>The texts differ ({n} words changed). "
                f'<del style="color:{RED}">Struck through</del>: only in this run; '
                f'<ins style="color:{GREEN}">underlined</ins>: only in the big model\'s text.</p>'
                f'<div class="cascade-diff" style="{TEXT_STYLE}">{diff_html(run.text, alone.text)}</div>')
    return (f'<div class="cascade-compare">{table}'
            f"<p><b>{html.escape(verdict)}</b> The two runs ran one after the other on the same machine; other "
            f"work on it shifts both numbers.</p>{diff}</div>")


# ---- which rule decides best ---------------------------------------------------------------------

def _share(x: float) -> str:
    """A share as a person reads it: 31%, under 1%, 0%."""
    return "under 1%" if 0 < x < 0.005 else f"{100 * x:.0f}%"


def _pays(break_even: float) -> str:
    if break_even >= 1:
        return "on this machine sharing pays at any share"
    if break_even <= 0:
        return "on this machine sharing never pays: the big model alone is faster"
    return f"on this machine sharing pays only below {_share(break_even)}"


def rules_sentence(curves: dict, break_even: float | None, agreement: float = 0.95) -> str:
    """One sentence over the rules' curves (`teacher.Curve`): the share of tokens each rule gives the big
    model to agree with it on `agreement` of them, and below which share sharing pays on this machine."""
    goal = _share(agreement)
    if not curves:
        return "There is no curve to draw: the big model wrote no token for this request."
    clauses, said = [], False
    for name, curve in curves.items():
        who = rulewords.plain_name(name, short=True)
        share = curve.share_at(agreement)
        if share is None:
            clauses.append(f"{who} never reaches {goal} here")
        elif not said:
            clauses.append(f"{who} needs it for {_share(share)} of them")
            said = True
        else:
            clauses.append(f"{who} for {_share(share)}")
    listed = ", ".join(clauses)
    tail = "" if break_even is None else f"; {_pays(break_even)}"
    return f"To match the big model on {goal} of tokens, {listed}{tail}."


RULES_HOW = ("Each curve comes from the big model's own text for this prompt (the one just compared), read "
             "once by the small model: at every token, would the rule have handed it to the big model, and "
             "would the small model have written the big model's token anyway? Sweeping a rule's threshold "
             "trades the share of tokens the big model writes (across) against the share of the text that "
             "is the big model's own (up). The star is this run, as it really went.")


def break_even_sentence(summary: Summary, break_even: float | None) -> str | None:
    """Whether this run's big-model share was under the break-even for this machine (the largest share
    at which cascade beats the big model alone, from measured costs); None when there is nothing to say
    (no break-even measured, or a run whose big-model share means something else than cascade's)."""
    if break_even is None or summary.n_tokens == 0 or summary.policy not in ("cascade", "bild"):
        return None
    share = summary.target_share
    limit = _share(min(max(break_even, 0.0), 1.0))
    if share < break_even:
        return (f"This run gave the big model {_share(share)} of the tokens, under the break-even for this machine "
                f"({limit}): by the costs measured here, sharing the work pays at this share.")
    return (f"This run gave the big model {_share(share)} of the tokens, not under the break-even for this machine "
            f"({limit}): by the costs measured here, the big model alone would be as fast or faster.")
