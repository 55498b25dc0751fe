import math

import numpy as np
import pytest

from cascade import sampling as S


def test_log_softmax_normalises_and_keeps_order():
    lp = S.log_softmax(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    assert math.isclose(np.exp(lp).sum(), 1.0)
    assert list(np.argsort(lp)) == [0, 1, 2]


def test_perplexity_is_one_over_probability():
    assert S.perplexity(math.log(0.25)) == pytest.approx(4.0)
    assert S.perplexity(0.0) == 1.0
    assert S.perplexity(-1e4) == math.inf


def test_token_logprob_matches_log_softmax():
    x = np.random.default_rng(0).normal(size=50).astype(np.float32)
    assert S.token_logprob(x, 7) == pytest.approx(S.log_softmax(x)[7], abs=1e-6)


def test_greedy_distribution_is_one_hot_at_argmax():
    p = S.distribution(np.array([0.1, 3.0, 2.0]), S.Sampling(temperature=0))
    assert list(p) == [0.0, 1.0, 0.0]


def test_top_k_keeps_k_tokens():
    p = S.distribution(np.arange(10, dtype=np.float32), S.Sampling(temperature=1.0, top_k=3))
    assert set(np.flatnonzero(p)) == {7, 8, 9}
    assert p.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.9, 0.999])
def test_nucleus_matches_the_sorting_definition(top_p):
    logits = np.random.default_rng(1).normal(scale=3, size=5000)
    p = S.distribution(logits, S.Sampling(temperature=1.0))
    order = np.argsort(-p, kind="stable")
    cut = int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1
    expected = np.zeros_like(p)
    expected[order[:cut]] = p[order[:cut]]
    expected /= expected.sum()
    got = S.distribution(logits, S.Sampling(temperature=1.0, top_p=top_p))
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_draw_follows_the_distribution():
    p = np.array([0.5, 0.3, 0.2])
    rng = np.random.default_rng(2)
    counts = np.bincount([S.draw(p, rng) for _ in range(20000)], minlength=3) / 20000
    np.testing.assert_allclose(counts, p, atol=0.015)


def test_rejection_sampling_reproduces_the_target_distribution():
    rng = np.random.default_rng(3)
    p = np.array([0.6, 0.1, 0.2, 0.1])
    q = np.array([0.1, 0.5, 0.1, 0.3])
    out = []
    for _ in range(40000):
        x = S.draw(q, rng)
        out.append(x if S.accept_draft(p[x], q[x], rng.random()) else S.draw(S.residual(p, q), rng))
    np.testing.assert_allclose(np.bincount(out, minlength=4) / len(out), p, atol=0.01)


def test_residual_falls_back_to_p_when_q_covers_it():
    p = np.array([0.5, 0.5])
    np.testing.assert_allclose(S.residual(p, p), p)
