"""Slots: each a sequence in each model's context, its generation in its own thread. The pair's `Scheduler`
decodes one call at a time, oldest first, so each decode is shaped as when it runs alone (batch-invariant);
with `batch=True` it decodes every pending call on one model in one llama.cpp batch (logits differ slightly)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

import llama_cpp
import numpy as np

# Every decode of the process runs on this one thread: llama.cpp's OpenMP team is per calling thread and
# spins after a decode, so decodes from changing threads find the cores busy with the last caller's team.
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cascade-decode")


def on_decoding_thread(work, *args, **kwargs):
    """`work(*args, **kwargs)` on the decoding thread (for llama.cpp calls outside a scheduler)."""
    return _DECODER.submit(work, *args, **kwargs).result()


MAX_WAIT_S = 0.01  # longer than a generation's Python between two model calls, far shorter than a decode
# A call's class: a person watching goes before a background request (a title, tags) until it waited AGE_LIMIT_S.
INTERACTIVE, BACKGROUND = 0, 1
AGE_LIMIT_S = 10.0  # a long answer's prompt and first tokens fit well inside it; a title waits that long at most


@dataclass(eq=False)
class Call:
    """One sequence's tokens to read, and where their wanted rows go."""

    context: "SharedContext"
    seq: int
    tokens: Sequence[int]
    pos: int  # the position of tokens[0]
    wanted: Sequence[int]  # indices into tokens whose logits (and hidden states) are asked for
    logits: np.ndarray  # len(wanted) x n_vocab, filled by the step
    hidden: np.ndarray | None  # len(wanted) x n_embd in embeddings mode, else None
    keep: int | None = None  # drop this sequence's cache from this position before reading (a rollback)
    done: bool = False
    error: BaseException | None = None
    step: int | None = None  # the scheduler's step that decoded it (1 for the first)
    shared: bool = False  # decoded in one batch with another sequence's call
    priority: int = INTERACTIVE
    since: float = 0.0  # when it was handed to the scheduler (its clock)


class Scheduler:
    """One decode at a time for a loaded pair: the oldest call alone, or (`batch`) all pending on its model."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S, clock: Callable[[], float] = time.perf_counter,
                 batch: bool = False, age_limit_s: float = AGE_LIMIT_S) -> None:
        self.batch = batch
        self.age_limit_s = age_limit_s
        self.max_wait_s = max_wait_s
        self.clock = clock  # what `max_wait_s` is counted on
        self._cond = threading.Condition()
        self._pending: list[Call] = []
        self._active: Counter[object] = Counter()  # slot -> generations running on it (nested: a page's pass)
        self._interactive_served: dict[object, float] = {}  # slot -> when its last interactive call was decoded
        self._busy = False  # a step (or a cache operation) is running
        self.steps = 0
        self.batched_calls = 0  # calls decoded in a step beside another sequence's

    # -- who is writing ------------------------------------------------------------------------------
    def enter(self, slot: object) -> None:
        with self._cond:
            self._active[slot] += 1

    def leave(self, slot: object) -> None:
        with self._cond:
            self._active -= Counter([slot])  # a Counter keeps positive counts only
            if slot not in self._active:
                self._interactive_served.pop(slot, None)
            self._cond.notify_all()  # a step waiting for this slot need not wait any longer

    @property
    def writing(self) -> int:
        with self._cond:
            return len(self._active)

    # -- calls ---------------------------------------------------------------------------------------
    def waiting(self) -> dict[str, int]:
        """Calls waiting for a decode, by class."""
        with self._cond:
            background = sum(c.priority == BACKGROUND for c in self._pending)
            return {"interactive": len(self._pending) - background, "background": background}

    def run(self, call: Call) -> None:
        """Decode `call` in the next step that takes it; raise what that decode raised."""
        with self._cond:
            call.since = self.clock()
            self._pending.append(call)
            self._cond.notify_all()
            while not call.done:
                if self._busy:
                    self._cond.wait()
                    continue
                self._lead()
        if call.error is not None:
            raise call.error

    def alone(self, work) -> object:
        """Run `work()` while no step runs (a cache operation that must not race a decode)."""
        with self._cond:
            while self._busy:
                self._cond.wait()
            self._busy = True
        try:
            return work()
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _lead(self) -> None:
        """(Holding the condition.) Gather a step's calls, decode them with the condition released."""
        self._busy = True
        try:
            self._hold_for_interactive()
            self._gather()
            calls = self._take()
            self._cond.release()
            try:
                _DECODER.submit(calls[0].context.decode, calls).result()
            finally:
                self._cond.acquire()
            self.steps += 1
            shared = len({c.seq for c in calls}) > 1
            served = self.clock()
            for call in calls:
                call.step, call.shared = self.steps, shared
                if call.priority == INTERACTIVE:
                    self._interactive_served[call.seq] = served
            if shared:
                self.batched_calls += len(calls)
        finally:
            self._busy = False
            self._cond.notify_all()

    def _hold_for_interactive(self) -> None:
        """Before a background call, wait up to `max_wait_s` for an interactive slot that is between two calls."""
        while True:
            first = self._first()
            if first.priority != BACKGROUND or self._aged(first, self.clock()):
                return
            calling = {c.seq for c in self._pending}
            due = [served + self.max_wait_s for slot, served in self._interactive_served.items()
                   if slot in self._active and slot not in calling]
            left = max(due, default=0.0) - self.clock()
            if left <= 0:
                return
            self._cond.wait(left)

    def _gather(self) -> None:
        if not self.batch:  # each call alone: nothing to wait for
            return
        # From now, not from the oldest call's arrival: the slots the last step served are only now calling.
        deadline = self.clock() + self.max_wait_s
        while not {c.seq for c in self._pending}.issuperset(self._active):
            left = deadline - self.clock()
            if left <= 0:
                return
            self._cond.wait(left)

    def _aged(self, call: Call, now: float) -> bool:
        """Whether a background call has waited its age limit (then it goes first, as the oldest)."""
        return now - call.since >= self.age_limit_s

    def _first(self) -> Call:
        """The call to decode next: the oldest interactive one, or a background one that waited its age limit."""
        now = self.clock()
        return min(self._pending, key=lambda c: (c.priority == BACKGROUND and not self._aged(c, now), c.since))

    def _take(self) -> list[Call]:
        """The first call (`_first`), and (`batch`) every other one on the same model and mode that fits beside."""
        first = self._first()
        if not self.batch:
            self._pending.remove(first)
            return [first]
        room = first.context.n_batch
        calls = []
        for call in [first] + [c for c in self._pending if c is not first]:
            if call.context is first.context and (call.hidden is None) == (first.hidden is None) \
                    and len(call.tokens) <= room and all(c.seq != call.seq for c in calls):
                calls.append(call)
                room -= len(call.tokens)
        for call in calls:
            self._pending.remove(call)
        return calls


