"""When should the big model step in? The deferral rules, and what the draft knows when one decides.

Before the target is asked, the draft has one row of scores for the position. `read_row` turns it into a
`DraftReading`: the probability of the token it proposes, of its top two tokens, and the entropy of its
untempered distribution. A rule turns a reading into one number and compares it with the threshold in
that number's own units:

- `perplexity` (the seed's): exp(-log p) of the proposed token. Under greedy decoding that is exactly
  1 / the top probability, so it reads only the top-1 probability.
- `entropy`: how spread the whole distribution is, in nats.
- `margin`: top-1 minus top-2 probability; a small margin means two tokens compete.
- `learned`: a router's probability that the big model would write another token (`router.py`).

Each token event records the reading, so any rule can re-judge a recorded run (`analysis.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .sampling import largest


class Reading(Protocol):
    """Anything carrying the draft's view of one position: a `DraftReading`, or a recorded TokenEvent."""

    draft_ppl: float | None
    draft_top1: float | None
    draft_top2: float | None
    draft_entropy: float | None
    draft_score: float | None


@dataclass(frozen=True)
class DraftReading:
    """The draft's view of one position, before anyone else is asked."""

    draft_ppl: float  # perplexity of the proposed token: exp(-log p)
    draft_top1: float  # probability of the most likely token
    draft_top2: float  # probability of the second most likely token
    draft_entropy: float  # entropy of the untempered distribution, nats
    top_token: int  # the most likely token
    draft_score: float | None = None  # the learned router's probability that the target differs
    top: tuple[tuple[int, float], ...] = ()  # the likeliest tokens and their probabilities, likeliest first


def read_row(row: np.ndarray, token: int, k: int = 2) -> DraftReading:
    """The draft's reading of one row of logits, for the token it proposes there, with its `k` (at least
    2) likeliest tokens. About 0.5 ms for Qwen's 152k-token vocabulary: one exp over the row and k
    argmaxes (`largest`)."""
    best = largest(row, max(k, 2))
    top = best[0]
    m = float(row[top])
    shifted = row - m
    e = np.exp(shifted)
    z = float(e.sum(dtype=np.float64))
    log_z = math.log(z)
    # An elementwise product and a sum, not np.dot: a BLAS call leaves OpenBLAS's threads spinning, and
    # on a small CPU they then slow llama.cpp's next decode threefold (measured: 45 → 138 ms a draft token).
    entropy = max(0.0, log_z - float((e * shifted).sum(dtype=np.float64)) / z)
    probabilities = [math.exp(float(row[i]) - m) / z for i in best]
    second = probabilities[1] if len(best) > 1 else 0.0
    logp = float(row[token]) - m - log_z
    return DraftReading(draft_ppl=math.exp(-logp) if logp > -700 else math.inf, draft_top1=1.0 / z,
                        draft_top2=second, draft_entropy=entropy, top_token=top,
                        top=tuple(zip(best, probabilities)))


@dataclass(frozen=True)
class Rule:
    name: str
    label: str  # the page's dropdown
    description: str  # one sentence for the README and the command line's help
    unit: str  # what the threshold is measured in, in words
    default: float  # the default threshold, chosen from measurements (BENCHMARKS.md)
    low: float
    high: float
    step: float  # the page's slider step
    below: bool = False  # escalate when the score is below the threshold (margin), not above
    log_scale: bool = False  # the chart's axis

    def score(self, reading: Reading) -> float | None:
        """This rule's number for a position, or None where the reading lacks it."""
        if self.name == "perplexity":
            return reading.draft_ppl
        if self.name == "entropy":
            return reading.draft_entropy
        if self.name == "margin":
            if reading.draft_top1 is None or reading.draft_top2 is None:
                return None
            return reading.draft_top1 - reading.draft_top2
        return reading.draft_score

    def escalates(self, score: float, threshold: float) -> bool:
        """Whether a position with this score goes to the target at this threshold."""
        return score < threshold if self.below else score > threshold

    def doubt(self, score: float) -> float:
        """The score turned so that larger always means more doubtful (for sorting positions)."""
        return -score if self.below else score

    def check(self, threshold: float) -> None:
        """ValueError naming the rule and its range if the threshold is outside it."""
        if not self.low <= threshold <= self.high:
            raise ValueError(f"threshold must be between {_number(self.low)} and {_number(self.high)} for the "
                             f"{self.name} rule ({self.unit}), got {_number(threshold)}")

    @property
    def when(self) -> str:
        """When it escalates, in words."""
        return f"{self.unit} {'below' if self.below else 'above'} the threshold"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# Defaults: the seed's 5 for perplexity; for the others, the threshold at which each sends as many tokens
# to the target as perplexity 5 does (9.1%) on the shipped train prompts, teacher-forced on the real pair
# (10,352 positions): entropy 3.85 nats, margin 0.043, learned 0.70, rounded (BENCHMARKS.md, "Rules").
RULE_TABLE: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("perplexity", "perplexity of its own token (the seed's rule)",
             "the draft's perplexity of the token it proposes, exp(-log p); escalate above the threshold",
             "perplexity, 1 = certain", 5.0, 0.0, 1e6, 0.1, log_scale=True),
        Rule("entropy", "entropy of its whole distribution",
             "the entropy of the draft's distribution over all tokens, in nats; escalate above the threshold",
             "entropy in nats, 0 = certain", 3.8, 0.0, 12.0, 0.05),
        Rule("margin", "margin between its top two tokens",
             "the draft's top-1 minus top-2 probability; escalate below the threshold",
             "top-1 minus top-2 probability, 1 = certain", 0.04, 0.0, 1.0, 0.01, below=True),
        Rule("learned", "a learned router's prediction",
             "a logistic regression over the draft's features predicting that the target would write another "
             "token; escalate above the threshold", "probability the big model differs", 0.7, 0.0, 1.0, 0.01),
    )
}

RULES: tuple[str, ...] = tuple(RULE_TABLE)


def rule_list_markdown() -> str:
    """The README's list of rules, one line each."""
    return "\n".join(f"- `{r.name}`: {r.description} (range {r.low:g} to {r.high:g}, default {r.default:g})."
                     for r in RULE_TABLE.values())
