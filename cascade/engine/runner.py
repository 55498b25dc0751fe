"""One model's KV cache as a cursor over a token list.

`ModelRunner.advance(context, n_rows)` makes the cache hold exactly `context`: it keeps the longest
prefix it already has, drops the rest (a rollback) and evaluates only the missing tokens, in batches,
asking llama.cpp for logits only at the rows the caller needs. No token a model has already read is
read again, except those a rollback removed.

It drives llama.cpp's batch API directly rather than `Llama.eval`, because `eval` either keeps logits
for every position of the context (`logits_all`: n_ctx x n_vocab floats, 2.5 GB at n_ctx 4096) or for
none of them, and verification needs a handful of rows from the middle of a batch.
"""

from __future__ import annotations

import time
from typing import Sequence

import llama_cpp
import numpy as np

from .events import ModelStats


class ModelRunner:
    def __init__(self, llm: llama_cpp.Llama, n_vocab: int | None = None) -> None:
        self.llm = llm
        self.n_batch = llm.n_batch
        self.n_ctx = llm.n_ctx()
        # The rows we hand out are cut to the vocabulary both models share.
        self.n_vocab = n_vocab or llm.n_vocab()
        self._row_len = llm.n_vocab()
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.tokens: list[int] = []  # exactly what the KV cache holds, in order
        self.stats = ModelStats()
        self.n_embd = llama_cpp.llama_model_n_embd(llm.model)
        self._hidden: np.ndarray | None = None  # the last `advance_hidden`'s hidden states, while it runs

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass

    def advance(self, context: Sequence[int], n_rows: int = 1) -> np.ndarray:
        """Evaluate what the cache lacks of `context`; return logits of its last `n_rows` positions.

        Row i predicts the token after position len(context) - n_rows + i.
        """
        if len(context) > self.n_ctx:
            raise ValueError(f"context of {len(context)} tokens exceeds n_ctx {self.n_ctx}")
        keep = _common_prefix(self.tokens, context)
        # Logits are only read fresh from a decode, so the last position is always evaluated again
        # if the cache already holds all of `context` (a repeated prompt).
        keep = min(keep, len(context) - n_rows)
        if keep < 0:
            raise ValueError("asked for more logit rows than the context has tokens")
        started = time.perf_counter()
        discarded = self._truncate(keep)
        rows, calls = self._evaluate(context[keep:], n_rows)
        self.stats = ModelStats(
            calls=self.stats.calls + calls,
            tokens_evaluated=self.stats.tokens_evaluated + len(context) - keep,
            tokens_discarded=self.stats.tokens_discarded + discarded,
            seconds=self.stats.seconds + time.perf_counter() - started,
        )
        return rows

    def advance_hidden(self, context: Sequence[int], n_rows: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """As `advance`, and the model's final hidden state at the same rows (after its output norm: what
        its LM head reads), from the same decode. llama.cpp returns it only in embeddings mode, in which it
        computes the outputs of every token of a batch; so only the batch of the rows asked for runs in that
        mode, and the tokens before them are read as `advance` reads them."""
        self._hidden = np.empty((n_rows, self.n_embd), dtype=np.float32)
        try:
            rows = self.advance(context, n_rows)
            return rows, self._hidden
        finally:
            self._hidden = None

    def clear(self) -> None:
        """Empty the cache (not counted as a rollback: nothing of the coming generation is lost)."""
        self._truncate(0)

    def trim_to(self, context: Sequence[int]) -> None:
        """Drop what the cache holds beyond its common prefix with `context` (no evaluation)."""
        dropped = self._truncate(_common_prefix(self.tokens, context))
        self.stats = ModelStats(self.stats.calls, self.stats.tokens_evaluated,
                                self.stats.tokens_discarded + dropped, self.stats.seconds)

    def cache_end(self) -> int:
        """One past the last position llama.cpp's cache holds (equals len(self.tokens) when in sync)."""
        return int(llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(self.llm.ctx), 0)) + 1

    def _truncate(self, keep: int) -> int:
        dropped = len(self.tokens) - keep
        if dropped > 0:
            mem = llama_cpp.llama_get_memory(self.llm.ctx)
            llama_cpp.llama_memory_seq_rm(mem, -1, keep, -1)
            del self.tokens[keep:]
        return max(dropped, 0)

    def _evaluate(self, new: Sequence[int], n_rows: int) -> tuple[np.ndarray, int]:
        rows = np.empty((n_rows, self.n_vocab), dtype=np.float32)
        first_row = len(new) - n_rows  # index in `new` of the first position whose logits we return
        calls = 0
        hidden = self._hidden
        # (start, end, embeddings mode) of the stretches of `new` read: with hidden states wanted, the
        # rows' stretch apart from what comes before it (see `advance_hidden`).
        stretches = [(0, first_row, False), (first_row, len(new), True)] if hidden is not None else \
            [(0, len(new), False)]
        for lo, hi, embed in stretches:
            if embed:
                llama_cpp.llama_set_embeddings(self.llm.ctx, True)
            try:
                for start in range(lo, hi, self.n_batch):
                    chunk = new[start : min(start + self.n_batch, hi)]
                    wanted = [i for i in range(len(chunk)) if start + i >= first_row]
                    self._decode(chunk, wanted)
                    calls += 1
                    for i in wanted:
                        rows[start + i - first_row] = self._row(llama_cpp.llama_get_logits_ith, i, self._row_len)[
                            : self.n_vocab]
                        if embed:
                            hidden[start + i - first_row] = self._row(llama_cpp.llama_get_embeddings_ith, i,
                                                                      self.n_embd)
            finally:
                if embed:
                    llama_cpp.llama_set_embeddings(self.llm.ctx, False)
        return rows, calls

    def _decode(self, chunk: Sequence[int], wanted: Sequence[int]) -> None:
        self._fill_batch(chunk, wanted)
        code = llama_cpp.llama_decode(self.llm.ctx, self._batch)
        if code != 0:
            # llama.cpp restores the cache on failure; forget anything past what we know it holds.
            self._truncate(len(self.tokens))
            raise RuntimeError(f"llama_decode failed with code {code}")
        self.tokens.extend(chunk)

    def _row(self, read, i: int, n: int) -> np.ndarray:
        ptr = read(self.llm.ctx, i)
        if not ptr:
            raise RuntimeError("llama.cpp returned no output for a row that was asked for")
        return np.ctypeslib.as_array(ptr, shape=(n,))

    def _fill_batch(self, chunk: Sequence[int], wanted: Sequence[int]) -> None:
        b = self._batch
        n_past = len(self.tokens)
        b.n_tokens = len(chunk)
        for i, token in enumerate(chunk):
            b.token[i] = token
            b.pos[i] = n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 0
        for i in wanted:
            b.logits[i] = 1


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
