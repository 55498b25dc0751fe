"""Teacher forcing: the draft read along the target's own text, in one batched pass.

The target writes a text alone (greedy); the draft then reads prompt + that text in batches, which gives
its reading at every position as if it had written the text so far, and whether its own choice there (its
argmax) is the target's token (`routing.curves.Position`). Every rule's curve is drawn from these
(`routing/curves.py`), and they are the learned router's training data (label: the draft's choice differs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..routing.curves import Position
from ..routing.reading import read_row
from ..routing.router import Router, Trail
from .models import ModelPair
from .runner import ModelRunner
from .sampling import token_logprob

# Draft rows read per call: each row is the whole vocabulary (0.6 MB for Qwen), so a long text is read
# in chunks rather than holding every row at once.
CHUNK = 32


def forced_positions(pair: ModelPair, prompt: Sequence[int], text: Sequence[int], router: Router | None = None,
                     chunk: int = CHUNK, hidden: bool = False) -> list[Position]:
    """The draft's reading at every position of `text` (the target's tokens after `prompt`), in one
    batched pass (chunks of `chunk` rows). The features include the draft's hidden state when `hidden`,
    or when the router reads it. The caller holds the pair's lock; the draft's cache is left holding
    prompt + text[:-1]."""
    out: list[Position] = []
    trail = Trail()
    prompt, text = list(prompt), list(text)
    hidden = hidden or (router is not None and router.n_hidden > 0)
    pair.draft.clear()
    for start in range(0, len(text), chunk):
        end = min(start + chunk, len(text))
        # Row j of the last (end - start) rows of prompt + text[:end - 1] predicts text[start + j].
        context = prompt + text[:end - 1]
        rows, states = pair.draft.advance_hidden(context, end - start) if hidden else \
            (pair.draft.advance(context, end - start), None)
        for j, row in enumerate(rows):
            position = start + j
            target_token = text[position]
            reading = read_row(row, int(np.argmax(row)))
            x = trail.features(reading, pair.token_class(reading.top_token), position,
                               None if states is None else states[j])
            if router is not None:
                reading = replace(reading, draft_score=router.probability(x[:len(router.features)]))
            out.append(Position(reading, target_token, x))
            trail.add(reading.draft_entropy, token_logprob(row, target_token))
    return out


def choices_along(runner: ModelRunner, prompt: Sequence[int], text: Sequence[int], chunk: int = CHUNK) -> list[int]:
    """A model's own choice (argmax) at every position of `text` after `prompt`, read in batched chunks."""
    out: list[int] = []
    prompt, text = list(prompt), list(text)
    runner.clear()
    for start in range(0, len(text), chunk):
        end = min(start + chunk, len(text))
        rows = runner.advance(prompt + text[:end - 1], end - start)
        out.extend(int(i) for i in np.argmax(rows, axis=1))
    return out


def forced_pair_positions(pair: ModelPair, prompt: Sequence[int], text: Sequence[int], chunk: int = CHUNK,
                          hidden: bool = False) -> list[Position]:
    """Both models read a text that neither wrote (a person's, say): at every position the draft's reading
    (as `forced_positions`) and, as the position's `target_token`, the target's own choice after the same
    prefix. So `Position.differs` says whether the two would write different tokens there, which is the
    router's question, without the target having to write the text first. The caller holds the pair's lock."""
    choices = choices_along(pair.target, prompt, text, chunk)
    positions = forced_positions(pair, prompt, text, chunk=chunk, hidden=hidden)
    return [replace(p, target_token=t) for p, t in zip(positions, choices)]
