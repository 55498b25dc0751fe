"""A generation run to its end for its tokens and Summary, and several runs weighed together by their tokens
(the big model's perplexity of their texts, and its agreement with them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

from ..engine.config import GenerationConfig
from ..engine.events import Summary, TokenEvent


class Scored(Protocol):
    """What the averages read: a Summary's (`scored`), or a task's Answer."""

    n_tokens: int
    text_ppl_by_target: float | None
    target_agreement: float | None


@dataclass(frozen=True)
class ScoredText:
    """A Summary as the averages read it: its tokens and its quality figures (None: not scored)."""

    n_tokens: int
    text_ppl_by_target: float | None
    target_agreement: float | None


def scored(summary: Summary) -> ScoredText:
    """A Summary's tokens and quality figures, for `text_ppl` and `target_agreement`."""
    q = summary.quality
    return ScoredText(summary.counts.n_tokens, q.text_ppl_by_target if q else None, q.target_agreement if q else None)


def written(engine: Any, prompt: str, config: GenerationConfig) -> tuple[list[int], Summary]:
    """One generation, run to its end: the token ids it kept, and its Summary."""
    tokens: list[int] = []
    summary = None
    for event in engine.generate(prompt, config):
        if isinstance(event, TokenEvent) and event.accepted:
            tokens.append(event.token_id)
        elif isinstance(event, Summary):
            summary = event
    if summary is None:
        raise RuntimeError("the generation ended without a summary")
    return tokens, summary


def text_ppl(runs: Iterable[Scored], *, every: bool = False) -> float | None:
    """The big model's perplexity of several texts, weighted by tokens; None if none (`every`: any) lacks one."""
    with_tokens = [r for r in runs if r.n_tokens]
    rated = [r for r in with_tokens if r.text_ppl_by_target]
    if not rated or (every and len(rated) < len(with_tokens)):
        return None
    nll = sum(r.n_tokens * math.log(r.text_ppl_by_target) for r in rated)
    return math.exp(nll / sum(r.n_tokens for r in rated))


def target_agreement(runs: Iterable[Scored]) -> float | None:
    """The runs' `target_agreement` weighted by their tokens; None if no run with tokens has one."""
    rated = [(r.target_agreement, r.n_tokens) for r in runs if r.target_agreement is not None]
    n = sum(k for _, k in rated)
    return sum(a * k for a, k in rated) / n if n else None
