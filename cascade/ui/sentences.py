"""A run in sentences a non-programmer can read: its summary, a stopped run, the comparison with the big
model alone, the rules' curves. Every speed says what it counts (`COUNTED`)."""

from __future__ import annotations

import html
import math
from typing import Sequence

from ..engine.events import Summary, TokenEvent
from ..routing.rules import RULE_TABLE
from . import rulewords
from .diff import comparison_diff
from .style import pct

_STOPS = {"eos": "the answer was complete", "max_tokens": "it reached the most tokens allowed",
          "stop_string": "it wrote a stop string", "context_full": "the context was full",
          "cancelled": "you pressed Stop"}

COUNTED = "generation, reading the prompt included; the scoring after it apart"


def _copied(n_lookup: int) -> str:
    return f", and {n_lookup} {'was' if n_lookup == 1 else 'were'} copied from the text (purple)" if n_lookup else ""


def _seconds(x: float) -> str:
    """A time as a person reads it: 0.62 s, 6.4 s, 12.3 s."""
    return f"{x:.2f} s" if x < 1 else f"{x:.1f} s"


def summary_sentence(summary: Summary, alone_s: float | None = None, measured: bool = False,
                     alone_tokens: int | None = None) -> str:
    """The first line: the big model's tokens and time, beside the big model alone's `alone_s` if given."""
    n, t = summary.counts.n_tokens, summary.counts.n_target_tokens
    if n == 0:
        return f"No tokens were written ({_seconds(summary.timings.wall_s)})."
    if summary.policy == "target":
        return (f"The big model wrote all {n} tokens itself (red): this was the big model alone. It took "
                f"{_seconds(summary.timings.wall_s)}.")
    copied = _copied(summary.counts.n_lookup_tokens)
    asked = f" (you asked for {rulewords.share(summary.budget.share)})" if summary.budget is not None else ""
    if t == 0 and summary.work.target.calls == 0:
        who = f"The big model wrote 0 of {n} tokens{asked}: this was the small model alone{copied}."
    elif t == 0:
        who = f"The big model wrote 0 of {n} tokens{asked}{copied}: it checked the small model's and kept them all."
    elif summary.budget is not None:
        who = (f"The big model wrote {t} of {n} tokens (red: {_share(t / n)}; you asked for "
               f"{rulewords.share(summary.budget.share)}){copied}.")
    else:
        who = f"The big model wrote {t} of {n} tokens (red){copied}."
    took = f"This took {_seconds(summary.timings.wall_s)}"
    if alone_s is None:
        return f"{who} {took}."
    if measured:
        its = f" for its {alone_tokens} tokens" if alone_tokens is not None and alone_tokens != n else ""
        return f"{who} {took}; the big model alone took {_seconds(alone_s)}{its} (measured just now)."
    return (f"{who} {took}; the big model alone would take about {_seconds(alone_s)} (estimated from this "
            f"machine's measured speeds; press Compare to measure it).")


SCORING_STEP = "Finished. The big model is reading the answer to score it…"


def budget_sentence(summary: Summary) -> str | None:
    """The threshold a run's share (budget) meant for this answer, in the rule's units; None without one."""
    budget = summary.budget
    if budget is None or budget.threshold is None or summary.rule not in RULE_TABLE:
        return None
    return (f"For this answer, {rulewords.share(budget.share)} meant "
            f"{rulewords.meant(summary.rule, budget.threshold)} (the middle value: the threshold moved "
            f"as the answer was written, to keep the share).")


def timing_sentence(summary: Summary) -> str:
    """When the first token came, and each model's share of the time, in plain words."""
    parts, first = [], summary.timings.first_token_s
    if first is not None and summary.counts.n_tokens:
        parts.append(f"the first token came after {_seconds(first)} (the models read the prompt first)")
    worked = [f"the {name} model worked {_seconds(stats.seconds)}" for name, stats in
              (("small", summary.work.draft), ("big", summary.work.target)) if stats.seconds > 0]
    if worked:
        rest = summary.overhead_s
        parts.append(f"of the {_seconds(summary.timings.wall_s)}, {' and '.join(worked)}"
                     + (f"; the rest ({_seconds(rest)}) went to choosing who writes and keeping count" if rest >= 0.005
                        else ""))
    return f"Measured on this machine: {'; '.join(parts)}." if parts else ""


