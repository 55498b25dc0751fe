"""Prompt lookup: draft tokens that cost nothing, copied from earlier in the text.

Where an answer repeats its prompt (rewriting a paragraph, correcting code, extracting fields) or
itself, the tokens that followed the text's last few tokens where they occurred before are a good
guess at what comes next. `continuation` finds them; the engine hands them to the target to check
exactly as it checks the draft model's tokens (prompt lookup decoding, Saxena 2023; transformers'
`prompt_lookup_num_tokens`; llama.cpp's n-gram speculation). A pure function on token lists.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# The shortest match that proposes anything. Prompt lookup decoding and transformers go down to one
# token, but on a CPU a wrong proposal is not free: the target's batch of 5 costs about 1.6x a single
# token. Measured on the copy-heavy examples (real pair, k=4, one run): 1.01x the target alone with
# one-token matches, 1.15x with two (and with three).
MIN_NGRAM = 2


def continuation(tokens: Sequence[int], max_n: int, min_n: int, k: int) -> list[int]:
    """Up to `k` tokens that followed the most recent earlier occurrence of the text's longest
    matching suffix, from `max_n` tokens down to `min_n`; [] when no suffix of `min_n` or more tokens
    occurred before.

    "Earlier" means the occurrence ends before the text does, so at least one token follows it. The
    copy reads on into its own proposal where it reaches the end of the text (as LZ77 copies do): a
    text repeating with period p, whose most recent earlier match lies p tokens back, proposes k tokens
    of the repetition, not only p.
    """
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
