"""Each model's likeliest tokens at a position, recorded on request: the API's top_logprobs."""

from __future__ import annotations

import numpy as np
import pytest

from cascade.sampling import log_softmax, top_tokens

from .helpers import accepted_ids, run

PROMPT = "The cat sat on the mat"


def test_top_tokens_are_a_direct_argsort_of_the_softmax():
    rng = np.random.default_rng(4)
    row = (rng.standard_normal(1000) * 3).astype(np.float32)
    top = top_tokens(row, 5)
    expected = np.argsort(-row)[:5]
    assert [t for t, _ in top] == list(expected)
    np.testing.assert_allclose([p for _, p in top], np.exp(log_softmax(row)[expected]), rtol=1e-6)


@pytest.mark.parametrize("policy", ["cascade", "speculative"])
def test_each_events_alternatives_are_the_models_own_rows(pair_engines, policy):
    engine = pair_engines["partly"]
    events, _ = run(engine, PROMPT, policy=policy, threshold=3.0, k=3, max_tokens=16, chat=False, alternatives=5)
    out = accepted_ids(events)
    prompt = engine.encode(PROMPT, chat=False)
    with engine.pair.lock:
        engine.pair.draft.clear()
        engine.pair.target.clear()
        draft_rows = engine.pair.draft.advance(prompt + out[:-1], len(out))
        target_rows = engine.pair.target.advance(prompt + out[:-1], len(out))
    accepted = [e for e in events if e.accepted]
    assert any(e.draft_top for e in accepted) and any(e.target_top for e in accepted)
    for event in accepted:
        for top, rows in ((event.draft_top, draft_rows), (event.target_top, target_rows)):
            if top is None:
                continue
            row = rows[event.position]
            best = np.argsort(-row)[:5]
            assert [text for text, _ in top] == [engine.pair.piece(int(t)) for t in best]
            np.testing.assert_allclose([p for _, p in top], np.exp(log_softmax(row)[best]), atol=2e-3)
    # Every token the target wrote carries its row's alternatives; every drafted token, the draft's.
    assert all(e.target_top for e in accepted if e.source == "target")
    assert all(e.draft_top for e in accepted if e.source == "draft")


def test_without_asking_no_alternatives_are_recorded(pair_engines):
    events, _ = run(pair_engines["partly"], PROMPT, policy="cascade", max_tokens=8, chat=False)
    assert all(e.draft_top is None and e.target_top is None for e in events)
