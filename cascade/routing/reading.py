"""What the draft knows of a position before anyone else is asked (`read_row`): every rule and the router judge
a position from its `DraftReading`, and each token event records it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np


def largest(row: np.ndarray, k: int) -> list[int]:
    """The indices of the k largest scores, largest first, ties by index (k argmaxes; the row is restored)."""
    best: list[int] = []
    saved: list[float] = []
    try:
        for _ in range(min(k, len(row))):
            i = int(np.argmax(row))
            best.append(i)
            saved.append(row[i])
            row[i] = -np.inf
    finally:
        for i, v in zip(best, saved):
            row[i] = v
    return best


class Reading(Protocol):
    """Anything carrying the draft's view of one position: a `DraftReading`, or a recorded TokenEvent."""

    draft_ppl: float | None
    draft_top1: float | None
    draft_top2: float | None
    draft_entropy: float | None
    draft_score: float | None


@dataclass(frozen=True)
class DraftReading:
    """The draft's view of one position, before anyone else is asked."""

    draft_ppl: float  # perplexity of the proposed token: exp(-log p)
    draft_top1: float  # probability of the most likely token
    draft_top2: float  # probability of the second most likely token
    draft_entropy: float  # entropy of the untempered distribution, nats
    top_token: int  # the most likely token
    draft_score: float | None = None  # the learned router's probability that the target differs
    top: tuple[tuple[int, float], ...] = ()  # the likeliest tokens and their probabilities, likeliest first


def read_row(row: np.ndarray, token: int, k: int = 2) -> DraftReading:
    """The draft's reading of a row of logits for its proposed `token`, with its `k` (at least 2) likeliest tokens."""
    best = largest(row, max(k, 2))
    top = best[0]
    m = float(row[top])
    shifted = row - m
    e = np.exp(shifted)
    z = float(e.sum(dtype=np.float64))
    log_z = math.log(z)
    # Not np.dot: a BLAS call leaves OpenBLAS's threads spinning, which slows llama.cpp's next decode.
    entropy = max(0.0, log_z - float((e * shifted).sum(dtype=np.float64)) / z)
    probabilities = [math.exp(float(row[i]) - m) / z for i in best]
    second = probabilities[1] if len(best) > 1 else 0.0
    logp = float(row[token]) - m - log_z
    return DraftReading(draft_ppl=math.exp(-logp) if logp > -700 else math.inf, draft_top1=1.0 / z,
                        draft_top2=second, draft_entropy=entropy, top_token=top,
                        top=tuple(zip(best, probabilities)))


def top_tokens(logits: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k likeliest tokens and their probabilities under softmax(logits), likeliest first."""
    m = float(np.max(logits))
    log_z = m + math.log(float(np.sum(np.exp(logits - m, dtype=np.float64))))
    return [(t, math.exp(float(logits[t]) - log_z)) for t in largest(logits, k)]