def speed_sentence(summary: Summary) -> str:
    """The run's speed, saying what it counts."""
    return f"Speed: {summary.tokens_per_s:.1f} tokens/s ({COUNTED})."


def scoring_sentence(summary: Summary) -> str | None:
    """What the big model's scoring of the finished answer found, with its time; None if it did not score it."""
    quality = summary.quality
    if summary.stop_reason == "cancelled" or quality is None:
        return None
    found = []
    agreement = quality.target_agreement
    if math.isfinite(agreement) and summary.policy != "target":
        found.append(f"at {agreement:.0%} of the tokens it would have chosen the same token itself")
    ppl = quality.text_ppl_by_target
    if math.isfinite(ppl):
        number = f"{ppl:.1f}" if ppl < 100 else f"{ppl:,.0f}"
        found.append(f"its perplexity of the text is {number} (how surprised it was, on average: 1 means it "
                     f"expected every token)")
    if not found:
        return None
    return (f"The big model then scored the finished answer ({_seconds(quality.scoring_s)}, not part of the "
            f"{_seconds(summary.timings.wall_s)} above): {', and '.join(found)}.")


def _how_it_went(summary: Summary) -> str:
    """Why the run stopped, what became of the small model's proposals, and the rule that judged them."""
    parts = [f"It stopped because {_STOPS.get(summary.stop_reason, summary.stop_reason)}."]
    c = summary.counts
    if c.n_drafted:
        kept = f"The small model proposed {c.n_drafted} tokens and {c.n_draft_tokens} were kept"
        fates = ((c.n_escalated, "it was unsure of"), (c.n_rejected, "the big model rejected"),
                 (c.n_rolled_back, "the big model rolled back"))
        why = [f"{n} {fate}" for n, fate in fates if n]
        parts.append(kept + (" (the others: " + ", ".join(why) + ")." if why else "."))
    if c.n_lookup_proposed:
        parts.append(f"Prompt lookup proposed {c.n_lookup_proposed} tokens copied from earlier in the text "
                     f"and the big model, checking them, kept {c.n_lookup_tokens}.")
    if summary.rule in RULE_TABLE:
        parts.append(f"Each of the small model's tokens was judged by {rulewords.plain_name(summary.rule)} "
                     f"({rulewords.WORDS[summary.rule].does}).")
    if summary.budget is not None and summary.budget.source:
        parts.append(f"To keep the big model near {rulewords.share(summary.budget.share)} of the tokens, the "
                     f"threshold moved as the answer was written (its starting point: {summary.budget.source}).")
    return " ".join(parts)


def summary_lines(summary: Summary) -> list[str]:
    """The lines under a finished run's first line: budget, time and speed, scoring, how it went."""
    timing = timing_sentence(summary)
    return [line for line in (budget_sentence(summary), f"{timing} {speed_sentence(summary)}".strip(),
                              scoring_sentence(summary), _how_it_went(summary)) if line]


def summary_details(summary: Summary) -> str:
    """The measured facts behind the first line, in one paragraph (a run file's)."""
    return " ".join(summary_lines(summary))


def stopped_sentence(events: Sequence[TokenEvent]) -> str:
    """The summary of a run the visitor stopped: no Summary came, so count what was streamed."""
    accepted = [e for e in events if e.accepted]
    n, t = len(accepted), sum(e.source == "target" for e in accepted)
    if not accepted:
        return "Stopped before the first token."
    speed = n / accepted[-1].t if accepted[-1].t > 0 else 0.0
    copied = _copied(sum(e.source == "lookup" for e in accepted))
    return (f"Stopped after {n} tokens: the big model wrote {t} of {n} (red){copied}. Until then: "
            f"{speed:.1f} tokens/s (generation, reading the prompt included).")


def _table(rows: list[tuple[str, ...]]) -> str:
    """A small HTML table; the first row is the header. Cells are escaped."""
    cell = "padding:4px 12px;border-bottom:1px solid rgba(128,128,128,.3);text-align:left"
    body = "".join("<tr>" + "".join(f'<{tag} style="{cell}">{html.escape(c)}</{tag}>' for c in row) + "</tr>"
                   for tag, row in zip(["th"] + ["td"] * len(rows), rows))
    return f'<table style="border-collapse:collapse;margin-bottom:8px">{body}</table>'


