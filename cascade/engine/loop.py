"""One request's run of the loop (`Generation`): each turn, lookup or the draft proposes, the rule (`Judge`) sends
a doubtful token to the target, and held proposals wait for the target's batched check (`Policy.verify`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from ..routing.budget import tracker_for
from ..routing.judge import Judge
from ..routing.reading import DraftReading, top_tokens
from ..routing.router import Router
from .auto import AutoTuner
from .config import GenerationConfig
from .events import Alternatives, BudgetAccount, Event, Source, Status, StopReason, Summary, TokenEvent, Written
from .lookup import MIN_NGRAM, continuation
from .models import ModelPair
from .observers import Observer
from .policies import POLICY_TABLE, Check, Mode, span_goes_on
from .recorder import Recorder
from .sampling import Sampler, Sampling, one_hot, token_logprob, token_perplexity
from .scoring import View, score
from .text import TextAssembler


@dataclass(frozen=True)
class Proposal:
    """A token the draft sampled or prompt lookup copied, with what the later decisions need to know about it."""

    position: int
    token: int
    draft_ppl: float | None  # None: the draft did not score it (looked up)
    draft_logits: np.ndarray | None  # the draft's row for this position: scores a target token written here
    q: np.ndarray | None  # the distribution it was drawn from (speculative sampling needs it)
    source: Source = "draft"  # "draft", or "lookup": copied from earlier in the text
    reading: DraftReading | None = None  # what the draft knew of the position (None: looked up)
    draft_top: Alternatives = None  # the draft's likeliest tokens here, when the request asks for them


class Generation:
    """`run()` yields the events, then the Summary. `tuner` chooses each round's way, `watchers` observe; `score` adds
    quality; the last `n_given` prompt tokens are the answer prefix."""

    def __init__(self, pair: ModelPair, prompt: Sequence[int], config: GenerationConfig,
                 tuner: AutoTuner | None = None, watchers: Sequence[Observer] = (), router: Router | None = None,
                 score: bool = True, n_given: int = 0, mark_written: bool = False) -> None:
        self.pair, self.config, self.tuner, self.score, self.n_given = pair, config, tuner, score, n_given
        # Someone waits for the score (a page): a `Written` event first, and catch-up rows are kept for the score.
        self.mark_written = mark_written and score
        self.mode = Mode(POLICY_TABLE[config.policy], config.k)
        self.prompt = list(prompt)
        self.sampler = Sampler(Sampling(config.temperature, config.top_k, config.top_p), config.seed)
        budget = (tracker_for(config.deferral, config.budget, pair.draft_path, config.chat)
                  if config.budget is not None and POLICY_TABLE[config.policy].uses_rule else None)
        self.judge = Judge(config.deferral, config.threshold, router, config.alternatives, pair.token_class, budget)
        self.room = min(config.max_tokens, pair.config.n_ctx - len(self.prompt))
        self.out: list[int] = []
        self.pending: list[Proposal] = []
        self.span = 0  # tokens the target has written since the rule escalated, while its span goes on (0: none)
        self.target_seen: dict[int, View] = {}  # the target's view of positions it read while writing
        self.target_tops: dict[int, list[tuple[int, float]]] = {}  # its likeliest tokens where it caught up
        self.text = TextAssembler(config.stop)
        self.stop_reason: StopReason | None = None
        self.recorder = Recorder(pair.draft, pair.target, steered=tuner is not None)
        self.observers: list[Observer] = [self.recorder, *watchers] + ([tuner] if tuner is not None else [])

    # ---- the loop ---------------------------------------------------------------------------------

    def run(self) -> Iterator[Event]:
        try:
            while self.stop_reason is None:
                yield from self.step()
        except GeneratorExit:
            self.stop_reason = "cancelled"
            raise
        finally:
            for runner in (self.pair.draft, self.pair.target):
                runner.trim_to(self.prompt + self.out)
        yield from self.summaries()

    def step(self) -> Iterator[Event]:
        if not self.pending:
            self.start_round()
            if self.mode.policy.looks_up and self.look_up():
                yield from self.target_turn()  # the target checks the copied tokens
                return
        policy = self.mode.policy
        if not policy.drafts or self.span:
            yield from self.target_turn()  # the target writes one token alone (or on in an escalated span)
            return
        proposal = self.draft_one()
        doubtful = policy.judges and self.judge.doubtful(proposal.reading)
        self.notify("proposed", doubtful)
        if doubtful:
            yield from self.target_turn(escalated=proposal)
        elif self.mode.window(self.config) == 0:
            yield from self.emit(proposal.token, "draft", proposal.draft_ppl, None, proposal.reading,
                                 draft_top=proposal.draft_top)
        else:
            self.pending.append(proposal)
            if self.time_to_check(proposal):
                yield from self.target_turn()

    def notify(self, hook: str, *args) -> None:
        for observer in self.observers:
            getattr(observer, hook)(*args)

    def start_round(self) -> None:
        if self.tuner is not None:
            lag = len(self.prompt) + len(self.out) - len(self.pair.draft.tokens)
            self.mode = self.tuner.choose(horizon=self.room - len(self.out), draft_lag=max(lag, 0))
        self.notify("round_started", self.mode)

    def advance(self, model: str, context: list[int], n_rows: int,
                hidden: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The model reads what it lacks of `context`: its last `n_rows` rows, and (`hidden`) their hidden states."""
        runner = getattr(self.pair, model)
        before = runner.stats
        rows, states = runner.advance_hidden(context, n_rows) if hidden else (runner.advance(context, n_rows), None)
        done = runner.stats - before
        self.notify("model_called", model, done.tokens_evaluated, done.seconds, n_rows)
        return rows, states

    def draft_one(self) -> Proposal:
        context = self.prompt + self.out + [p.token for p in self.pending]
        rows, states = self.advance("draft", context, 1, hidden=self.judge.wants_hidden)
        row = rows[0]
        token, q = self.sampler.draft(row)
        position = len(self.out) + len(self.pending)
        reading = self.judge.read(row, token, position, None if states is None else states[0],
                                  ahead=[p.reading for p in self.pending])
        return Proposal(position, token, reading.draft_ppl, row, q, reading=reading, draft_top=self.named(reading.top))

    def look_up(self) -> bool:
        """Pend up to k tokens that followed the text's end where it occurred before; False if it found none."""
        tokens = continuation(self.prompt + self.out, self.config.lookup_ngram,
                              min(MIN_NGRAM, self.config.lookup_ngram), min(self.mode.k, self.room - len(self.out)))
        end = next((i for i, t in enumerate(tokens) if self.pair.is_end_of_generation(t)), None)
        tokens = tokens if end is None else tokens[:end + 1]
        for token in tokens:
            # q one-hot: speculative sampling keeps the target's distribution exactly for a certain proposal.
            q = None if self.sampler.greedy else one_hot(token, self.pair.n_vocab)
            self.pending.append(Proposal(len(self.out) + len(self.pending), token, None, None, q, "lookup"))
        if tokens:
            self.notify("looked_up", len(tokens))
        return bool(tokens)

    def time_to_check(self, last: Proposal) -> bool:
        return (len(self.pending) >= self.mode.window(self.config)
                or self.pair.is_end_of_generation(last.token)
                or len(self.out) + len(self.pending) >= self.room)

    def target_turn(self, escalated: Proposal | None = None) -> Iterator[Event]:
        """The target reads the pending proposals in one batch, keeps those `verify` accepts, and writes the next."""
        pending, self.pending = self.pending, []
        context = self.prompt + self.out + [p.token for p in pending]
        caught_up = self.catching_up(context) if self.mark_written else 0
        rows, _ = self.advance("target", context, caught_up + len(pending) + 1)
        self.keep_views(rows[:caught_up], len(self.out) - caught_up)
        rows = rows[caught_up:]
        target_ppls = [token_perplexity(row, p.token) for p, row in zip(pending, rows)]
        check = Check([p.token for p in pending], [p.q for p in pending], rows, target_ppls)
        kept, token = self.mode.policy.verify(check, self.sampler, self.config)
        if pending:
            self.notify("checked", kept, min(kept + 1, len(pending)))
        for p, row, target_ppl in zip(pending[:kept], rows, target_ppls):
            self.target_seen[p.position] = (-math.log(target_ppl) if math.isfinite(target_ppl) else -math.inf,
                                            int(np.argmax(row)) == p.token)
            yield from self.emit(p.token, p.source, p.draft_ppl, target_ppl, p.reading, draft_top=p.draft_top,
                                 target_top=self.top(row))
            if self.stop_reason:
                return
        discarded: Status = self.mode.policy.discarded
        for p, row, target_ppl in zip(pending[kept:], rows[kept:], target_ppls[kept:]):
            yield self.tell(p.position, p.token, self.pair.piece(p.token), p.source, discarded, p.draft_ppl,
                            target_ppl, p.reading, draft_top=p.draft_top, target_top=self.top(row))
        if escalated is not None:
            yield self.tell(escalated.position, escalated.token, self.pair.piece(escalated.token), "draft",
                            "escalated", escalated.draft_ppl, None, escalated.reading, draft_top=escalated.draft_top)
        # The draft's view of the position the target now writes (None where the draft scored nothing here).
        at = pending[kept] if kept < len(pending) else escalated
        scored = at is not None and at.draft_logits is not None
        draft_ppl = token_perplexity(at.draft_logits, token) if scored else None
        self.target_seen[len(self.out)] = (token_logprob(rows[kept], token), int(np.argmax(rows[kept])) == token)
        in_span = self.span > 0
        yield from self.emit(token, "target", draft_ppl, token_perplexity(rows[kept], token),
                             at.reading if scored else None, draft_top=at.draft_top if scored else None,
                             target_top=self.top(rows[kept]))
        self.follow_span(escalated is not None or in_span, token, rows[kept])

    def catching_up(self, context: list[int]) -> int:
        """How many written positions before the pending ones the target reads now, catching up."""
        first = max(self.pair.target.held(context) + 1 - len(self.prompt), 0)  # its row is context[first - 1]'s
        return max(len(self.out) - first, 0)

    def keep_views(self, rows: np.ndarray, first: int) -> None:
        """The target's view (and tops, if asked) of the written positions from `first` on, from its `rows`."""
        for position, row in enumerate(rows, first):
            token = self.out[position]
            self.target_seen[position] = (token_logprob(row, token), int(np.argmax(row)) == token)
            if self.config.alternatives:
                self.target_tops[position] = top_tokens(row, self.config.alternatives)

    def follow_span(self, escalating: bool, token: int, row: np.ndarray) -> None:
        """Whether the target writes the next token too (`span_goes_on`, while a budget `affords` it)."""
        if not escalating or not self.mode.policy.escalates:
            self.span = 0
            return
        if self.span:
            self.judge.taken()
        written = self.span + 1
        p_target = math.exp(token_logprob(row, token))
        goes_on = span_goes_on(self.config.span, written, p_target, self.pair.piece(token)) and self.judge.affords()
        self.span = written if goes_on else 0

    # ---- output -----------------------------------------------------------------------------------

    def emit(self, token: int, source: Source, draft_ppl: float | None, target_ppl: float | None,
             reading: DraftReading | None = None, **tops: Alternatives) -> Iterator[Event]:
        """Append a token to the output and stop if it ends the generation."""
        position = len(self.out)
        self.out.append(token)
        self.judge.written(reading, draft_ppl)
        text = self.text.push(self.pair.draft.llm.detokenize([token]))
        yield self.tell(position, token, text, source, "accepted", draft_ppl, target_ppl, reading, **tops)
        if self.pair.is_end_of_generation(token):
            self.stop_reason = "eos"
        elif self.text.stopped:
            self.stop_reason = "stop_string"
        elif len(self.out) >= self.room:
            self.stop_reason = "max_tokens" if self.room == self.config.max_tokens else "context_full"

    def top(self, row: np.ndarray) -> Alternatives:
        """The target's likeliest tokens at a position it read, if the request asks for them (`alternatives`)."""
        return self.named(top_tokens(row, self.config.alternatives)) if self.config.alternatives else None

    def named(self, top: Sequence[tuple[int, float]]) -> Alternatives:
        """Token ids with probabilities as the events carry them: each token's text, as many as asked."""
        if not self.config.alternatives:
            return None
        return tuple((self.pair.piece(t), p) for t, p in top[:self.config.alternatives])

    def tell(self, position: int, token: int, text: str, source: Source, status: Status,
             draft_ppl: float | None, target_ppl: float | None, reading: DraftReading | None = None,
             draft_top: Alternatives = None, target_top: Alternatives = None) -> TokenEvent:
        seen = {} if reading is None else {
            "draft_top1": reading.draft_top1, "draft_top2": reading.draft_top2,
            "draft_entropy": reading.draft_entropy, "draft_score": reading.draft_score}
        event = TokenEvent(position=position, token_id=token, text=text, source=source, status=status,
                           draft_ppl=draft_ppl, target_ppl=target_ppl, t=self.recorder.elapsed(),
                           draft_top=draft_top, target_top=target_top, **seen)
        self.notify("told", event)
        return event

    def summaries(self) -> Iterator[Event]:
        """The Summary, its parts made once, with `scoring.score`'s quality if asked (and a `Written` before it)."""
        tracker = self.judge.budget
        budget = None if tracker is None else BudgetAccount(tracker.budget, tracker.meant, tracker.source)
        made = functools.partial(
            Summary, text=self.text.text, policy=self.config.policy, stop_reason=self.stop_reason,
            prompt_tokens=len(self.prompt), counts=self.recorder.counts(),
            timings=self.recorder.timings(self.judge.routing_s, self.judge.router_s), work=self.recorder.work(),
            rule=self.config.rule if self.mode.policy.escalates else "", device=self.pair.config.device,
            answer_prefix=self.config.answer_prefix, n_given_tokens=self.n_given, budget=budget)
        if not self.score:
            yield made()
            return
        if self.mark_written:
            yield Written(made())
        yield made(quality=score(self.pair.target, self.prompt, self.out, self.target_seen,
                                 self.config.alternatives, self.named, self.target_tops))
