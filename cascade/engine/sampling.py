"""The maths of choosing tokens: perplexity (untempered), distributions, rejection sampling (pure functions on
logits); temperature, top-k and top-p shape only what a token is drawn from."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def logsumexp(logits: np.ndarray) -> float:
    m = float(np.max(logits))
    return m + math.log(float(np.sum(np.exp(logits - m, dtype=np.float64))))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return x - logsumexp(x)


def token_logprob(logits: np.ndarray, token: int) -> float:
    """log p(token) under softmax(logits)."""
    return float(logits[token]) - logsumexp(logits)


def perplexity(logprob: float) -> float:
    """exp(-logprob): 1 for a certain token, 1/p in general."""
    return math.exp(-logprob) if logprob > -700 else math.inf


def token_perplexity(logits: np.ndarray, token: int) -> float:
    """How unsure a model whose next-token scores are `logits` is of `token`: exp(-log p(token))."""
    return perplexity(token_logprob(logits, token))


def distribution(logits: np.ndarray, sampling: Sampling) -> np.ndarray:
    """The probabilities a token is drawn from (float64); greedy: the argmax's one-hot (so checks match prefixes)."""
    if sampling.greedy:
        return one_hot(int(np.argmax(logits)), len(logits))
    x = logits.astype(np.float64) / sampling.temperature
    if 0 < sampling.top_k < len(x):
        kth = np.partition(x, -sampling.top_k)[-sampling.top_k]
        x = np.where(x >= kth, x, -np.inf)
    p = np.exp(x - np.max(x))
    p /= p.sum()
    if sampling.top_p < 1.0:
        p = _nucleus(p, sampling.top_p)
    return p


def _nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of likeliest tokens whose mass reaches top_p, renormalised (a growing top-n search)."""
    n = min(64, len(p))
    while True:
        top = np.argpartition(-p, n - 1)[:n] if n < len(p) else np.arange(len(p))
        top = top[np.argsort(-p[top], kind="stable")]
        cum = np.cumsum(p[top])
        if cum[-1] >= top_p or n == len(p):
            keep = top[: int(np.searchsorted(cum, top_p)) + 1]
            out = np.zeros_like(p)
            out[keep] = p[keep]
            return out / out.sum()
        n = min(len(p), n * 4)


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from probabilities p (inverse CDF, so one uniform per draw)."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def one_hot(token: int, n: int) -> np.ndarray:
    """The distribution of a proposal made for certain (prompt lookup's): all mass on `token`."""
    q = np.zeros(n, dtype=np.float64)
    q[token] = 1.0
    return q


def accept_draft(p_token: float, q_token: float, u: float) -> bool:
    """Speculative sampling's test: keep a token drawn from q with probability min(1, p/q)."""
    return u * q_token < p_token


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)): where to draw from after a rejection, so the output follows p exactly."""
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0 else p


class Sampler:
    """How one generation draws its tokens: one random stream per use, so the target's draws do not depend
    on how often the draft sampled."""

    def __init__(self, settings: Sampling, seed: int) -> None:
        self.settings = settings
        self._draft, self._target, self._accept = (np.random.default_rng([seed, i]) for i in range(3))

    @property
    def greedy(self) -> bool:
        return self.settings.greedy

    def draft(self, row: np.ndarray) -> tuple[int, np.ndarray | None]:
        """The draft's token from its row, and the distribution it was drawn from (None when greedy)."""
        if self.greedy:
            return int(np.argmax(row)), None
        q = distribution(row, self.settings)
        return draw(q, self._draft), q

    def target(self, row: np.ndarray) -> int:
        """The target's own token from its row."""
        return int(np.argmax(row)) if self.greedy else draw(distribution(row, self.settings), self._target)

    def speculative(self, proposed: Sequence[int], q: Sequence[np.ndarray], rows: np.ndarray) -> tuple[int, int]:
        """Rejection sampling: how many proposals to keep, and the target's token after them."""
        for i, token in enumerate(proposed):
            p = distribution(rows[i], self.settings)
            if not accept_draft(p[token], q[i][token], self._accept.random()):
                return i, draw(residual(p, q[i]), self._target)
        return len(proposed), self.target(rows[len(proposed)])
