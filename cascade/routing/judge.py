"""One `Judge` per generation: read the draft's row, add the router's score, decide at the threshold or
budget, and time it (`routing_s`, `router_s`)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Sequence

import numpy as np

from .budget import BudgetTracker
from .reading import DraftReading, read_row
from .router import Router, Trail
from .rules import Rule


class Judge:
    def __init__(self, rule: Rule, threshold: float, router: Router | None = None, alternatives: int = 0,
                 classify: Callable[[int], Sequence[float]] = lambda _token: (),
                 budget: BudgetTracker | None = None) -> None:
        self.rule, self.threshold, self.router, self.alternatives = rule, threshold, router, alternatives
        self.budget = budget  # set: it chooses each position's threshold, and `threshold` is not used
        self.classify = classify  # a token's class flags, as the router reads them (`router.token_class`)
        self.trail = Trail()  # the draft's readings at the output's positions, for the router's history features
        self.routing_s = 0.0  # time spent reading the draft's rows and judging them
        self.router_s = 0.0  # of which the router: its features and its score

    @property
    def wants_hidden(self) -> bool:
        """Whether the router reads the draft's hidden state (the draft then returns it with its row)."""
        return self.router is not None and self.router.n_hidden > 0

    def read(self, row: np.ndarray, token: int, position: int, hidden: np.ndarray | None = None,
             ahead: Sequence[DraftReading | None] = ()) -> DraftReading:
        """The draft's reading for `token` with the router's score; `ahead`: pending proposals (None: lookup's)."""
        started = time.perf_counter()
        reading = read_row(row, token, self.alternatives)
        if self.router is not None:
            scoring = time.perf_counter()
            x = self.trail.features(reading, self.classify(token), position, hidden,
                                    ahead=[trail_item(r, r and r.draft_ppl) for r in ahead])
            reading = dataclasses.replace(reading, draft_score=self.router.probability(x))
            self.router_s += time.perf_counter() - scoring
        self.routing_s += time.perf_counter() - started
        return reading

    def doubtful(self, reading: DraftReading) -> bool:
        """Whether the rule sends this position to the target (call once per position: a budget counts it)."""
        score = self.rule.score(reading)
        return self.budget.judge(score) if self.budget is not None else self.rule.escalates(score, self.threshold)

    def taken(self) -> None:
        """The target wrote a position the rule did not judge (a span went on); a budget counts it."""
        if self.budget is not None:
            self.budget.taken()

    def affords(self) -> bool:
        """Whether an escalated span may go on: always at a threshold; with a budget, while it owes tokens."""
        return self.budget is None or self.budget.asked() > 0

    def written(self, reading: DraftReading | None, draft_ppl: float | None) -> None:
        """A token was written at the next position: the draft's reading there and its perplexity, for the trail."""
        self.trail.items.append(trail_item(reading, draft_ppl))


def trail_item(reading: DraftReading | None, draft_ppl: float | None) -> tuple[float, float] | None:
    """A position of the trail: the draft's entropy there and its log-probability of the token written."""
    if reading is None or draft_ppl is None:
        return None
    return Trail.item(reading.draft_entropy, -math.log(draft_ppl) if math.isfinite(draft_ppl) else -math.inf)
