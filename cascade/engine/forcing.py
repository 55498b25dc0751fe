"""Teacher forcing: the draft's reading at every position of the target's own text, in one batched pass."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..routing.curves import Position
from ..routing.reading import read_row
from ..routing.router import Router, Trail
from .models import ModelPair
from .sampling import token_logprob

CHUNK = 32  # draft rows read per call (each a whole vocabulary)


def forced_positions(pair: ModelPair, prompt: Sequence[int], text: Sequence[int], router: Router | None = None,
                     chunk: int = CHUNK, hidden: bool = False) -> list[Position]:
    """The draft's reading at each position of `text` (the target's tokens after `prompt`), under the caller's lock."""
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
