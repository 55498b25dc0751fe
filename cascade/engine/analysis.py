"""Reading a run's events: who wrote each position, what the draft had proposed there, what-ifs.

Pure functions on recorded `TokenEvent`s, shared by every view of a run (the page's text and chart,
a saved run, the command line); nothing here draws. A what-if re-reads the draft's recorded numbers by a
`Decision`: a rule at a fixed threshold, or at the threshold a token budget sets as it goes
(`routing/budget.py`), position by position, as the engine would have.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

from .events import TokenEvent
from ..routing.budget import BudgetTracker
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


@dataclass(frozen=True)
class Decision:
    """How the big model's positions are chosen: `rule` at a fixed `threshold` (in its units), or, with a
    `budget` (the share of tokens the big model should write), at the threshold the budget sets for each
    position; `threshold` then says nothing about the choice."""

    rule: str
    threshold: float
    budget: float | None = None

    def same_as(self, other: "Decision") -> bool:
        """Whether both choose the same positions of a run: the same rule, and the same budget, or, with
        none, the same threshold."""
        if self.rule != other.rule or (self.budget is None) != (other.budget is None):
            return False
        return self.budget == other.budget if self.budget is not None else self.threshold == other.threshold


def asked_decision(run: Decision, threshold: float | None = None, rule: str | None = None,
                   budget: float | None = None) -> Decision | None:
    """The what-if the controls ask of a run that `run` decided: a `budget` (a share), else a
    `threshold`, else the run's own way under another `rule`; None where nothing is asked or what is
    asked is what the run did (the run is then shown as it happened)."""
    if threshold is None and rule is None and budget is None:
        return None
    rule = rule or run.rule
    if budget is not None:
        asked = Decision(rule, threshold if threshold is not None else run.threshold, budget)
    elif threshold is not None:
        asked = Decision(rule, threshold)
    else:
        asked = Decision(rule, run.threshold, run.budget)
    return None if asked.same_as(run) else asked


@dataclass(frozen=True)
class WhatIf:
    """Who would have written each position of a run (its `Routing.slots`, in order) had `decision`
    chosen: True the big model, False the small one, None where the draft's reading lacks the rule's
    number; and the threshold each position met (one for all, unless a budget moved it)."""

    decision: Decision
    verdicts: tuple[bool | None, ...]
    thresholds: tuple[float, ...]

    @property
    def rule(self) -> Rule:
        return as_rule(self.decision.rule)

    @property
    def counts(self) -> tuple[int, int, int]:
        """(positions that would go to the big model, positions with the rule's number, all positions)."""
        v = self.verdicts
        return sum(x is True for x in v), sum(x is not None for x in v), len(v)

    @property
    def middle(self) -> float:
        """The threshold the positions met at the middle (the median of the finite ones): the fixed
        threshold itself, or the one a budget meant for this run."""
        finite = [t for t in self.thresholds if math.isfinite(t)]
        return statistics.median(finite) if finite else self.decision.threshold

    @property
    def span(self) -> tuple[float, float] | None:
        """The lowest and highest finite threshold the positions met; None without any."""
        finite = [t for t in self.thresholds if math.isfinite(t)]
        return (min(finite), max(finite)) if finite else None


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

    @cached_property
    def index_of(self) -> dict[int, int]:
        """The index in `slots` of each accepted event, by the event's identity."""
        return {id(s.token): i for i, s in enumerate(self.slots)}

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

    def whatif_counts(self, threshold: float, rule: Rule | str = "perplexity") -> tuple[int, int, int]:
        """(positions that would go to the target, positions with the rule's number, all positions)."""
        return self.at_threshold(threshold, rule).counts

    def at_threshold(self, threshold: float, rule: Rule | str = "perplexity") -> WhatIf:
        """Who would have written each position had `rule` chosen at `threshold` (None where a position
        lacks the rule's number, every one if the run has none)."""
        rule = as_rule(rule)
        verdicts = tuple(s.would_escalate(threshold, rule) for s in self.slots)
        return WhatIf(Decision(rule.name, threshold), verdicts, (threshold,) * len(verdicts))

    def whatif(self, decision: Decision, prior: Sequence[float] | None = None) -> WhatIf | None:
        """Who would have written each position had `decision` chosen, by the draft's recorded numbers;
        None where the run has none by its rule. A budget is replayed as `budget.replay` does (its
        tracker over the positions in order, from the calibration's `prior`; None: from the rule's
        default), keeping the threshold each position met; a position the draft never proposed a token
        for (prompt lookup's, the big model's extra one) is passed over, as the engine never judged it."""
        rule = as_rule(decision.rule)
        if not self.scored_by(rule):
            return None
        if decision.budget is None:
            return self.at_threshold(decision.threshold, rule)
        scores = [s.score(rule) for s in self.slots]
        tracker = BudgetTracker(rule, decision.budget, prior)
        verdicts, thresholds = [], []
        for slot, score in zip(self.slots, scores):
            if slot.reading is None:
                verdicts.append(None)
                thresholds.append(tracker.threshold)
                continue
            escalated = tracker.judge(score)
            verdicts.append(None if score is None else escalated)
            thresholds.append(tracker.used[-1])
        return WhatIf(decision, tuple(verdicts), tuple(thresholds))
