"""A token budget turned into the rule's threshold as the answer goes: each position's threshold is the (1 - asked)
quantile of the draft's calibration (weighing `PRIOR_WEIGHT` positions) and the scores seen so far, `asked`
bringing the share back on budget over `HORIZON` positions; nothing looks ahead."""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from .identity import fingerprint
from .rules import RULE_TABLE, Rule

CALIBRATIONS = Path(__file__).resolve().parent / "calibrations"
# A shorter HORIZON tracks the budget closer; a longer one picks the most doubtful positions more often.
PRIOR_WEIGHT = 16
HORIZON = 8


@dataclass(frozen=True)
class Calibration:
    """One draft's rule scores on calibration text, as quantiles per mode ("chat", "raw") and rule."""

    name: str  # the pair, in words
    fingerprint: str  # the draft file's (`fingerprint`)
    text: str  # what the scores were read on, in words
    quantiles: Mapping[str, Mapping[str, Sequence[float]]]
    positions: Mapping[str, int]  # positions read, per mode

    @classmethod
    def load(cls, path: Path) -> Calibration:
        d = json.loads(Path(path).read_text())
        return cls(d["name"], d["fingerprint"], d["text"], d["quantiles"], d["positions"])

    def prior(self, rule: str, chat: bool) -> Sequence[float] | None:
        """The quantiles for this rule and mode (the other mode's if this one has none), or None."""
        for mode in ("chat", "raw") if chat else ("raw", "chat"):
            if rule in self.quantiles.get(mode, {}):
                return self.quantiles[mode][rule]
        return None


@cache
def shipped() -> tuple[Calibration, ...]:
    """The calibrations that ship with the project."""
    return tuple(Calibration.load(p) for p in sorted(CALIBRATIONS.glob("*.json")))


@lru_cache(maxsize=16)
def calibration_for(draft: Path | str) -> tuple[Calibration | None, bool]:
    """(the shipped calibration for this draft file, whether it is its own): else the first shipped, or None."""
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
    """Judges one answer's positions so that the share escalated tracks `budget` (the module says how)."""

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

    def asked(self) -> float:
        """The share to escalate from here: the budget, corrected over the horizon for what was delivered."""
        owed = self.budget * (self.n_judged + self.horizon) - self.n_escalated
        return min(max(owed / self.horizon, 0.0), 1.0)

    def _doubt_threshold(self) -> float:
        """The doubt above which the next position escalates: the (1 - asked) quantile of prior and seen."""
        level = 1.0 - self.asked()
        if level >= 1.0:
            return np.inf
        if level <= 0.0:
            return -np.inf
        if self.prior is None and not self.seen:
            return self.rule.doubt(self.rule.default)
        seen = np.asarray(self.seen)
        candidates = np.unique(seen if self.prior is None else np.concatenate([self.prior, seen]))
        below = np.searchsorted(seen, candidates, side="right").astype(float)
        if self.prior is not None:
            below += self.prior_weight * np.searchsorted(self.prior, candidates, side="right") / len(self.prior)
        cdf = below / (self.prior_weight + len(seen))
        at = int(np.searchsorted(cdf, level - 1e-12, side="left"))
        return float(candidates[min(at, len(candidates) - 1)])

    @property
    def threshold(self) -> float:
        """The threshold the next position meets, in the rule's units."""
        return self.rule.doubt(self._doubt_threshold())  # `doubt` is its own inverse

    def judge(self, score: float | None) -> bool:
        """Whether a position with this score (None: never) goes to the big model; the tracker learns from it."""
        threshold = self._doubt_threshold()
        self.used.append(self.rule.doubt(threshold))
        self.n_judged += 1
        if score is None or not np.isfinite(score):
            return False
        doubt = self.rule.doubt(score)
        escalated = doubt > threshold
        bisect.insort(self.seen, doubt)
        self.n_escalated += escalated
        return escalated

    def taken(self) -> None:
        """A position the big model wrote unjudged (an escalated span went on): counted as delivered."""
        self.n_judged += 1
        self.n_escalated += 1

    @property
    def meant(self) -> float | None:
        """The median finite threshold this answer's positions met, in the rule's units; None before any."""
        finite = [t for t in self.used if np.isfinite(t)]
        return float(np.median(finite)) if finite else None


def tracker_for(rule: Rule | str, budget: float, draft: Path | str | None, chat: bool) -> BudgetTracker:
    """The tracker for a request, from the draft's calibration, with `source` saying which it started from."""
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

