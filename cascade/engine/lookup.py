"""Prompt lookup's n-gram search (Saxena 2023): proposals copied from earlier in the text, for the target to check."""

from __future__ import annotations

from typing import Sequence

import numpy as np

# The shortest match that proposes anything: on a CPU a wrong proposal costs the target a larger batch.
MIN_NGRAM = 2


def continuation(tokens: Sequence[int], max_n: int, min_n: int, k: int) -> list[int]:
    """Up to `k` tokens that followed the most recent earlier occurrence of the text's longest suffix of
    `max_n` down to `min_n` tokens ([] if none); like an LZ77 copy, it reads on into its own proposal."""
    length = len(tokens)
    if k < 1 or length < 2 or min_n < 1:
        return []
    text = np.asarray(tokens, dtype=np.int64)
    # Where an earlier occurrence can end: every earlier position holding the text's last token.
    ends = np.flatnonzero(text[:-1] == text[-1])
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        found = ends[ends >= n - 1]
        for back in range(1, n):
            if not found.size:
                break
            found = found[text[found - back] == text[length - 1 - back]]
        if found.size:
            start = int(found[-1]) + 1  # the most recent occurrence's next token
            out: list[int] = []
            for i in range(start, start + k):
                out.append(int(text[i]) if i < length else out[i - length])
            return out
    return []
