"""A run's text as HTML, pure functions of its `Routing`: one span per token (red: the big model, purple: prompt
lookup), fenced code as a monospace block, its what-if and banners; every model's text escaped."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from functools import partial

from ..engine.analysis import Decision, Routing, RunView, Slot, WhatIf, as_rule
from ..engine.events import TokenEvent
from ..routing.rules import Rule
from . import rulewords
from .diff import CODE_FONT, parts
from .style import GREY, LOOKUP, PURPLE, RED, TEXT_STYLE, fmt_ppl, fmt_threshold, visible, written_by

_STATUS_WORDS = {
    "escalated": "was unsure of it (above the threshold), so the big model wrote this position",
    "rejected": "the big model checked it and rejected it",
    "rolled_back": "the big model checked it and rolled it back",
}

RED_STYLE = f"color:{RED};font-weight:600;background:rgba(198,40,40,.08);border-radius:3px"
LOOKUP_STYLE = f"color:{PURPLE};background:rgba(123,63,160,.08);border-radius:3px"
_WHATIF_RED_STYLE = RED_STYLE + f";text-decoration:underline dotted {RED}"
_DISCARD_STYLE = f"color:{GREY};text-decoration:line-through;font-size:.92em"
_NO_WHATIF_STYLE = f"color:{GREY}"
GIVEN_STYLE = f"color:{GREY};background:rgba(0,0,0,.05);border-radius:3px"
GIVEN_TITLE = "given in the request: the answer starts with this text; both models read it, neither wrote it"

# Long lines wrap inside the block (its spaces kept), so no line is cut off at any width, scrollbar or not.
CODE_STYLE = (f"display:block;font-family:{CODE_FONT};white-space:pre-wrap;overflow-wrap:anywhere;tab-size:4;"
              "font-size:.9em;line-height:1.5;margin:4px 0;padding:8px 10px;border-radius:6px;"
              "background:rgba(128,128,128,.07);border:1px solid rgba(128,128,128,.25)")
FENCE_STYLE = "opacity:.5"


def _laid_out(pieces: list[tuple[str, Callable[[str], str]]]) -> str:
    """(text, draw) pieces laid out in prose and code blocks (`diff.parts`), split at a block's edge."""
    text = "".join(t for t, _ in pieces)
    regions = parts(text)
    if all(kind == "prose" for kind, _, _ in regions):
        return "".join(draw(t) for t, draw in pieces)
    drawn: list[list[str]] = [[] for _ in regions]
    r = pos = 0
    for t, draw in pieces:
        end = pos + len(t)
        while True:  # an empty piece (struck markup) draws once too, in the region where it stands
            while r < len(regions) - 1 and regions[r][2] <= pos:
                r += 1
            cut = min(end, regions[r][2])
            drawn[r].append(draw(text[pos:cut]))
            pos = cut
            if pos == end:
                break
    out = []
    for (kind, _, _), region in zip(regions, drawn):
        body = "".join(region)
        if kind == "open":  # a block starts; it ends at its closing fence, or with the text
            out.append(f'<span class="cascade-code" style="{CODE_STYLE}">')
        if kind in ("open", "close"):
            body = f'<span class="code-fence" style="{FENCE_STYLE}">{body}</span>'
        out.append(body + ("</span>" if kind == "close" else ""))
    return "".join(out) + ("</span>" if regions[-1][0] in ("open", "code") else "")


def _status_words(status: str, rule: Rule) -> str:
    if status == "escalated" and rule.name != "perplexity":
        return f"was unsure of it ({rulewords.when(rule, 'was')}), so the big model wrote this position"
    return _STATUS_WORDS[status]


def token_title(slot: Slot, rule: Rule | str = "perplexity") -> str:
    """The hover text of one output token: who wrote it, how sure each model was, and `rule`'s number."""
    rule = as_rule(rule)
    t = slot.token
    lines = [f"{visible(t.text)} at position {t.position}, {written_by(t.source)}"]
    if slot.by_target:
        lines.append(f"big model's perplexity of this token: {fmt_ppl(t.target_ppl)}")
        if t.draft_ppl is not None:
            lines.append(f"small model's perplexity of this token: {fmt_ppl(t.draft_ppl)}")
        p = slot.proposal
        if p is not None and p.source == "lookup":
            lines.append(f"prompt lookup had proposed {visible(p.text)} (copied from earlier in the text) but "
                         f"{_status_words(p.status, rule)}")
        elif p is not None:
            lines.append(f"the small model had proposed {visible(p.text)} (its perplexity {fmt_ppl(p.draft_ppl)}) "
                         f"but {_status_words(p.status, rule)}")
        else:
            lines.append("the small model proposed nothing here")
    elif slot.by_lookup:
        lines.append(f"big model's perplexity of it (it checked it): {fmt_ppl(t.target_ppl)}")
        lines.append("the small model did not score it")
    else:
        lines.append(f"small model's perplexity of its own token: {fmt_ppl(t.draft_ppl)}")
        if t.target_ppl is not None:
            lines.append(f"big model's perplexity of it (it checked it): {fmt_ppl(t.target_ppl)}")
    score = slot.score(rule)
    if rule.name != "perplexity" and score is not None:
        which = "its own token" if not slot.by_target else "its proposal"
        lines.append(f"{rulewords.WORDS[rule.name].number} for {which} ({rule.name} rule): "
                     f"{rulewords.fmt_score(rule, score)}")
    return "\n".join(lines)


