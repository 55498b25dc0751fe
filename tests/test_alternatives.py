"""Each model's likeliest tokens at a position, recorded with every event (top 5 unless asked otherwise):
the page's hover and the API's top_logprobs."""

from __future__ import annotations

import numpy as np
import pytest

from cascade import GenerationConfig
from cascade.engine.events import complete_events
from cascade.engine.sampling import log_softmax
from cascade.routing.reading import largest, read_row, top_tokens

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


def test_largest_is_a_stable_argsort_and_leaves_the_row_as_it_was():
    rng = np.random.default_rng(7)
    row = np.round(rng.standard_normal(5000) * 2, 1).astype(np.float32)  # many ties
    before = row.copy()
    for k in (1, 2, 5, 20):
        assert largest(row, k) == list(np.argsort(-row, kind="stable")[:k])
    np.testing.assert_array_equal(row, before)
    assert largest(np.array([1.0, 3.0], dtype=np.float32), 5) == [1, 0]


def test_the_drafts_reading_carries_its_top_tokens_from_the_same_passes():
    rng = np.random.default_rng(5)
    row = (rng.standard_normal(3000) * 3).astype(np.float32)
    reading = read_row(row, token=17, k=5)
    best = np.argsort(-row, kind="stable")[:5]
    assert [t for t, _ in reading.top] == list(best) and reading.top_token == best[0]
    np.testing.assert_allclose([p for _, p in reading.top], np.exp(log_softmax(row)[best]), rtol=1e-5)
    assert (reading.draft_top1, reading.draft_top2) == pytest.approx((reading.top[0][1], reading.top[1][1]))
    assert len(read_row(row, 17).top) == 2  # top-1 and top-2 are always read


def test_every_event_carries_the_drafts_top_five_by_default_at_every_position_it_read(pair_engines):
    engine = pair_engines["partly"]
    events, _ = run(engine, PROMPT, policy="speculative", k=3, max_tokens=16, chat=False)
    assert GenerationConfig().alternatives == 5
    prompt = engine.encode(PROMPT, chat=False)
    out = accepted_ids(events)
    with engine.pair.lock:
        engine.pair.draft.clear()
        rows = engine.pair.draft.advance(prompt + out[:-1], len(out))
    drafted = [e for e in events if e.source == "draft"]
    assert drafted and any(not e.accepted for e in drafted) and all(e.draft_top for e in drafted)
    for event in events:
        if event.draft_top is None:
            assert event.draft_top1 is None  # only where the draft did not read the position
            continue
        assert len(event.draft_top) == 5
        # (A refused proposal after the first refused one read a context the text did not keep.)
        if event.accepted:
            expected = [engine.pair.piece(int(t)) for t in np.argsort(-rows[event.position], kind="stable")[:5]]
            assert [text for text, _ in event.draft_top] == expected


def test_asking_for_none_records_none(pair_engines):
    events, _ = run(pair_engines["partly"], PROMPT, policy="cascade", max_tokens=8, chat=False, alternatives=0)
    assert all(e.draft_top is None and e.target_top is None for e in events)


def test_the_scoring_pass_gives_the_big_models_top_five_where_it_read_the_text_only_then(pair_engines):
    engine = pair_engines["partly"]
    events, summary = run(engine, PROMPT, policy="cascade", threshold=50.0, max_tokens=16, chat=False)
    accepted = [e for e in events if e.accepted]
    alone = [e.position for e in accepted if e.target_top is None]
    assert alone and {p for p, _ in summary.quality.scored_top} == set(alone)  # exactly the positions it lacked
    completed = [e for e in complete_events(events, summary) if e.accepted]
    assert all(e.target_top for e in completed)
    out = accepted_ids(events)
    prompt = engine.encode(PROMPT, chat=False)
    with engine.pair.lock:
        engine.pair.target.clear()
        rows = engine.pair.target.advance(prompt + out[:-1], len(out))
    for event in completed:
        best = np.argsort(-rows[event.position], kind="stable")[:5]
        assert [text for text, _ in event.target_top] == [engine.pair.piece(int(t)) for t in best]
    assert complete_events(events, None) == list(events)
    # In the JSON, as lists (as a run file gives them back).
    position, top = summary.quality.scored_top[0]
    assert summary.to_dict()["scored_top"][0] == [position, [list(x) for x in top]]
