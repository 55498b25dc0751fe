"""Slots on the real pair: four requests at once over one pair of models.

On this CPU a batch of several tokens gives logits up to about 0.7 away from one token alone (FIELD-NOTES), so a
greedy text written beside others may leave its text alone where the two likeliest tokens were nearly tied.
The check: every text is its text alone, or the two first differ at a position where, alone, the target's two
likeliest tokens were within one logit of each other."""

from __future__ import annotations

import math
import threading

import pytest

from cascade import Engine, ModelConfig, load_pair
from cascade.engine.config import GenerationConfig
from cascade.engine.events import Summary, TokenEvent

pytestmark = pytest.mark.real

PROMPTS = ["Write a Python function that returns the n-th Fibonacci number.",
           "Explain what a hash table is in two sentences.",
           "Write a Python function that checks whether a string is a palindrome.",
           "Give three tips for writing clear commit messages."]
NEAR_TIE_LOGITS = 1.0


@pytest.fixture(scope="module")
def slots(real_pair) -> list[Engine]:
    draft, target = real_pair
    return Engine(load_pair(ModelConfig(draft=draft, target=target, n_threads=2, n_ctx=1024, parallel=4))).slots()


def written(engine: Engine, prompt: str, config: GenerationConfig) -> tuple[list[TokenEvent], Summary]:
    *events, summary = engine.generate(prompt, config, score=False)
    return [e for e in events if isinstance(e, TokenEvent) and e.accepted], summary


def four_at_once(slots: list[Engine], config: GenerationConfig) -> list:
    """The four prompts written at once, one slot each: what each wrote."""
    together: list = [None] * len(PROMPTS)

    def one(i: int) -> None:
        together[i] = written(slots[i], PROMPTS[i], config)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return together


def test_four_requests_at_once_write_their_texts_alone_up_to_near_ties_in_shared_steps(slots):
    """How much faster four at once are is a benchmark (`python -m lab at-once`, BENCHMARKS.md), not a test."""
    config = GenerationConfig(policy="target", max_tokens=48, temperature=0.0, alternatives=2)
    alone = [written(slots[0], p, config) for p in PROMPTS]
    scheduler = slots[0].pair.draft.context.scheduler
    steps, batched = scheduler.steps, scheduler.batched_calls
    together = four_at_once(slots, config)
    batched_per_step = (scheduler.batched_calls - batched) / (scheduler.steps - steps)
    for (events, summary), (beside_events, beside) in zip(alone, together):
        if beside.text == summary.text:
            continue
        ids, beside_ids = [e.token_id for e in events], [e.token_id for e in beside_events]
        position = next((i for i, (a, b) in enumerate(zip(ids, beside_ids)) if a != b), None)
        if position is None:  # one ended a token earlier: the end-of-text token itself was the near tie
            continue
        (_, p1), (_, p2) = events[position].target_top[:2]
        assert math.log(p1) - math.log(p2) < NEAR_TIE_LOGITS, (position, summary.text, beside.text)
    # Four at a time: nearly every step decoded all four (3.75 calls a step on an idle machine).
    assert batched_per_step > 2.5
