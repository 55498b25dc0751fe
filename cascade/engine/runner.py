"""One model's KV cache as a cursor over a token list: `advance` keeps the longest common prefix, drops the rest
(a rollback) and evaluates only the missing tokens through llama.cpp's batch API, with logits at the rows wanted."""

from __future__ import annotations

import time
from typing import Sequence

import llama_cpp
import numpy as np

from .batching import INTERACTIVE, Call, SharedContext
from .events import ModelStats

SHARED_CHUNK = 64  # tokens per call of a long read in a shared context: other slots wait one short step
# A padding id's logit: no softmax gives it mass, no argmax picks it, and unlike -inf it keeps entropies finite
# (0 * -inf is NaN).
NEVER = float(np.finfo(np.float32).min)


class ModelRunner:
    """One sequence's cursor in a model's context, its own or one slot of a `batching.SharedContext`."""

    def __init__(self, llm: llama_cpp.Llama, n_vocab: int | None = None, context: SharedContext | None = None,
                 seq: int = 0, padding: np.ndarray | None = None) -> None:
        self.llm = llm
        self._owns_context = context is None
        self.context = context or SharedContext(llm)
        if not 0 <= seq < self.context.n_seq:
            raise ValueError(f"sequence {seq} of a context that holds {self.context.n_seq}")
        self.seq = seq
        self.n_batch = self.context.n_batch
        self.n_ctx = llm.n_ctx() // self.context.n_seq  # each slot's share of the context
        self.n_vocab = n_vocab or llm.n_vocab()  # rows are cut to the vocabulary both models share
        self.padding = padding  # ids of that vocabulary no row lets be chosen (`NEVER`), or None
        self.tokens: list[int] = []  # exactly what the KV cache holds for this sequence, in order
        self._drop_from: int | None = None  # a rollback the next decode carries out (see `_truncate`)
        self.stats = ModelStats()
        self.n_embd = self.context.n_embd
        self._hidden: np.ndarray | None = None  # the last `advance_hidden`'s hidden states, while it runs
        self.priority = INTERACTIVE  # its calls' class for the scheduler (`batching.BACKGROUND`: after others)

    def sibling(self, seq: int) -> "ModelRunner":
        """A cursor for another sequence of the same context (another slot)."""
        return ModelRunner(self.llm, self.n_vocab, self.context, seq, self.padding)

    def close(self) -> None:
        if self._owns_context:
            self.context.close()

    def advance(self, context: Sequence[int], n_rows: int = 1) -> np.ndarray:
        """Evaluate what the cache lacks of `context`; row i of the logits predicts the token after position
        len(context) - n_rows + i."""
        if len(context) > self.n_ctx:
            raise ValueError(f"context of {len(context)} tokens exceeds n_ctx {self.n_ctx}")
        keep = min(self.held(context), len(context) - n_rows)  # rows come only from a decode: read those again
        if keep < 0:
            raise ValueError("asked for more logit rows than the context has tokens")
        started = time.perf_counter()
        discarded = self._truncate(keep)
        rows, calls = self._evaluate(context[keep:], n_rows, fresh=keep == 0)
        self.stats += ModelStats(calls, len(context) - keep, discarded, time.perf_counter() - started)
        return rows

    def advance_hidden(self, context: Sequence[int], n_rows: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """As `advance`, and the final hidden state (after the output norm) at the same rows, from the same decode."""
        self._hidden = np.empty((n_rows, self.n_embd), dtype=np.float32)
        try:
            return self.advance(context, n_rows), self._hidden
        finally:
            self._hidden = None

    def held(self, context: Sequence[int]) -> int:
        """How many leading tokens of `context` the cache holds already (what `advance` would not read again)."""
        return _common_prefix(self.tokens, context)

    def clear(self) -> None:
        """Empty the cache (not counted as a rollback: nothing of the coming generation is lost)."""
        self._truncate(0)

    def trim_to(self, context: Sequence[int]) -> None:
        """Drop what the cache holds beyond its common prefix with `context` (no evaluation)."""
        self.stats += ModelStats(tokens_discarded=self._truncate(self.held(context)))

    def cache_end(self) -> int:
        """One past the last position llama.cpp's cache holds (equals len(self.tokens) when in sync)."""
        def settle() -> int:
            if self._drop_from is not None:
                self.context.drop(self.seq, self._drop_from)
                self._drop_from = None
            return self.context.end(self.seq)
        return self.context.scheduler.alone(settle)

    def _truncate(self, keep: int) -> int:
        """Forget the tokens from `keep` on; the cache drops them in this sequence's next decode step."""
        dropped = len(self.tokens) - keep
        if dropped > 0:
            self._drop_from = keep if self._drop_from is None else min(self._drop_from, keep)
            del self.tokens[keep:]
        return max(dropped, 0)

    def _evaluate(self, new: Sequence[int], n_rows: int, fresh: bool = False) -> tuple[np.ndarray, int]:
        rows = np.empty((n_rows, self.n_vocab), dtype=np.float32)
        first_row = len(new) - n_rows  # index in `new` of the first position whose logits we return
        calls = 0
        hidden = self._hidden
        # (start, end, embeddings mode) of the stretches of `new` read. A fresh prompt is read apart from the proposals
        # after it, as the target alone reads it: llama.cpp computes a token inside a long batch slightly differently.
        if hidden is not None:
            stretches = [(0, first_row, False), (first_row, len(new), True)]
        elif fresh and 0 < first_row and n_rows > 1:
            stretches = [(0, first_row + 1, False), (first_row + 1, len(new), False)]
        else:
            stretches = [(0, len(new), False)]
        # Tokens read in one call: a batch alone; SHARED_CHUNK in a shared context, whether or not others run.
        size = self.n_batch if self.context.n_seq == 1 else min(self.n_batch, SHARED_CHUNK)
        for lo, hi, embed in stretches:
            for start in range(lo, hi, size):
                chunk = new[start : min(start + size, hi)]
                wanted = [i for i in range(len(chunk)) if start + i >= first_row]
                out = slice(max(start - first_row, 0), max(start + len(chunk) - first_row, 0))  # the wanted rows
                self._decode(chunk, wanted, rows[out], hidden[out] if embed else None)
                calls += 1
        if self.padding is not None:  # the one place rows reach the engine: sampling, checks and scores see this
            rows[:, self.padding] = NEVER
        return rows, calls

    def _decode(self, chunk: Sequence[int], wanted: Sequence[int], logits: np.ndarray,
                hidden: np.ndarray | None) -> None:
        call = Call(self.context, self.seq, chunk, len(self.tokens), wanted, logits, hidden, keep=self._drop_from,
                    priority=self.priority)
        self._drop_from = None
        try:
            self.context.scheduler.run(call)
            if call.shared:
                self.stats += ModelStats(shared_calls=1)
        except BaseException:
            # llama.cpp restores the cache on failure; the next decode drops anything past what we know.
            self._drop_from = len(self.tokens) if call.keep is None else min(call.keep, len(self.tokens))
            raise
        self.tokens.extend(chunk)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
