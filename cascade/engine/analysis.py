"""Reading a run's events: who wrote each position, what the draft had proposed there, what-ifs.

Pure functions on recorded `TokenEvent`s, shared by every view of a run (the page's text and chart,
a saved run, the command line); nothing here draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

from .events import TokenEvent
from ..routing.rules import RULE_TABLE, Rule


def as_rule(rule: Rule | str) -> Rule:
    return rule if isinstance(rule, Rule) else RULE_TABLE[rule]


@dataclass(frozen=True)
class Slot:
    """One position of the output: the token written there, and what had been proposed there.

    `proposal` is the token the draft (or prompt lookup) proposed at this position when the target wrote
    it instead (escalated, rejected or rolled back); None where the proposal was kept or nothing was
    proposed.
    """

    token: TokenEvent
    proposal: TokenEvent | None

    @property
    def by_target(self) -> bool:
        return self.token.source == "target"

    @property
    def by_lookup(self) -> bool:
        """Copied from earlier in the text by prompt lookup (and checked by the target)."""
        return self.token.source == "lookup"

    @property
    def reading(self) -> TokenEvent | None:
        """The event carrying the draft's reading of its own choice here: the token it wrote, or the
        proposal the target overruled. None where the draft never proposed a token of its own (the
        `target` policy, the extra token the target adds after accepting a whole speculative batch, a
        token prompt lookup proposed)."""
        if not self.by_target:
            return self.token if self.token.draft_ppl is not None else None
        return self.proposal if self.proposal is not None and self.proposal.draft_ppl is not None else None

    @property
    def routing_ppl(self) -> float | None:
        """The draft's perplexity of its own choice here: the seed's rule's number."""
        reading = self.reading
        return None if reading is None else reading.draft_ppl

    def score(self, rule: Rule | str = "perplexity") -> float | None:
        """The rule's number for this position (what its threshold is compared with), where recorded."""
        reading = self.reading
        return None if reading is None else as_rule(rule).score(reading)

    def would_escalate(self, threshold: float, rule: Rule | str = "perplexity") -> bool | None:
        """What-if: would the draft's recorded reading here send this position to the target under
        `rule` at `threshold`? None where the reading lacks the rule's number."""
        score = self.score(rule)
        return None if score is None else as_rule(rule).escalates(score, threshold)


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


@dataclass(frozen=True)
class Routing:
    """One run's events read once: its slots, and what-ifs over them at other thresholds."""

    events: Sequence[TokenEvent]

    @cached_property
    def slots(self) -> list[Slot]:
        return slots(self.events)

    @cached_property
    def slot_of(self) -> dict[int, Slot]:
        """The slot of each accepted event, by the event's identity."""
        return {id(s.token): s for s in self.slots}

    @property
    def has_whatif(self) -> bool:
        """Whether the draft scored any position, so that another threshold could route differently."""
        return any(s.routing_ppl is not None for s in self.slots)

    def scored_by(self, rule: Rule | str) -> bool:
        """Whether any position has the rule's number (the learned score needs a router at run time)."""
        return any(s.score(rule) is not None for s in self.slots)

    @property
    def n_by_target(self) -> int:
        return sum(s.by_target for s in self.slots)

    @property
    def has_lookup(self) -> bool:
        """Whether prompt lookup proposed any token of this run (kept or not)."""
        return any(e.source == "lookup" for e in self.events)

    @staticmethod
    def whatif_asked(run_threshold: float, threshold: float | None, run_rule: str = "perplexity",
                     rule: str | None = None) -> bool:
        """Whether a what-if was asked for: a threshold, or a rule, other than the run's."""
        return (threshold is not None and threshold != run_threshold) or (rule is not None and rule != run_rule)

    def whatif_threshold(self, run_threshold: float, threshold: float | None, run_rule: str = "perplexity",
                         rule: str | None = None) -> float | None:
        """The threshold to re-colour by: `threshold` if a what-if was asked for and the run has
        positions with the rule's number; otherwise None (show the run as it happened)."""
        asked = self.whatif_asked(run_threshold, threshold, run_rule, rule)
        return threshold if asked and threshold is not None and self.scored_by(rule or run_rule) else None

    def whatif_counts(self, threshold: float, rule: Rule | str = "perplexity") -> tuple[int, int, int]:
        """(positions that would go to the target, positions with the rule's number, all positions)."""
        verdicts = [s.would_escalate(threshold, rule) for s in self.slots]
        return sum(v is True for v in verdicts), sum(v is not None for v in verdicts), len(self.slots)
