"""Slots on the real pair: four requests at once over one pair of models.

By default the slots take turns, each with a cache of its own, so every request's tokens, writers and scores are
exactly its own alone (alone: one request on the same server, nobody else writing). With `batch_slots` their calls
are decoded together; on this CPU a batch of several tokens gives logits up to about 0.7 away from one token alone
(FIELD-NOTES), so a greedy text may then leave its text alone where the two likeliest tokens were nearly tied."""

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


def four_slots(real_pair, batch_slots: bool) -> list[Engine]:
    draft, target = real_pair
    return Engine(load_pair(ModelConfig(draft=draft, target=target, n_threads=2, n_ctx=1024, parallel=4,
                                        batch_slots=batch_slots))).slots()


@pytest.fixture(scope="module")
def slots(real_pair) -> list[Engine]:
    return four_slots(real_pair, batch_slots=False)


def written(engine: Engine, prompt: str, config: GenerationConfig, score: bool = False
            ) -> tuple[list[TokenEvent], Summary]:
    *events, summary = engine.generate(prompt, config, score=score)
    return [e for e in events if isinstance(e, TokenEvent)], summary


def four_at_once(slots: list[Engine], config: GenerationConfig, score: bool = False) -> list:
    """The four prompts written at once, one slot each: what each wrote."""
    together: list = [None] * len(PROMPTS)

    def one(i: int) -> None:
        together[i] = written(slots[i], PROMPTS[i], config, score)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return together


def seen(events: list[TokenEvent]) -> list[tuple]:
    """What a visitor sees of a run: each token, who wrote it, its fate, and both models' numbers for it."""
    return [(e.token_id, e.source, e.status, e.draft_ppl, e.target_ppl, e.draft_top, e.target_top) for e in events]


@pytest.mark.parametrize("policy", ["target", "cascade"])
def test_four_requests_at_once_write_exactly_their_texts_alone_writers_and_scores_included(slots, policy):
    """How fast four at once are, taking turns or batched, is a benchmark (`python -m lab at-once`)."""
    config = GenerationConfig(policy=policy, max_tokens=48, temperature=0.0, alternatives=2, budget=0.1)
    alone = [written(slots[0], p, config, score=True) for p in PROMPTS]
    scheduler = slots[0].pair.draft.context.scheduler
    together = four_at_once(slots, config, score=True)
    assert [seen(events) for events, _ in together] == [seen(events) for events, _ in alone]
    assert scheduler.batched_calls == 0


def test_batched_slots_decode_together_and_change_a_text_only_at_a_near_tie(real_pair):
    slots = four_slots(real_pair, batch_slots=True)
    config = GenerationConfig(policy="target", max_tokens=48, temperature=0.0, alternatives=2)
    alone = [written(slots[0], p, config) for p in PROMPTS]
    scheduler = slots[0].pair.draft.context.scheduler
    steps, batched = scheduler.steps, scheduler.batched_calls
    together = four_at_once(slots, config)
    batched_per_step = (scheduler.batched_calls - batched) / (scheduler.steps - steps)
    for (events, summary), (beside_events, beside) in zip(alone, together):
        if beside.text == summary.text:
            continue
        ids = [e.token_id for e in events if e.accepted]
        beside_ids = [e.token_id for e in beside_events if e.accepted]
        position = next((i for i, (a, b) in enumerate(zip(ids, beside_ids)) if a != b), None)
        if position is None:  # one ended a token earlier: the end-of-text token itself was the near tie
            continue
        (_, p1), (_, p2) = [e for e in events if e.accepted][position].target_top[:2]
        assert math.log(p1) - math.log(p2) < NEAR_TIE_LOGITS, (position, summary.text, beside.text)
    # Four at a time: nearly every step decoded all four (3.75 calls a step on an idle machine).
    assert batched_per_step > 2.5
