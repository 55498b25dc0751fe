import math

import numpy as np
import pytest

from cascade.engine import sampling as S


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


def _random_distribution(rng: np.random.Generator, n: int, zeros: int) -> np.ndarray:
    p = rng.dirichlet(np.ones(n))
    p[rng.choice(n, zeros, replace=False)] = 0.0
    return p / p.sum()


@pytest.mark.parametrize("case", range(20))
def test_rejection_sampling_is_exactly_the_target_distribution(case):
    """Speculative sampling's output, computed exactly: a draft token x (drawn from q) is kept with
    probability min(1, p/q), so min(p, q) of the mass is kept; the rest is drawn from the residual.
    Together that is p, to rounding."""
    rng = np.random.default_rng(case)
    n = int(rng.integers(2, 40))
    p, q = _random_distribution(rng, n, rng.integers(0, n // 2)), _random_distribution(rng, n, rng.integers(0, n // 2))
    kept = np.minimum(p, q)
    np.testing.assert_allclose(kept + (1 - kept.sum()) * S.residual(p, q), p, atol=1e-12)


@pytest.mark.parametrize("p_token, q_token", [(0.2, 0.5), (0.5, 0.2), (0.3, 0.3), (0.0, 0.4)])
def test_a_draft_token_is_kept_with_probability_min_1_p_over_q(p_token, q_token):
    u = (np.arange(100_000) + 0.5) / 100_000  # uniform draws, evenly spread
    kept = np.mean([S.accept_draft(p_token, q_token, x) for x in u])
    assert kept == pytest.approx(min(1.0, p_token / q_token), abs=1e-4)


def test_rejection_sampling_reproduces_the_target_distribution():
    rng = np.random.default_rng(3)
    p = np.array([0.6, 0.1, 0.2, 0.1])
    q = np.array([0.1, 0.5, 0.1, 0.3])
    out = []
    for _ in range(10000):
        x = S.draw(q, rng)
        out.append(x if S.accept_draft(p[x], q[x], rng.random()) else S.draw(S.residual(p, q), rng))
    np.testing.assert_allclose(np.bincount(out, minlength=4) / len(out), p, atol=0.02)


def test_residual_falls_back_to_p_when_q_covers_it():
    p = np.array([0.5, 0.5])
    np.testing.assert_allclose(S.residual(p, p), p)