def _span(text: str, title: str, cls: str, style: str = "", alternatives: str = "", tag: str = "span") -> str:
    style_attr = f' style="{style}"' if style else ""
    alt_attr = f' data-alt="{html.escape(alternatives)}"' if alternatives else ""
    return f'<{tag} class="{cls}" title="{html.escape(title)}"{style_attr}{alt_attr}>{html.escape(text)}</{tag}>'


def alternatives_data(event: TokenEvent) -> str:
    """The hover's JSON `[draft, target, position]`, each model's [text, percent] pairs or null; "" if neither."""
    lists = [None if top is None else [[text, float(f"{100 * p:.3g}")] for text, p in top]
             for top in (event.draft_top, event.target_top)]
    if lists == [None, None]:
        return ""
    return json.dumps(lists + [event.position], ensure_ascii=False, separators=(",", ":"))


def _discarded(event: TokenEvent) -> str:
    proposed = ("proposed by prompt lookup (copied from earlier in the text)" if event.source == "lookup"
                else f"drafted by the small model (perplexity {fmt_ppl(event.draft_ppl)})")
    title = (f"{visible(event.text)}: {proposed}, "
             f"then {'rejected' if event.status == 'rejected' else 'rolled back'} by the big model "
             f"(its perplexity {fmt_ppl(event.target_ppl)}); not part of the text")
    return _span(event.text, title, "tok discarded", _DISCARD_STYLE, alternatives_data(event), tag="s")


def _run_look(slot: Slot) -> tuple[str, str]:
    """(class, style) of a token as the run wrote it."""
    if slot.by_target:
        return "tok red target", RED_STYLE
    if slot.by_lookup:
        return "tok lookup", LOOKUP_STYLE
    return "tok draft", ""


def _whatif_look(slot: Slot, whatif: WhatIf, index: int, named: bool) -> tuple[str, str, str]:
    """(class, style, hover line) of slot `index` under a what-if; `named`: say the rule (not the run's)."""
    verdict, rule = whatif.verdicts[index], whatif.rule
    words = rulewords.whatif_words(rule, slot.score(rule), whatif.thresholds[index], verdict, named,
                                   whatif.decision.budget)
    if verdict is None:
        return "tok nowhatif", _NO_WHATIF_STYLE, words
    return ("tok red whatif-target", _WHATIF_RED_STYLE, words) if verdict else ("tok whatif-draft", "", words)


def tokens_html(routing: Routing, whatif: WhatIf | None = None, run_rule: Rule | str = "perplexity",
                given: str = "") -> str:
    """One span per token, refused drafts struck (escalated ones only in a hover), `given` grey first; with
    `whatif`, red where the big model would have written, grey where its rule has no number."""
    run_rule = as_rule(run_rule)
    pieces: list[tuple[str, Callable[[str], str]]] = []
    if given:
        pieces.append((given, partial(_span, title=GIVEN_TITLE, cls="tok given", style=GIVEN_STYLE)))
    for event in routing.events:
        if event.status in ("rejected", "rolled_back"):
            pieces.append(("", lambda _text, markup=_discarded(event): markup))  # struck, beside the text
            continue
        if not event.accepted or not event.text:
            continue  # escalated: told in the hover; empty: half a character, completed by the next token
        slot = routing.slot_of[id(event)]
        title = token_title(slot, run_rule)
        if whatif is None:
            cls, style = _run_look(slot)
        else:
            cls, style, words = _whatif_look(slot, whatif, routing.index_of[id(event)], named=whatif.rule != run_rule)
            title += "\n" + words
        pieces.append((event.text, partial(_span, title=title, cls=cls, style=style,
                                           alternatives=alternatives_data(event))))
    return _laid_out(pieces)


def legend_html(whatif: bool, lookup: bool, rule: str, given: bool, by_share: bool) -> str:
    """What the colours mean: `lookup` tokens, `rule` the what-if's, a `given` start, a share's (`by_share`) what-if."""
    red = f'<span style="{RED_STYLE}">red</span>'
    struck = f'<s style="{_DISCARD_STYLE}">struck through</s>'
    start = (f'<span class="legend-given" style="{GIVEN_STYLE}">grey background</span> = given: the answer\'s '
             f'start, written by neither model · ' if given else "")
    if whatif:
        why = "no router scored it" if as_rule(rule).name == "learned" else "the small model did not score it"
        at = "with the what-if share" if by_share else "at the what-if threshold"
        return start + (f"{red} = <b>would</b> have gone to the big model {at} · plain = would have "
                        f"stayed with the small model · <span style=\"{_NO_WHATIF_STYLE}\">grey</span> = no what-if "
                        f"({why}) · {struck} = refused by the big model in the real run")
    copied = (f' · <span class="legend-lookup" style="{LOOKUP_STYLE}">purple</span> = {LOOKUP}' if lookup else "")
    proposed = "proposed" if lookup else "drafted by the small model"
    return start + (f"{red} = written by the big model · plain = written by the small model{copied} · {struck} = "
                    f"{proposed}, then refused by the big model · hover a token for details")


