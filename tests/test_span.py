"""The escalation grain (`GenerationConfig.span`): once the rule escalates a position, how much the target
writes: that token, a span while it is unsure itself, or the rest of the line; and a budget counting spans."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cascade import GenerationConfig
from cascade.engine.events import Summary
from cascade.engine.policies import SPAN_MAX, SURE, span_goes_on
from cascade.routing.budget import HORIZON

from .helpers import engine_for, run


def test_when_a_span_goes_on():
    assert not span_goes_on("token", 1, 0.1, "x")
    assert span_goes_on("sure", 1, SURE - 0.01, "x") and not span_goes_on("sure", 1, SURE, "x")
    assert span_goes_on("line", 3, 1.0, " x") and not span_goes_on("line", 3, 0.1, "x\n")
    assert not span_goes_on("line", SPAN_MAX, 0.1, "x") and not span_goes_on("sure", SPAN_MAX, 0.1, "x")


def test_span_is_a_checked_setting():
    with pytest.raises(ValueError, match="unknown span 'word'"):
        GenerationConfig(span="word").validate()
    assert GenerationConfig.parse({"span": "line"}).span == "line"


def _spans(events):
    """Runs of accepted tokens the target wrote, each starting where the rule escalated a draft token."""
    accepted = [e for e in events if e.accepted]
    escalated_at = {e.position for e in events if e.status == "escalated"}
    spans, current = [], None
    for e in accepted:
        if e.position in escalated_at:
            current = [e]
            spans.append(current)
        elif current is not None and e.source == "target":
            current.append(e)
        else:
            current = None
    return spans


@pytest.mark.parametrize("span", ["line", "sure"])
def test_the_target_writes_on_for_the_span_then_hands_back(toy, span):
    engine = engine_for(toy.small, toy.related)
    events, summary = run(engine, "Once upon a time", policy="cascade", rule="perplexity", threshold=3.0,
                          span=span, max_tokens=160, chat=False)
    spans = _spans(events)
    assert spans, "the rule escalated nothing"
    for s in spans:
        for i, e in enumerate(s):
            p = math.exp(-math.log(e.target_ppl))  # the target's probability of its own token
            goes_on = span_goes_on(span, i + 1, p, engine.pair.piece(e.token_id))
            last = i == len(s) - 1
            if not last:
                assert goes_on, (span, i, e)
            elif summary.counts.n_tokens > e.position + 1:  # the span ended before the answer did
                assert not goes_on, (span, i, e)
    assert any(len(s) > 1 for s in spans)
    # The draft proposes nothing inside a span: every position is written once.
    assert [e.position for e in events if e.accepted] == list(range(summary.counts.n_tokens))


def test_token_grain_is_the_seeds_one_token(toy):
    engine = engine_for(toy.small, toy.related)
    events, _ = run(engine, "Once upon a time", policy="cascade", rule="perplexity", threshold=3.0, max_tokens=80,
                    chat=False)
    by_target = [e for e in events if e.accepted and e.source == "target"]
    escalated = {e.position for e in events if e.status == "escalated"}
    assert by_target and all(e.position in escalated for e in by_target)


@pytest.mark.parametrize("span", ["sure", "line"])
def test_a_budget_counts_the_span_as_the_targets(toy, span):
    engine = engine_for(toy.small, toy.related)
    shares = []
    for prompt in ("The cat sat on the mat", "Once upon a time", "The dog ran"):
        events = list(engine.generate(prompt, GenerationConfig(rule="perplexity", budget=0.2, span=span,
                                                               max_tokens=200, chat=False), score=False))
        summary = events[-1]
        assert isinstance(summary, Summary) and summary.counts.n_tokens >= 50
        shares.append(summary.counts.target_share)
    assert abs(float(np.mean(shares)) - 0.2) <= 0.05, shares


@pytest.mark.parametrize("span", ["sure", "line"])
def test_a_span_ends_when_the_budget_is_spent(toy, span):
    """A budget on a short answer: a span stops once the budget owes nothing, so the big model's tokens never
    pass what the tracker allows (the budget over the answer and its horizon, and the one position that tips
    it), where a whole line would have doubled the share asked."""
    engine = engine_for(toy.small, toy.related)
    spans = 0
    for prompt in ("The cat sat on the mat", "Once upon a time", "The dog ran", "A long time ago"):
        events = list(engine.generate(prompt, GenerationConfig(rule="perplexity", budget=0.3, span=span,
                                                               max_tokens=40, chat=False), score=False))
        summary = events[-1]
        c = summary.counts
        assert c.n_target_tokens <= 0.3 * (c.n_tokens + HORIZON) + 1, (prompt, c.n_target_tokens)
        spans += len([s for s in _spans(events[:-1]) if len(s) > 1])
    assert spans, "no span went on: the test shows nothing"
