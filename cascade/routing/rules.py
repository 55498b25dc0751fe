"""The deferral rules: each turns the draft's reading of a position (`reading.py`) into one number, compared
with a threshold in that number's own units; a recorded reading can be re-judged by any rule."""

from __future__ import annotations

from dataclasses import dataclass

from .reading import Reading


@dataclass(frozen=True)
class Rule:
    name: str
    description: str  # one sentence for the docs and the command line's help
    unit: str  # what the threshold is measured in, in words
    default: float  # the default threshold
    low: float  # the range a threshold may take
    high: float
    below: bool = False  # escalate when the score is below the threshold (margin), not above
    log_scale: bool = False  # the chart's axis
    useful: tuple[float, float] | None = None  # where a threshold changes anything (None: low to high)

    @property
    def useful_range(self) -> tuple[float, float]:
        """The thresholds worth choosing among: past them every token, or none, goes to the target."""
        return self.useful or (self.low, self.high)

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
            raise ValueError(f"threshold must be between {plain_number(self.low)} and {plain_number(self.high)} for "
                             f"the {self.name} rule ({self.unit}), got {plain_number(threshold)}")


def plain_number(x: float) -> str:
    """A number as a person would write it in a message: whole numbers whole, others as given."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


# Defaults: the seed's 5 for perplexity; the others send as many tokens to the target as it does.
RULE_TABLE: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("perplexity",
             "the draft's perplexity of the token it proposes, exp(-log p); escalate above the threshold",
             "perplexity, 1 = certain", 5.0, 0.0, 1e6, log_scale=True, useful=(1.0, 100.0)),
        Rule("entropy",
             "the entropy of the draft's distribution over all tokens, in nats; escalate above the threshold",
             "entropy in nats, 0 = certain", 3.8, 0.0, 12.0),
        Rule("margin",
             "the draft's top-1 minus top-2 probability; escalate below the threshold",
             "top-1 minus top-2 probability, 1 = certain", 0.04, 0.0, 1.0, below=True),
        Rule("learned",
             "a logistic regression over the draft's features predicting that the target would write another "
             "token; escalate above the threshold", "probability the big model differs", 0.7, 0.0, 1.0),
    )
}

RULES: tuple[str, ...] = tuple(RULE_TABLE)