def text_panel(routing: Routing, view: RunView, given: str = "") -> str:
    """The whole text box as `view` sees the run: legend, what-if banner (if asked), given start and tokens."""
    run, asked = view.run, view.asked
    whatif = view.whatif(routing)
    banner = whatif_banner(routing, run, asked, whatif) if asked is not None else ""
    shown = whatif.decision.rule if whatif is not None else run.rule
    by_share = whatif is not None and whatif.decision.budget is not None
    body = tokens_html(routing, whatif=whatif, run_rule=run.rule, given=given)
    return (f'<div class="cascade-output" data-view="{"run" if whatif is None else "whatif"}" '
            f'data-rule="{html.escape(shown)}">'
            f'<div class="legend" style="font-size:.85em;margin-bottom:6px">'
            f'{legend_html(whatif is not None, routing.has_lookup, shown, bool(given), by_share)}</div>'
            f'{banner}<div class="cascade-text" style="{TEXT_STYLE}">{body}</div></div>')


def message_panel(message: str, kind: str = "info") -> str:
    """A plain message in the text box's place: an error, or what to do first."""
    colour = RED if kind == "error" else GREY
    return (f'<div class="cascade-output cascade-message" data-kind="{kind}" style="{TEXT_STYLE};min-height:8em;'
            f'border-color:{colour};color:{colour if kind == "error" else "inherit"}">{html.escape(message)}</div>')


_BANNER_STYLE = ("padding:6px 10px;margin-bottom:6px;border-radius:6px;border:1px dashed #b26a00;"
                 "background:rgba(255,170,0,.10);font-size:.92em")
_REREAD = "nothing was regenerated, and after the first changed token a real run would write different text"


def _banner(text: str, what_if: bool = True) -> str:
    head = "<b>What-if.</b> " if what_if else ""
    return f'<div class="whatif-banner" style="{_BANNER_STYLE}">{head}{html.escape(text)}</div>'


def whatif_banner(routing: Routing, run: Decision, asked: Decision, whatif: WhatIf | None) -> str:
    """The banner over a what-if: what `asked` would have changed against `run`, or why there is none."""
    rule = asked.rule
    if rule != run.rule and routing.has_whatif and whatif is None:
        text = (f"No what-if by {rulewords.plain_name(rule)} for this run: "
                + ("no router scored its tokens (none was loaded when it ran)." if rule == "learned"
                   else f"the small model recorded no {rule} for its tokens.")
                + " The text shows the run as it happened.")
        return _banner(text, what_if=False)
    if whatif is None:
        wrote = "wrote or checked" if routing.has_lookup else "wrote"
        text = (f"No what-if for this run: the small model did not score these tokens (the big model {wrote} "
                f"them all). Generate with another policy to see one.")
        return _banner(text, what_if=False)
    return _banner(_whatif_text(routing, run, whatif))


def _whatif_text(routing: Routing, run: Decision, whatif: WhatIf) -> str:
    """The banner's words: what `whatif` (another threshold, share or rule) would have changed against `run`."""
    asked, rule = whatif.decision, whatif.decision.rule
    other = rule != run.rule
    if asked.budget is not None:
        what = f"{'By ' + rulewords.plain_name(rule) + ', w' if other else 'W'}ith the big model writing " \
               f"{rulewords.share(asked.budget)} of the tokens"
        again = "with this share"
    else:
        what = (f"{'By ' + rulewords.plain_name(rule) + ' at' if other else 'At'} threshold "
                f"{fmt_threshold(asked.threshold)}")
        again = "with this rule and threshold" if other else "at this threshold"
    when = f"a token goes to the big model when {rulewords.when(rule)}; " if other and asked.budget is None else ""
    run_rule = f" by {rulewords.plain_name(run.rule)}" if other else ""
    did = (f"this run asked for {rulewords.share(run.budget)}{run_rule}" if run.budget is not None else
           f"this run used {rulewords.plain_name(run.rule)} at {fmt_threshold(run.threshold)}" if other else
           f"this run used threshold {fmt_threshold(run.threshold)}")
    would, scored, total = whatif.counts
    unscored = f" (grey: {total - scored} with no {rule} score)" if scored < total else ""
    span = whatif.span if asked.budget is not None else None
    moved = ("" if span is None else
             f"; the threshold stayed at {rulewords.fmt_score(rule, span[0])}" if span[0] == span[1] else
             f"; the threshold moved as the answer went, from {rulewords.fmt_score(rule, span[0])} to "
             f"{rulewords.fmt_score(rule, span[1])}")
    return (f"{what} ({when}{did}), {would} of {scored} tokens would have gone to the big model{unscored}, against "
            f"{routing.n_by_target} of {total} in the real run{moved}. This re-reads what the small model "
            f"recorded in this run; {_REREAD}. Press Generate to run {again}.")
