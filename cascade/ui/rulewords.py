"""What the page says about a deferral rule (its control's words, its slider, its axis, one line per position)
and each policy's name in the page's dropdown."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..engine.analysis import as_rule
from ..routing.rules import RULE_TABLE, Rule
from .style import fmt_ppl, fmt_threshold

# What the page's dropdown says for each policy.
POLICY_LABELS = {
    "target": "target: the big model alone (the baseline)",
    "draft": "draft: the small model alone",
    "cascade": "cascade: small writes, big steps in where small is unsure",
    "bild": "bild: cascade, and big may roll back small's recent tokens",
    "speculative": "speculative: big checks k drafted tokens at once",
    "lookup": "lookup: copies from earlier in the text, big checks the copy",
    "lookup+draft": "lookup+draft: copies from the text where it can, else small drafts",
    "auto": "auto: measures as it goes and picks the fastest way",
    "seed": "seed: the original loop (re-reads the whole text per token)",
}


def policy_label(name: str) -> str:
    """A policy as the page names it (its name, for one the page has no words for)."""
    return POLICY_LABELS.get(name, name)


@dataclass(frozen=True)
class Words:
    label: str  # the dropdown's choice
    step: float  # the slider's step
    short: str  # the slider's label: "Threshold (entropy, nats)"
    number: str  # the number, as a noun: "the small model's entropy"
    axis: str  # the chart's y axis
    reads: str  # the dropdown's info: what the rule reads
    slider: str  # what the slider's info says it compares: "Above this entropy the small model hands …"
    does: str  # what the rule weighs, in a few plain words: "how unsure it is of its token"


WORDS: dict[str, Words] = {
    "perplexity": Words(
        "how unsure it is of its token (perplexity)", 0.1, "perplexity", "the small model's perplexity",
        "small model's perplexity (log scale)",
        "How unsure it is of the token it chose, as perplexity (1 = certain, 5 = as unsure as a pick among five "
        "equally likely words); above the threshold the big model writes.",
        "perplexity", "how unsure the small model is of the token it chose"),
    "entropy": Words(
        "how spread out its guesses are (entropy)", 0.05, "entropy, nats", "the small model's entropy",
        "small model's entropy (nats)",
        "How spread out its guesses are over every token (entropy, in nats: 0 = one certain guess); above the "
        "threshold the big model writes.",
        "entropy", "how spread out the small model's guesses are"),
    "margin": Words(
        "how close its two best guesses are (margin)", 0.01, "margin, top-1 minus top-2", "the small model's margin",
        "small model's margin<br>(below the line → big model)",
        "How far its best guess is ahead of its second (top-1 minus top-2 probability: 1 = certain, near 0 = a "
        "tie); BELOW the threshold the big model writes.",
        "margin", "how close the small model's two best guesses are"),
    "learned": Words(
        "a router's guess that the big model differs (learned)", 0.01, "learned, probability",
        "the router's probability", "router's probability<br>that the big model differs",
        "A router, trained on where the big model chose another token, reads the small model's probabilities, "
        "recent tokens and position and predicts how likely the big model is to choose another token here; "
        "above the threshold the big model writes.",
        "predicted probability",
        "where a router trained on the two models expects the big model to choose another token"),
}


def plain_name(rule: Rule | str) -> str:
    """The rule in a sentence or a legend: "the margin rule", "the learned router"."""
    name = as_rule(rule).name
    return "the learned router" if name == "learned" else f"the {name} rule"


def choices(has_router: bool) -> list[tuple[str, str]]:
    """The dropdown's (label, rule) pairs: every rule, the learned one only with a router."""
    return [(label(r), r.name) for r in RULE_TABLE.values() if r.name != "learned" or has_router]


def label(rule: Rule | str) -> str:
    """The rule as the dropdown names it: "how close its two best guesses are (margin)"."""
    return WORDS[as_rule(rule).name].label


def offered(has_router: bool) -> tuple[str, ...]:
    return tuple(name for _, name in choices(has_router))


def rule_info(rule: Rule | str, trained_on: str | None) -> str:
    """The line under the dropdown: what the chosen rule reads (and, for learned, its router's pair)."""
    rule = as_rule(rule)
    info = WORDS[rule.name].reads
    if rule.name == "learned":
        info += f" Trained on {trained_on}." if trained_on else (
            " No router is loaded on this page: the project ships one only for the small model file it was "
            "trained with.")
    return info


def slider_props(rule: Rule | str) -> dict[str, Any]:
    """The threshold slider for a rule: minimum, maximum, step, label, info and the default value."""
    rule = as_rule(rule)
    lo, hi, words = *rule.useful_range, WORDS[rule.name]
    info = (f"{'Below' if rule.below else 'Above'} this {words.slider} the small model hands a token to the big "
            f"model. Move it after a run to see a what-if.")
    return {"minimum": lo, "maximum": hi, "step": words.step, "label": f"Threshold ({words.short})", "info": info,
            "value": rule.default}


def fmt_score(rule: Rule | str, score: float | None) -> str:
    """A rule's number for one position, as the page writes it."""
    rule = as_rule(rule)
    if rule.name == "perplexity" or score is None:
        return fmt_ppl(score)
    return f"{score:.2f}" if rule.name == "entropy" else f"{score:.3f}"


def whatif_words(rule: Rule | str, score: float | None, threshold: float, verdict: bool | None, named: bool,
                 budget: float | None) -> str:
    """What a what-if by `rule` (`named`: say it) decided at a position of `score`; `budget`: the share, if any."""
    rule = as_rule(rule)
    by = f" by {plain_name(rule)}" if named else ""
    if verdict is None:
        return f"what-if{by}: none here ({unscored(rule)})"
    who = "the big model" if verdict else "the small model"
    side = ("" if verdict else "not ") + ("below" if rule.below else "above")
    at = (f"at threshold {fmt_threshold(threshold)}" if budget is None else
          f"with the big model writing {share(budget)} (the threshold here: {moving_threshold(rule, threshold)})")
    return (f"what-if{by} {at}: {WORDS[rule.name].number} {fmt_score(rule, score)} is {side} it, "
            f"so {who} would have written this position")


def moving_threshold(rule: Rule | str, threshold: float) -> str:
    """A threshold a share set at one position, which may stand past every number."""
    if math.isfinite(threshold):
        return fmt_score(rule, threshold)
    wanted = "no more tokens" if (threshold > 0) != as_rule(rule).below else "every token"
    return f"none: the share wanted {wanted} for the big model"


def share(budget: float) -> str:
    """A share of the tokens as a person reads it: 10%, 12.5%, 0.5%."""
    return f"{100 * budget:.3g}%"


def meant(rule: Rule | str, threshold: float) -> str:
    """A threshold in a sentence: "a threshold of 0.060 on the small model's margin"."""
    return f"a threshold of {fmt_score(rule, threshold)} on {WORDS[as_rule(rule).name].number}"


def unscored(rule: Rule | str) -> str:
    """Why a position has no number by this rule, in a clause."""
    learned = as_rule(rule).name == "learned"
    return "no router scored this position" if learned else "the small model did not score this position"


def when(rule: Rule | str, tense: str = "is") -> str:
    """When a rule sends a token to the big model: "the small model's margin is below the threshold"."""
    rule = as_rule(rule)
    return f"{WORDS[rule.name].number} {tense} {'below' if rule.below else 'above'} the threshold"
