"""The token budget's calibration, and the check that a budget delivers its share.

`calibrate`: the draft writes its own greedy answer to each prompt of a set no evaluation uses (the router's
train split by default), with the rule scores of every position recorded (the learned rule's too, where a
router is loaded), and their quantiles per mode become the shipped calibration (`routing/budget.py`). The
draft's own text is what a cascade mostly writes at a small budget, so its scores are the ones the tracker
meets.

`check_budgets`: real cascade runs at several budgets on prompts the calibration never saw, and the share
the big model wrote in each: the budget's promise, measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cascade.engine.analysis import slots
from cascade.engine.config import GenerationConfig
from cascade.engine.events import Summary, TokenEvent
from cascade.routing.budget import Calibration
from cascade.routing.identity import fingerprint
from cascade.routing.rules import RULES
from lab.prompts import PromptItem

Log = Callable[[str], None]
# Quantile levels a calibration stores: 0, 0.5%, ..., 100%.
LEVELS = np.linspace(0.0, 1.0, 201)


def quantiles_of(scores: Mapping[str, Mapping[str, Iterable[float]]], name: str, fingerprint: str, text: str
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


def save(calibration: Calibration, path: Path) -> None:
    """The calibration as the JSON file `Calibration.load` reads (a shipped one: cascade/routing/calibrations/)."""
    c = calibration
    Path(path).write_text(json.dumps({
        "name": c.name, "fingerprint": c.fingerprint, "text": c.text, "positions": dict(c.positions),
        "quantiles": {m: {r: [round(float(v), 6) for v in q] for r, q in rules.items()}
                      for m, rules in c.quantiles.items()}}, indent=1) + "\n")


def draft_scores(engine, items: Sequence[PromptItem], max_tokens: int, log: Log = lambda _m: None,
                 ) -> dict[str, dict[str, list[float]]]:
    """{mode: {rule: every position's score}} along the draft's own greedy answers (a cascade at budget 0:
    the big model writes nothing, every position is read as a cascade reads it)."""
    rules = [r for r in RULES if r != "learned" or engine.router is not None]
    scores: dict[str, dict[str, list[float]]] = {}
    for i, item in enumerate(items, 1):
        config = GenerationConfig(policy="cascade", budget=0.0, max_tokens=max_tokens, chat=item.chat,
                                  rule="learned" if engine.router is not None else "perplexity", alternatives=0)
        events = [e for e in engine.generate(item.prompt, config, score=False) if isinstance(e, TokenEvent)]
        mode = scores.setdefault("chat" if item.chat else "raw", {r: [] for r in rules})
        for slot in slots(events):
            for rule in rules:
                value = slot.score(rule)
                if value is not None:
                    mode[rule].append(value)
        log(f"{i}/{len(items)}: {len(events)} positions")
    return scores


def calibrate(engine, items: Sequence[PromptItem], max_tokens: int, name: str, text: str,
              log: Log = lambda _m: None) -> Calibration:
    """The calibration of the loaded draft on these prompts."""
    scores = draft_scores(engine, items, max_tokens, log)
    return quantiles_of(scores, name, fingerprint(engine.pair.draft_path), text)


@dataclass(frozen=True)
class BudgetRun:
    prompt: str
    kind: str
    chat: bool
    budget: float
    n_tokens: int
    n_target_tokens: int
    threshold: float | None
    wall_s: float

    @property
    def share(self) -> float:
        return self.n_target_tokens / self.n_tokens if self.n_tokens else 0.0


def check_budgets(engine, items: Sequence[PromptItem], budgets: Sequence[float], rule: str, max_tokens: int,
                  log: Log = lambda _m: None) -> list[BudgetRun]:
    """A cascade at each budget on each prompt; the share the big model wrote in each."""
    runs = []
    for item in items:
        for budget in budgets:
            config = GenerationConfig(policy="cascade", rule=rule, budget=budget, max_tokens=max_tokens,
                                      chat=item.chat, alternatives=0)
            started = time.perf_counter()
            summary = next(e for e in engine.generate(item.prompt, config, score=False) if isinstance(e, Summary))
            c, meant = summary.counts, summary.budget.threshold if summary.budget is not None else None
            runs.append(BudgetRun(item.prompt, item.kind, item.chat, budget, c.n_tokens, c.n_target_tokens, meant,
                                  time.perf_counter() - started))
            log(f"{item.kind:>12} budget {budget:.0%}: {c.n_target_tokens}/{c.n_tokens} "
                f"({runs[-1].share:.1%}), threshold {meant}")
    return runs


def budget_table(runs: Sequence[BudgetRun]) -> str:
    """Per budget: the share delivered over all tokens, per kind of text (code, other), and the spread of
    the answers' own shares."""
    lines = ["| budget | delivered, all tokens | code | other | answers within ±3 points | median threshold |",
             "|---|---|---|---|---|---|"]
    for budget in sorted({r.budget for r in runs}):
        at = [r for r in runs if r.budget == budget and r.n_tokens]

        def share(rs):
            n = sum(r.n_tokens for r in rs)
            return f"{sum(r.n_target_tokens for r in rs) / n:.1%} ({n} tokens)" if n else "–"

        within = sum(abs(r.share - budget) <= 0.03 for r in at)
        thresholds = [r.threshold for r in at if r.threshold is not None]
        lines.append(f"| {budget:.0%} | {share(at)} | {share([r for r in at if r.kind == 'code'])} | "
                     f"{share([r for r in at if r.kind != 'code'])} | {within} of {len(at)} | "
                     f"{np.median(thresholds) if thresholds else float('nan'):.3g} |")
    return "\n".join(lines)
