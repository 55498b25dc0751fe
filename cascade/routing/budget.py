"""A token budget: the share of the tokens the big model should write, instead of a raw threshold.

A threshold means nothing across kinds of text: perplexity 5 sends 0.1% of code tokens to the big model and
9% of a chat answer's. A budget (0.10: "the big model writes one token in ten") is the same promise on both.
The engine turns it into the rule's threshold as it writes, position by position, and nothing looks ahead:

- It starts from a calibration the project ships: the rule's scores along text that no evaluation uses
  (`calibrations/*.json`, made by `python -m cascade calibrate`), as quantiles. Before any position of the
  answer is seen, the threshold is the (1 - budget) quantile of those scores.
- It follows the scores this answer has shown so far: they join the calibration's as observations (the
  calibration counts as `PRIOR_WEIGHT` positions), so a code answer, whose scores are far more certain than
  the calibration's mix, soon gets a code answer's threshold.
- It corrects what it has delivered: the share asked of the next positions is the one that would bring the
  answer back on budget over `HORIZON` positions. An answer that escalated too little asks more of the next
  ones, and the other way round.

A calibration belongs to the draft file that scored it (the rules read only the draft's row, and the learned
rule a router over the draft's features); a file is recognised by its fingerprint, not its name. For a draft
the project never calibrated, the closest it has is used, and `BudgetTracker.source` says so.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from .identity import fingerprint
from .rules import RULE_TABLE, Rule

CALIBRATIONS = Path(__file__).resolve().parent / "calibrations"
# The calibration counts as this many positions of the answer: after about as many of its own, the answer's
# scores weigh as much as the calibration's. A share that is off the budget is made good over `HORIZON`
# positions. Both chosen on synthetic scores (a draft's perplexities drawn from three spreads, one calibrated,
# as in tests/test_budget.py; 40 answers of 128 tokens per spread and budget, budgets 5-30%): the horizon trades
# tracking against choosing the most doubtful positions. At a horizon of 16 the positions escalated were the
# answer's most doubtful ones (in hindsight) 76% of the time, but an answer missed its share by up to 3.4
# points and a budget's mean by 0.7; at 8, 70%, 2.0 and 0.3 points. A calibration weighing 16 positions
# tracked a little better than 32 (a mean off by 0.3 points against 0.5).
PRIOR_WEIGHT = 16
HORIZON = 8
# Quantile levels a calibration stores: 0, 0.5%, ..., 100%.
LEVELS = np.linspace(0.0, 1.0, 201)


@dataclass(frozen=True)
class Calibration:
    """One draft's rule scores on calibration text: per mode ("chat", "raw") and rule, the scores at
    `LEVELS`, in the rule's own units."""

    name: str  # the pair, in words
    fingerprint: str  # the draft file's (`fingerprint`)
    text: str  # what the scores were read on, in words
    quantiles: Mapping[str, Mapping[str, Sequence[float]]]
    positions: Mapping[str, int]  # positions read, per mode

    @classmethod
    def load(cls, path: Path) -> Calibration:
        d = json.loads(Path(path).read_text())
        return cls(d["name"], d["fingerprint"], d["text"], d["quantiles"], d["positions"])

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps({
            "name": self.name, "fingerprint": self.fingerprint, "text": self.text, "positions": dict(self.positions),
            "quantiles": {m: {r: [round(float(v), 6) for v in q] for r, q in rules.items()}
                          for m, rules in self.quantiles.items()}}, indent=1) + "\n")

    def prior(self, rule: str, chat: bool) -> Sequence[float] | None:
        """The scores at `LEVELS` for this rule and mode (the other mode's if this one has none), or None."""
        for mode in ("chat", "raw") if chat else ("raw", "chat"):
            if rule in self.quantiles.get(mode, {}):
                return self.quantiles[mode][rule]
        return None


def calibrate(scores: Mapping[str, Mapping[str, Iterable[float]]], name: str, fingerprint: str, text: str
              ) -> Calibration:
    """A calibration from raw scores: {mode: {rule: scores at every position read}}."""
    quantiles, positions = {}, {}
    for mode, by_rule in scores.items():
        quantiles[mode] = {}
        for rule, values in by_rule.items():
            values = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
            if len(values):
                quantiles[mode][rule] = np.quantile(values, LEVELS).tolist()
                positions[mode] = max(positions.get(mode, 0), len(values))
    return Calibration(name, fingerprint, text, quantiles, positions)


@cache
def shipped() -> tuple[Calibration, ...]:
    """The calibrations that ship with the project."""
    return tuple(Calibration.load(p) for p in sorted(CALIBRATIONS.glob("*.json")))


@lru_cache(maxsize=16)
def calibration_for(draft: Path | str) -> tuple[Calibration | None, bool]:
    """(the shipped calibration for this draft file, whether it is this file's own): another's where the
    project has none for it (the first shipped), None where none ships."""
    calibrations = shipped()
    try:
        mine = fingerprint(draft)
    except OSError:
        mine = ""
    own = next((c for c in calibrations if c.fingerprint == mine), None)
    if own is not None:
        return own, True
    return (calibrations[0] if calibrations else None), False