def compare_html(run: Summary, alone: Summary) -> str:
    """This run and the target alone side by side (speeds without the scoring, like with like), then the diff."""
    ratio = run.tokens_per_s / alone.tokens_per_s if alone.tokens_per_s > 0 else None
    wall_s, alone_s = _seconds(run.timings.wall_s), _seconds(alone.timings.wall_s)
    n, alone_n = run.counts.n_tokens, alone.counts.n_tokens
    if ratio is None:
        verdict = "The big model alone wrote nothing, so there is no speed to compare."
    elif ratio >= 1:
        verdict = (f"Measured just now, this run was {ratio:.2f}× as fast as the big model alone: "
                   f"{wall_s} against {alone_s} ({COUNTED}).")
    else:
        verdict = (f"Measured just now, this run was slower than the big model alone ({ratio:.2f}× its speed): "
                   f"{wall_s} against {alone_s} ({COUNTED}); on this machine the "
                   f"small model's help cost more than it saved.")
    lengths = sorted((n, alone_n))
    if lengths[0] and lengths[1] > 1.5 * lengths[0]:
        verdict += (f" The texts differ in length ({n} and {alone_n} tokens) and reading the "
                    f"prompt weighs more on a short one: the writing speeds compare more fairly.")
    speed = lambda v: f"{v:.1f} tokens/s" if v else "–"  # noqa: E731
    first = lambda s: "–" if s.timings.first_token_s is None else f"{s.timings.first_token_s:.2f} s"  # noqa: E731
    table = _table([
        ("", f"this run ({run.policy})", "big model alone"),
        ("speed (generation, reading the prompt included)", speed(run.tokens_per_s), speed(alone.tokens_per_s)),
        ("writing speed (after the first token)", speed(run.writing_tokens_per_s), speed(alone.writing_tokens_per_s)),
        ("tokens", str(n), str(alone_n)),
        ("time (generation, reading the prompt included)", f"{run.timings.wall_s:.2f} s",
         f"{alone.timings.wall_s:.2f} s"),
        ("first token after", first(run), first(alone)),
        ("written by the big model", f"{run.counts.n_target_tokens} of {n}", f"{alone_n} of {alone_n}"),
    ] + ([("copied from the text (prompt lookup)", f"{run.counts.n_lookup_tokens} of {n}", "–")]
         if run.counts.n_lookup_proposed else []))
    diff = comparison_diff(run.text, alone.text)  # code by line, prose by word (`diff.py`)
    return (f'<div class="cascade-compare">{table}'
            f"<p><b>{html.escape(verdict)}</b> The two runs ran one after the other on the same machine; other "
            f"work on it shifts both numbers.</p>{diff}</div>")


def _share(x: float) -> str:
    """A share as a person reads it: 31%, under 1%, 0%."""
    return "under 1%" if 0 < x < 0.005 else pct(x)


def _pays(break_even: float) -> str:
    if break_even >= 1:
        return "on this machine sharing pays at any share"
    if break_even <= 0:
        return "on this machine sharing never pays: the big model alone is faster"
    return f"on this machine sharing pays only below {_share(break_even)}"


def rules_sentence(curves: dict, break_even: float | None, agreement: float = 0.95) -> str:
    """One sentence over the rules' curves: each rule's big-model share for `agreement`, and the break-even."""
    goal = _share(agreement)
    if not curves:
        return "There is no curve to draw: the big model wrote no token for this request."
    clauses, said = [], False
    for name, curve in curves.items():
        who = rulewords.plain_name(name)
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
    """Whether this run's big-model share was under the machine's break-even; None without one or for other policies."""
    if break_even is None or summary.counts.n_tokens == 0 or summary.policy not in ("cascade", "bild"):
        return None
    share = summary.counts.target_share
    under = share < break_even
    return (f"This run gave the big model {_share(share)} of the tokens, {'' if under else 'not '}under the break-even "
            f"for this machine ({_share(min(max(break_even, 0.0), 1.0))}): by the costs measured here, "
            + ("sharing the work pays at this share." if under else "the big model alone would be as fast or faster."))
