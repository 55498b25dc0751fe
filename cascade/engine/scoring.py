"""The target's view of a finished text: its perplexity of it, and how much of it is its own choice."""

from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

import numpy as np

from ..routing.reading import top_tokens
from .events import Alternatives, Quality
from .runner import ModelRunner
from .sampling import perplexity, token_logprob

SCORING_CHUNK = 32  # rows a scoring call asks for at most (each row is the whole vocabulary)

View = tuple[float, bool]  # the target's view of a position: (log p of its token, whether that is its greedy choice)


def target_view(target: ModelRunner, prompt: Sequence[int], out: Sequence[int], first: int = 0,
                alternatives: int = 0, tops: dict[int, list[tuple[int, float]]] | None = None,
                last: int | None = None) -> dict[int, View]:
    """The target's view of each output position in [`first`, `last`) (`alternatives`: likeliest tokens into `tops`)."""
    out_view: dict[int, View] = {}
    last = len(out) if last is None else last
    for start in range(first, last, SCORING_CHUNK):
        end = min(start + SCORING_CHUNK, last)
        # Row j of the last (end - start) rows of prompt + out[:end - 1] predicts out[start + j].
        rows = target.advance(list(prompt) + list(out[:end - 1]), end - start)
        for j, row in enumerate(rows):
            token = out[start + j]
            out_view[start + j] = (token_logprob(row, token), int(np.argmax(row)) == token)
            if alternatives and tops is not None:
                tops[start + j] = top_tokens(row, alternatives)
    return out_view


def unread(n: int, seen: Iterable[int]) -> list[tuple[int, int]]:
    """The stretches [start, end) of positions 0..n-1 not in `seen`, in order."""
    seen, stretches, start = set(seen), [], None
    for i in range(n + 1):
        if i < n and i not in seen:
            start = i if start is None else start
        elif start is not None:
            stretches.append((start, i))
            start = None
    return stretches


def text_quality(view: Iterable[View]) -> tuple[float, float]:
    """(the target's perplexity of a text, the share of its tokens that are its own choice)."""
    view = list(view)
    nll = -sum(logp for logp, _ in view) / len(view)
    return perplexity(-nll), sum(own for _, own in view) / len(view)


def score(target: ModelRunner, prompt: Sequence[int], out: Sequence[int], seen: dict[int, View], alternatives: int = 0,
          named: Callable[[Sequence[tuple[int, float]]], Alternatives] = lambda _top: None,
          kept_tops: dict[int, list[tuple[int, float]]] | None = None) -> Quality | None:
    """The quality of `out` (None if empty), reading only positions not in `seen`; tops go to `scored_top`."""
    if not out:
        return None
    started = time.perf_counter()
    seen = dict(seen)
    tops: dict[int, list[tuple[int, float]]] = dict(kept_tops or {})
    for start, end in unread(len(out), seen):
        seen.update(target_view(target, prompt, out, start, alternatives=alternatives, tops=tops, last=end))
    ppl, agreement = text_quality(seen[i] for i in range(len(out)))
    scored_top = tuple((i, named(tops[i])) for i in sorted(tops))
    return Quality(ppl, agreement, scoring_s=time.perf_counter() - started, scored_top=scored_top)


def score_text(text: str, target: ModelRunner, prompt: Sequence[int]) -> Quality | None:
    """As `score`, for a loop that reports text, not tokens (the seed's): re-tokenized, read afresh."""
    started = time.perf_counter()
    tokens = target.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    if not tokens:
        return None
    target.clear()
    ppl, agreement = text_quality(target_view(target, prompt, tokens).values())
    return Quality(ppl, agreement, scoring_s=time.perf_counter() - started)
