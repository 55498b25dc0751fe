"""Each rule's curve over teacher-forced `Position`s: swept over its threshold, the share of positions sent to
the target (x) against the share whose kept token equals the target's (y)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .reading import DraftReading
from .rules import RULE_TABLE, Rule


@dataclass(frozen=True)
class Position:
    """One position of the target's text, as the draft saw it."""

    reading: DraftReading  # for the draft's own choice (its argmax), the router's score included
    target_token: int
    x: np.ndarray = field(repr=False)  # the router's features (router.FEATURES)

    @property
    def draft_token(self) -> int:
        return self.reading.top_token

    @property
    def differs(self) -> bool:
        """The label the router learns: the draft's choice is not the target's token."""
        return self.draft_token != self.target_token


@dataclass(frozen=True)
class Curve:
    """One rule's teacher-forced trade-off, swept over its threshold."""

    rule: str
    shares: tuple[float, ...]  # share of positions sent to the target, 0 to 1, increasing
    agreements: tuple[float, ...]  # share of positions whose kept token equals the target's, non-decreasing
    thresholds: tuple[float | None, ...]  # the rule's threshold that gives each point (None at share 1)

    def share_at(self, agreement: float) -> float | None:
        """The least share of positions the target must write for this agreement (None above 1)."""
        return next((share for share, agreed in zip(self.shares, self.agreements) if agreed >= agreement - 1e-12),
                    None)

    def index_near(self, share: float) -> int:
        return min(range(len(self.shares)), key=lambda i: abs(self.shares[i] - share))

    def threshold_for_share(self, share: float) -> float | None:
        """The threshold whose share of escalations is closest to `share`."""
        i = self.index_near(share)
        if self.thresholds[i] is None:  # share 1: everything escalates; the rule's own extreme
            rule = RULE_TABLE[self.rule]
            return rule.high if rule.below else rule.low
        return self.thresholds[i]

    @property
    def auc(self) -> float:
        """The area under the curve over shares 0 to 1 (1 would be perfect agreement sending nothing)."""
        trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy 2 renamed it; the project takes 1.26 too
        return float(trapezoid(self.agreements, self.shares))

    def to_dict(self, agreements: Iterable[float] = (0.9, 0.95, 0.99)) -> dict:
        return {"rule": self.rule, "auc": self.auc,
                "share_at_agreement": {f"{a:g}": self.share_at(a) for a in agreements},
                "shares": list(self.shares), "agreements": list(self.agreements),
                "thresholds": list(self.thresholds)}


def points(doubt: np.ndarray, differs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Most doubtful first, ties together: (shares, agreements) per point, doubts in order, each point's last index."""
    n = len(doubt)
    if n == 0:
        raise ValueError("no positions to draw a curve from")
    doubt = np.asarray(doubt, dtype=np.float64)
    order = np.argsort(-doubt, kind="stable")
    doubt, wrong = doubt[order], np.asarray(differs, dtype=bool)[order]
    cuts = np.flatnonzero(np.append(doubt[1:] != doubt[:-1], True))  # the last position of each tie
    fixed = np.cumsum(wrong)[cuts]
    total_wrong = int(wrong.sum())
    shares = np.concatenate([[0.0], (cuts + 1) / n])
    agreements = np.concatenate([[1.0 - total_wrong / n], 1.0 - (total_wrong - fixed) / n])
    return shares, agreements, doubt, cuts


def curve(rule: Rule, scores: Sequence[float], differs: Sequence[bool]) -> Curve:
    """`rule`'s curve over these scores and labels (`differs`), each point with the threshold giving it."""
    shares, agreements, doubt, cuts = points(np.array([rule.doubt(s) for s in scores], dtype=np.float64), differs)
    n = len(doubt)
    # The threshold of each point: between the last escalated score and the next one, in the rule's units.
    first = _threshold_between(rule, None, doubt[0])  # nothing escalates: just past the most doubtful
    thresholds = [first] + [None if i + 1 == n else _threshold_between(rule, doubt[i], doubt[i + 1]) for i in cuts]
    return Curve(rule.name, tuple(shares.tolist()), tuple(agreements.tolist()), tuple(thresholds))


def _threshold_between(rule: Rule, escalated: float | None, kept: float) -> float:
    """A threshold that escalates the score `escalated` (None: nothing) and keeps `kept` (as doubts)."""
    score_kept = rule.doubt(kept)  # `doubt` is its own inverse: back to the rule's units
    if escalated is None:
        # Keep everything: the most doubtful score itself is not escalated (escalation is strict).
        return float(min(max(score_kept, rule.low), rule.high))
    score_escalated = rule.doubt(escalated)
    if rule.log_scale and score_kept > 0 and score_escalated > 0 and math.isfinite(score_escalated):
        middle = math.sqrt(score_kept * score_escalated)
    else:
        middle = (score_kept + score_escalated) / 2 if math.isfinite(score_escalated) else score_kept
    if not rule.escalates(score_escalated, middle) or rule.escalates(score_kept, middle):
        middle = score_kept  # scores too close to split in the middle: the kept one is the threshold
    return float(min(max(middle, rule.low), rule.high))


def rule_curves(positions: Sequence[Position]) -> dict[str, Curve]:
    """One curve per rule (every rule with a score at every position: `learned` only with a router)."""
    out = {}
    differs = [p.differs for p in positions]
    for name, rule in RULE_TABLE.items():
        scores = [rule.score(p.reading) for p in positions]
        if positions and all(s is not None for s in scores):
            out[name] = curve(rule, scores, differs)
    return out