class BudgetTracker:
    """Judges one answer's positions so that the share escalated tracks `budget` (the module says how).

    `judge(score)` says whether a position goes to the big model, and learns from it; `threshold` is the
    threshold in the rule's units that the next position meets."""

    def __init__(self, rule: Rule | str, budget: float, prior: Sequence[float] | None = None, source: str = "",
                 prior_weight: float = PRIOR_WEIGHT, horizon: int = HORIZON) -> None:
        self.rule = RULE_TABLE[rule] if isinstance(rule, str) else rule
        if not 0.0 <= budget <= 1.0:
            raise ValueError(f"budget must be between 0 and 1, got {budget}")
        self.budget, self.horizon, self.source = budget, horizon, source
        self.prior = np.sort([self.rule.doubt(v) for v in prior]) if prior is not None and len(prior) else None
        self.prior_weight = prior_weight if self.prior is not None else 0.0
        self.seen: list[float] = []  # doubts so far (larger: more doubtful), sorted
        self.n_judged = self.n_escalated = 0
        self.used: list[float] = []  # the threshold each position met, in the rule's units

    # ---- the share asked of what comes next ----------------------------------------------------------

    def asked(self) -> float:
        """The share to escalate from here: the budget, corrected by what was delivered so far over the
        horizon, within 0..1."""
        owed = self.budget * (self.n_judged + self.horizon) - self.n_escalated
        return min(max(owed / self.horizon, 0.0), 1.0)

    def _doubt_threshold(self) -> float:
        """The doubt above which the next position escalates: the (1 - asked) quantile of the calibration's
        scores (weighing `prior_weight` positions) and this answer's."""
        level = 1.0 - self.asked()
        if level >= 1.0:
            return np.inf
        if level <= 0.0:
            return -np.inf
        if self.prior is None and not self.seen:
            return self.rule.doubt(self.rule.default)
        seen = np.asarray(self.seen)
        candidates = np.concatenate([self.prior, seen]) if self.prior is not None else seen
        candidates = np.unique(candidates)
        below = np.searchsorted(seen, candidates, side="right").astype(float)
        if self.prior is not None:
            below += self.prior_weight * np.searchsorted(self.prior, candidates, side="right") / len(self.prior)
        cdf = below / (self.prior_weight + len(seen))
        at = int(np.searchsorted(cdf, level - 1e-12, side="left"))
        return float(candidates[min(at, len(candidates) - 1)])

    @property
    def threshold(self) -> float:
        """The threshold the next position meets, in the rule's units."""
        t = self._doubt_threshold()
        return -t if self.rule.below else t

    # ---- judging ---------------------------------------------------------------------------------------

    def judge(self, score: float | None) -> bool:
        """Whether this position (its rule score; None where the reading lacks it: never escalated) goes to
        the big model; the position joins what the tracker has seen."""
        threshold = self._doubt_threshold()
        self.used.append(-threshold if self.rule.below else threshold)
        self.n_judged += 1
        if score is None or not np.isfinite(score):
            return False
        doubt = self.rule.doubt(score)
        escalated = doubt > threshold
        bisect.insort(self.seen, doubt)
        self.n_escalated += escalated
        return escalated

    def taken(self) -> None:
        """A position the big model wrote without the rule judging it (an escalated span went on): it counts
        as delivered, and the threshold it met is not recorded."""
        self.n_judged += 1
        self.n_escalated += 1

    @property
    def meant(self) -> float | None:
        """The threshold the budget meant for this answer: the median of those its positions met (finite
        ones), in the rule's units; None before any."""
        finite = [t for t in self.used if np.isfinite(t)]
        return float(np.median(finite)) if finite else None


def tracker_for(rule: Rule | str, budget: float, draft: Path | str | None, chat: bool) -> BudgetTracker:
    """The tracker for a request: the draft file's own calibration where one ships, else the closest, with
    words for the Summary on which it started from."""
    rule = RULE_TABLE[rule] if isinstance(rule, str) else rule
    calibration, own = calibration_for(draft) if draft is not None else (None, False)
    prior = calibration.prior(rule.name, chat) if calibration is not None else None
    if prior is None:
        source = "the rule's default threshold (no calibration ships for this rule and draft)"
    elif own:
        source = f"the shipped calibration of this draft ({calibration.name})"
    else:
        source = (f"the calibration of another draft ({calibration.name}; this draft file is not one the project "
                  "calibrated)")
    return BudgetTracker(rule, budget, prior, source)


def replay(rule: Rule | str, budget: float, scores: Sequence[float | None], prior: Sequence[float] | None = None,
           ) -> list[bool]:
    """Which of a recorded answer's positions a budget would send to the big model (the what-if): the
    tracker over the recorded scores, in order."""
    tracker = BudgetTracker(rule, budget, prior)
    return [tracker.judge(s) for s in scores]
