"""A generation as the bench reads it: run to its end for the tokens it kept and its Summary, and several
runs weighed together (the big model's perplexity of their texts, and its agreement with them).

The side-by-side bench (`run.py`), the rules' evaluation (`routers.py`) and the tasks (`tasks_results.py`)
all report these two averages. Each weighs a run by its tokens, so that a long text counts for all it holds.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Protocol

from ..engine.config import GenerationConfig
from ..engine.events import Summary, TokenEvent


class Scored(Protocol):
    """What the averages read: a Summary, or a task's Answer."""

    n_tokens: int
    text_ppl_by_target: float | None
    target_agreement: float | None


def written(engine: Any, prompt: str, config: GenerationConfig) -> tuple[list[int], Summary]:
    """One generation, run to its end: the token ids it kept, and its Summary."""
    tokens: list[int] = []
    summary = None
    for event in engine.generate(prompt, config):
        if isinstance(event, TokenEvent):
            if event.accepted:
                tokens.append(event.token_id)
        elif isinstance(event, Summary):
            summary = event
    if summary is None:
        raise RuntimeError("the generation ended without a summary")
    return tokens, summary


def summary_of(engine: Any, prompt: str, config: GenerationConfig) -> Summary:
    """One generation's Summary."""
    return written(engine, prompt, config)[1]


def text_ppl(runs: Iterable[Scored], *, every: bool = False) -> float | None:
    """The big model's perplexity of several texts together: exp of the mean negative log-likelihood over
    all their tokens (each run's `text_ppl_by_target` weighted by its tokens). None if no run has one; with
    `every`, None unless every run with tokens has one (a cached answer keeps no infinite perplexity, and
    the mean of the others would read as finite)."""
    with_tokens = [r for r in runs if r.n_tokens]
    scored = [r for r in with_tokens if r.text_ppl_by_target]
    if not scored or (every and len(scored) < len(with_tokens)):
        return None
    nll = sum(r.n_tokens * math.log(r.text_ppl_by_target) for r in scored)
    return math.exp(nll / sum(r.n_tokens for r in scored))


def target_agreement(runs: Iterable[Scored]) -> float | None:
    """The share of all the runs' tokens the big model would have written itself after the same prefix:
    each run's `target_agreement` weighted by its tokens. None if no run with tokens has one."""
    scored = [(r.target_agreement, r.n_tokens) for r in runs if r.target_agreement is not None]
    n = sum(k for _, k in scored)
    return sum(a * k for a, k in scored) / n if n else None