class SharedContext:
    """One model's llama.cpp context, read by one or more sequences (slots) through a scheduler."""

    def __init__(self, llm: llama_cpp.Llama, slots: int = 1, scheduler: Scheduler | None = None) -> None:
        if slots > int(llama_cpp.llama_n_seq_max(llm.ctx)):
            raise ValueError(f"{slots} slots in a context made for {llama_cpp.llama_n_seq_max(llm.ctx)} sequences")
        self.llm = llm
        self.scheduler = scheduler or Scheduler()
        self.n_batch = llm.n_batch
        self.n_seq = slots  # each slot's share of the context is n_ctx / n_seq
        self.row_len = llm.n_vocab()
        self.n_embd = llama_cpp.llama_model_n_embd(llm.model)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass

    def drop(self, seq: int, keep: int) -> None:
        """Forget sequence `seq`'s cache from position `keep` on (no step may run meanwhile)."""
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.llm.ctx), seq, keep, -1)

    def end(self, seq: int) -> int:
        """One past the last position the cache holds for `seq`."""
        return int(llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(self.llm.ctx), seq)) + 1

    def decode(self, calls: Sequence[Call]) -> None:
        """One llama.cpp batch of every call's tokens; each call's rows copied out, or its error set."""
        try:
            for call in calls:
                if call.keep is not None:
                    self.drop(call.seq, call.keep)
                    call.keep = None
            embed = calls[0].hidden is not None
            self._fill(calls)
            if embed:
                llama_cpp.llama_set_embeddings(self.llm.ctx, True)
            try:
                code = llama_cpp.llama_decode(self.llm.ctx, self._batch)
                if code != 0:
                    raise RuntimeError(f"llama_decode failed with code {code}")
                self._read(calls)
            finally:
                if embed:
                    llama_cpp.llama_set_embeddings(self.llm.ctx, False)
        except BaseException as e:  # noqa: BLE001 - every caller is told, and each decides
            for call in calls:
                call.error = e
        for call in calls:
            call.done = True

    def _fill(self, calls: Sequence[Call]) -> None:
        b = self._batch
        i = 0
        for call in calls:
            wanted = set(call.wanted)
            for j, token in enumerate(call.tokens):
                b.token[i] = token
                b.pos[i] = call.pos + j
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = call.seq
                b.logits[i] = 1 if j in wanted else 0
                i += 1
        b.n_tokens = i

    def _read(self, calls: Sequence[Call]) -> None:
        offset = 0
        for call in calls:
            n_vocab = call.logits.shape[1]
            for r, j in enumerate(call.wanted):
                call.logits[r] = self._row(llama_cpp.llama_get_logits_ith, offset + j, self.row_len)[:n_vocab]
                if call.hidden is not None:
                    call.hidden[r] = self._row(llama_cpp.llama_get_embeddings_ith, offset + j, self.n_embd)
            offset += len(call.tokens)

    def _row(self, read, i: int, n: int) -> np.ndarray:
        ptr = read(self.llm.ctx, i)
        if not ptr:
            raise RuntimeError("llama.cpp returned no output for a row that was asked for")
        return np.ctypeslib.as_array(ptr, shape=(n,))
