"""The draft's hidden state: read from the same decode as its logits, and a router that reads it."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader

from cascade.routing.router import FEATURES, Router, hidden_names
from lab.fitting import fit

from .helpers import accepted_ids, engine_for, run

PROMPT = "Once upon a time there was a little cat who"


def hidden_router(n_hidden: int, seed: int = 0) -> Router:
    rng = np.random.default_rng(seed)
    names = FEATURES + hidden_names(n_hidden)
    return Router(names, mean=np.zeros(len(names)), scale=np.ones(len(names)),
                  coef=rng.normal(0, 0.3, len(names)), intercept=-0.5, pair={"draft": "toy", "target": "toy"})


@pytest.fixture(scope="module")
def engine(toy):
    engine = engine_for(toy.small, toy.related, n_batch=64)
    engine.router = hidden_router(engine.pair.draft.n_embd)
    yield engine
    engine.router = None


def token_embeddings(path) -> np.ndarray:
    tensor = next(t for t in GGUFReader(path).tensors if t.name == "token_embd.weight")
    return np.asarray(tensor.data, dtype=np.float64)


def test_the_hidden_state_is_what_the_lm_head_reads(engine, toy):
    """The toy draft ties its output to its embeddings, as Qwen2.5-0.5B does: logits = hidden · E."""
    prompt = engine.encode(PROMPT, chat=False)
    with engine.pair.lock:
        engine.pair.draft.clear()
        rows, hidden = engine.pair.draft.advance_hidden(prompt, 3)
        engine.pair.draft.clear()
        plain = engine.pair.draft.advance(prompt, 3)
    embeddings = token_embeddings(toy.small)[: rows.shape[1]]
    np.testing.assert_allclose(hidden @ embeddings.T, rows, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(rows, plain, rtol=1e-4, atol=1e-4)  # embeddings mode changes no logit
    assert hidden.shape == (3, engine.pair.draft.n_embd)


def test_reading_the_hidden_state_costs_no_second_decode(engine):
    prompt = engine.encode(PROMPT, chat=False)
    runner = engine.pair.draft
    with engine.pair.lock:
        runner.clear()
        runner.advance(prompt, 1)
        before = runner.stats
        runner.advance_hidden(prompt + [5], 1)  # one new token: one decode, as without the hidden state
        assert (runner.stats - before).calls == 1 and (runner.stats - before).tokens_evaluated == 1


def test_a_router_reading_the_hidden_state_scores_each_position_as_teacher_forcing_does(engine):
    """The score at every position of a real run equals the one computed along the run's own text in one
    batched pass: the hidden state used while writing is the position's own."""
    events, summary = run(engine, PROMPT, policy="draft", max_tokens=16, chat=False)
    assert all(e.draft_score is not None for e in events)
    positions = engine.teacher_force(PROMPT, False, accepted_ids(events))
    np.testing.assert_allclose([e.draft_score for e in events], [p.reading.draft_score for p in positions],
                               atol=2e-3)
    # The learned rule with it runs, and escalates by its scores.
    events, summary = run(engine, PROMPT, policy="cascade", rule="learned", threshold=0.5, max_tokens=16, chat=False)
    assert all((e.draft_score > 0.5) == (e.status == "escalated") for e in events if e.source == "draft")


def test_a_hidden_router_is_fit_saved_and_loaded(tmp_path):
    rng = np.random.default_rng(1)
    n_hidden = 8
    x = rng.normal(size=(400, len(FEATURES) + n_hidden))
    y = (x[:, len(FEATURES) + 2] + 0.3 * rng.normal(size=400) > 0).astype(int)  # a label only the state tells
    router = fit(x, y, c=1.0, n_hidden=n_hidden)
    assert router.n_hidden == n_hidden and router.features[-1] == "hidden_7"
    assert np.mean((router.probability(x) > 0.5) == y) > 0.9
    router.save(tmp_path / "r.json")
    loaded = Router.load(tmp_path / "r.json")
    assert loaded.n_hidden == n_hidden and np.allclose(loaded.probability(x), router.probability(x))
    with pytest.raises(ValueError, match="expected one row of 25 features"):
        fit(x[:, :-1], y, n_hidden=n_hidden)


def test_a_router_without_the_hidden_state_reads_the_base_features_of_hidden_training_data(engine):
    """Training data may carry the hidden state while the loaded router does not read it."""
    base = Router(FEATURES, np.zeros(len(FEATURES)), np.ones(len(FEATURES)), np.ones(len(FEATURES)), 0.0)
    engine.router, hidden = base, engine.router
    try:
        events, _ = run(engine, PROMPT, policy="target", max_tokens=8, chat=False)
        positions = engine.teacher_force(PROMPT, False, accepted_ids(events), hidden=True)
    finally:
        engine.router = hidden
    assert positions[0].x.shape == (len(FEATURES) + engine.pair.draft.n_embd,)
    assert positions[0].reading.draft_score == pytest.approx(base.probability(positions[0].x[:len(FEATURES)]))
