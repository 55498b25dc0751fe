"""A run's recorded `TokenEvent`s read for every view: who wrote each position, what the draft proposed there,
and what-ifs, which replay the draft's numbers under another `Decision` position by position, as the engine would."""

from __future__ import annotations

import math
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
    """One output position: its token, and the proposal the target replaced there (None: kept, or none made)."""

    token: TokenEvent
    proposal: TokenEvent | None

    @property
    def by_target(self) -> bool:
        return self.token.source == "target"

    @property
    def by_lookup(self) -> bool:
        """Copied by prompt lookup (and checked by the target)."""
        return self.token.source == "lookup"

    @property
    def reading(self) -> TokenEvent | None:
        """The event carrying the draft's reading of its own choice here; None where it proposed nothing."""
        event = self.proposal if self.by_target else self.token
        return event if event is not None and event.draft_ppl is not None else None

    @property
    def routing_ppl(self) -> float | None:
        """The draft's perplexity of its own choice here."""
        return self.score("perplexity")

    def score(self, rule: Rule | str = "perplexity") -> float | None:
        """The rule's score for this position, where recorded."""
        reading = self.reading
        return None if reading is None else as_rule(rule).score(reading)

    def would_escalate(self, threshold: float, rule: Rule | str = "perplexity") -> bool | None:
        """Whether `rule` at `threshold` would send this position to the target; None without its score."""
        score = self.score(rule)
        return None if score is None else as_rule(rule).escalates(score, threshold)


@dataclass(frozen=True)
class Decision:
    """How the big model's positions are chosen: `rule` at `threshold`, or at the threshold a `budget` sets."""

    rule: str
    threshold: float
    budget: float | None = None

    def same_as(self, other: "Decision") -> bool:
        """Whether both choose the same positions: same rule, and same budget or (with none) threshold."""
        return (self.rule == other.rule and self.budget == other.budget
                and (self.budget is not None or self.threshold == other.threshold))


def asked_decision(run: Decision, threshold: float | None = None, rule: str | None = None,
                   budget: float | None = None) -> Decision | None:
    """The what-if asked of a run decided by `run`; None where nothing is asked or it is what the run did."""
    if threshold is None and rule is None and budget is None:
        return None
    asked = Decision(rule or run.rule, run.threshold if threshold is None else threshold,
                     run.budget if threshold is None and budget is None else budget)
    return None if asked.same_as(run) else asked


@dataclass(frozen=True)
class RunView:
    """A run as it was written (`run`), or the what-if asked of it: another `threshold`, `rule` or `budget`."""

    run: Decision
    threshold: float | None = None
    rule: str | None = None
    budget: float | None = None
    prior: Sequence[float] | None = None

    @property
    def asked(self) -> Decision | None:
        """The what-if's decision (`asked_decision`); None: the run as it was."""
        return asked_decision(self.run, self.threshold, self.rule, self.budget)

    def whatif(self, routing: Routing) -> WhatIf | None:
        """The what-if asked, re-read from `routing`; None where none is asked or the run has no scores."""
        asked = self.asked
        return routing.whatif(asked, self.prior) if asked is not None else None


@dataclass(frozen=True)
class WhatIf:
    """Per slot, had `decision` chosen: True the big model, False the small, None without the rule's score;
    and the threshold each position met."""

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
    def span(self) -> tuple[float, float] | None:
        """The lowest and highest finite threshold the positions met; None without any."""
        finite = [t for t in self.thresholds if math.isfinite(t)]
        return (min(finite), max(finite)) if finite else None


def slots(events: Iterable[TokenEvent]) -> list[Slot]:
    """The accepted tokens in order, each with the latest discarded proposal at its position since the
    previous accepted token (later discards, the rest of a rejected batch, are stale)."""
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
        """Whether the draft scored any position (so another threshold could route differently)."""
        return any(s.routing_ppl is not None for s in self.slots)

    def scored_by(self, rule: Rule | str) -> bool:
        """Whether any position has the rule's score."""
        return any(s.score(rule) is not None for s in self.slots)

    @property
    def n_by_target(self) -> int:
        return sum(s.by_target for s in self.slots)

    @property
    def has_lookup(self) -> bool:
        """Whether prompt lookup proposed any token of this run (kept or not)."""
        return any(e.source == "lookup" for e in self.events)

    def at_threshold(self, threshold: float, rule: Rule | str = "perplexity") -> WhatIf:
        """The what-if of `rule` at a fixed `threshold`."""
        rule = as_rule(rule)
        verdicts = tuple(s.would_escalate(threshold, rule) for s in self.slots)
        return WhatIf(Decision(rule.name, threshold), verdicts, (threshold,) * len(verdicts))

    def whatif(self, decision: Decision, prior: Sequence[float] | None = None) -> WhatIf | None:
        """The what-if of `decision` by the recorded scores (a budget replays from `prior`); None without them."""
        rule = as_rule(decision.rule)
        if not self.scored_by(rule):
            return None
        if decision.budget is None:
            return self.at_threshold(decision.threshold, rule)
        tracker = BudgetTracker(rule, decision.budget, prior)
        verdicts, thresholds = [], []
        for slot in self.slots:
            score = slot.score(rule)
            judged = slot.reading is not None  # a position never judged is passed over
            escalated = tracker.judge(score) if judged else None
            verdicts.append(None if score is None else escalated)
            thresholds.append(tracker.used[-1] if judged else tracker.threshold)
        return WhatIf(decision, tuple(verdicts), tuple(thresholds))
