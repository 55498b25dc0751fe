"""The generation loop: the draft (or prompt lookup) proposes, the policy decides when the target is asked.

One loop serves every policy of the registry (`policies.py`) but those with a loop of their own. Its
state is the emitted tokens, the proposed tokens still waiting for the target's check (`pending`), and the
two models' cache cursors, which `ModelRunner.advance` moves: each model evaluates only tokens it has
not seen. Counting is the `Recorder`'s; `auto` watches through the same `Observer` interface.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import numpy as np

from . import sampling as S
from .auto import AutoTuner
from .config import GenerationConfig
from .events import Alternatives, Event, Source, Status, StopReason, Summary, TokenEvent
from .lookup import MIN_NGRAM, continuation
from .models import ModelPair
from .observers import Observer
from .policies import POLICY_TABLE, Mode
from .prompt import EncodedPrompt, PromptError, encode_prompt
from .recorder import Recorder
from .router import HISTORY, History, Router, features
from .rules import DraftReading, read_row
from .text import TextAssembler

if TYPE_CHECKING:
    from .teacher import Position


# A chat request like a visitor's for `Engine.calibrate`: how often the draft is unsure, and how often the
# two agree, depend on the kind of text; a continuation of raw prose made `auto` expect far more escalations
# than chat answers have, and keep the target alone where cascade was faster.
CALIBRATION_PROMPT = "Explain in a few sentences how a bicycle stays upright, for a curious child."


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


class Engine:
    def __init__(self, pair: ModelPair, router: Router | None = None) -> None:
        self.pair = pair
        # The learned rule's router, if one was loaded: every draft reading then carries its score.
        self.router = router
        # What `auto` has learned about this pair's costs; it carries over between requests.
        self.tuner = AutoTuner()

    def encode(self, prompt: str, chat: bool, system: str = "", answer_prefix: str = "",
               history: Sequence[tuple[str, str]] = ()) -> list[int]:
        """The tokens the models read before writing: the request, then the answer prefix (`prompt.py`)."""
        return self.encode_request(prompt, chat, system, answer_prefix, history).tokens

    def encode_config(self, prompt: str, config: GenerationConfig) -> EncodedPrompt:
        """The tokens of a request as its config frames it (chat or raw, system, earlier turns, prefix)."""
        return self.encode_request(prompt, config.chat, config.system, config.answer_prefix, config.history)

    def encode_request(self, prompt: str, chat: bool, system: str = "", answer_prefix: str = "",
                       history: Sequence[tuple[str, str]] = ()) -> EncodedPrompt:
        encoded = encode_prompt(self.pair.target.llm, prompt, chat, system, answer_prefix, history)
        n, n_ctx = len(encoded.tokens), self.pair.config.n_ctx
        if n >= n_ctx:
            given = f" ({encoded.n_given} of them the answer prefix)" if encoded.n_given else ""
            if history:
                raise PromptError(
                    f"the conversation is {n} tokens{given}, its {len(history)} earlier messages included, but "
                    f"the context holds {n_ctx}, with room for at least one more; no earlier turn is left out "
                    f"without asking you: start a new conversation, or ask from an earlier turn (whoever runs the "
                    f"models can raise the context with --n-ctx or CASCADE_N_CTX)")
            raise PromptError(
                f"the prompt is {n} tokens{given} but the context holds {n_ctx}, with room for at least one "
                f"more; shorten it (whoever runs the models can raise the context with --n-ctx or CASCADE_N_CTX)"
            )
        return encoded

    def generate(self, prompt: str, config: GenerationConfig | None = None, score: bool = True) -> Iterator[Event]:
        """Yield TokenEvents as decisions are made, then one Summary.

        `score`: the target then reads the finished text for the Summary's quality figures
        (`text_ppl_by_target`, `target_agreement`), a pass that delays the Summary by a good share of a
        second; a caller that does not report them (the API) leaves them None and gets its Summary at once.
        The pair's lock is held for the whole generation, so one pair serves one request at a time.
        Closing the generator early (a Stop button) leaves both models ready for the next request.
        """
        config = (config or GenerationConfig()).validate()
        policy = POLICY_TABLE[config.policy]
        if config.rule == "learned" and self.router is None and "threshold" in policy.settings:
            raise ValueError("the learned rule needs a router, and none is loaded: train one with "
                             "`python -m cascade router train` and name it with --router or CASCADE_ROUTER")
        with self.pair.lock:
            if policy.loop is not None:
                for event in policy.own_loop()(self.pair, prompt, config):
                    if isinstance(event, Summary) and score and event.text_ppl_by_target is None and event.text:
                        event = self._scored(prompt, config, event)
                    yield event
                return
            request = self.encode_config(prompt, config)
            # Every request reads its prompt afresh. Reusing the previous request's cache would save
            # that, but quantized models give slightly different logits for a token read alone or in a
            # batch, so the same request could then write a different text; this way it never does.
            self.pair.draft.clear()
            self.pair.target.clear()
            yield from Generation(self.pair, request.tokens, config, self.tuner if policy.steered else None,
                                  router=self.router, score=score, n_given=request.n_given).run()

    def teacher_force(self, prompt: str, chat: bool, target_tokens: Sequence[int], system: str = "",
                      answer_prefix: str = "", hidden: bool = False,
                      history: Sequence[tuple[str, str]] = ()) -> list["Position"]:
        """The draft's reading at every position of the target's own text for this prompt (after the
        conversation's earlier turns, `history`), in one batched draft pass (`teacher.forced_positions`):
        what every rule's curve is drawn from. `hidden`: the features include the draft's hidden state
        (to train a router that reads it)."""
        from .teacher import forced_positions

        with self.pair.lock:
            prompt_tokens = self.encode(prompt, chat, system, answer_prefix, history)
            return forced_positions(self.pair, prompt_tokens, target_tokens, self.router, hidden=hidden)

    def _scored(self, prompt: str, config: GenerationConfig, summary: Summary) -> Summary:
        """A Summary of a loop that reports text, not token ids (the seed's), with the target's view of that
        text re-tokenized: its perplexity of it and its agreement. The caller holds the pair's lock."""
        started = time.perf_counter()
        tokens = self.pair.target.llm.tokenize(summary.text.encode("utf-8"), add_bos=False, special=False)
        if not tokens:
            return summary
        self.pair.target.clear()
        context = self.encode_config(prompt, config).tokens
        ppl, agreement = quality(target_view(self.pair.target, context, tokens).values())
        return dataclasses.replace(summary, text_ppl_by_target=ppl, target_agreement=agreement,
                                   scoring_s=time.perf_counter() - started)

    def break_even_share(self, horizon: int = 128) -> float | None:
        """The largest big-model share at which cascade beats the target alone on this machine, from the
        costs `auto` has measured on this pair (calibration included); None before any were measured."""
        return self.tuner.break_even_share(horizon)

    def calibrate(self, prompt: str = CALIBRATION_PROMPT, tokens: int = 24) -> None:
        """Teach `auto` this pair's costs before any request, as part of loading: a short run of the
        target alone (its cost per token) and one of speculative decoding (the draft's cost, the
        target's batches, how often the two agree), both watched by auto's tuner. No request's time
        includes it, so auto's first request already writes the way it predicts fastest."""
        with self.pair.lock:
            prompt_tokens = self.encode(prompt, chat=True)
            for config in (GenerationConfig(policy="target", max_tokens=tokens),
                           GenerationConfig(policy="speculative", k=4, max_tokens=tokens)):
                self.pair.draft.clear()
                self.pair.target.clear()
                for _ in Generation(self.pair, prompt_tokens, config, watchers=[self.tuner], score=False).run():
                    pass


class Generation:
    """One request's run of the loop. `run()` yields its events, then its Summary.

    `tuner` steers: it chooses how each round is written (auto). `watchers` only observe. `router`
    scores every draft reading (the learned rule). `score`: the target reads the finished text for the
    Summary's quality figures (`score_text`). `n_given`: the last tokens of `prompt` are the answer prefix,
    read as given (the Summary counts them apart)."""

    def __init__(self, pair: ModelPair, prompt: Sequence[int], config: GenerationConfig,
                 tuner: AutoTuner | None = None, watchers: Sequence[Observer] = (), router: Router | None = None,
                 score: bool = True, n_given: int = 0) -> None:
        self.pair, self.config, self.tuner, self.router, self.score = pair, config, tuner, router, score
        self.n_given = n_given
        self.rule = config.judge
        self.mode = Mode(POLICY_TABLE[config.policy], config.k)
        self.prompt = list(prompt)
        self.sampling = S.Sampling(config.temperature, config.top_k, config.top_p)
        # One stream per use, so the target's draws do not depend on how often the draft sampled:
        # `cascade` that escalates everything then reproduces `target` exactly, sampling included.
        self.rng_draft, self.rng_target, self.rng_accept = (
            np.random.default_rng([config.seed, i]) for i in range(3))
        self.budget = min(config.max_tokens, pair.config.n_ctx - len(self.prompt))
        self.out: list[int] = []
        self.pending: list[Proposal] = []
        self.history = History()  # the draft's readings at the output's positions, for the router
        self.routing_s = 0.0  # time spent reading the draft's rows and judging them
        self.router_s = 0.0  # of which the router: its features and its score
        # The target's view of output positions it scored while writing: (log p of the token, its own argmax?)
        self.target_seen: dict[int, tuple[float, bool]] = {}
        self.text = TextAssembler(config.stop)
        self.stop_reason: StopReason | None = None
        self.recorder = Recorder(config.policy, pair.draft, pair.target, steered=tuner is not None,
                                 device=pair.config.device)
        self.observers: list[Observer] = [self.recorder, *watchers] + ([tuner] if tuner is not None else [])

    # ---- the loop ---------------------------------------------------------------------------------

    def run(self) -> Iterator[Event]:
        try:
            while self.stop_reason is None:
                if not self.pending:
                    self.start_round()
                    if self.mode.policy.looks_up and self.look_up():
                        yield from self.target_turn()
                        continue
                policy = self.mode.policy
                if not policy.drafts:
                    yield from self.target_turn()
                    continue
                proposal = self.draft_one()
                doubtful = self.doubtful(proposal.reading)
                self.notify("proposed", doubtful)
                if policy.escalates and doubtful:
                    yield from self.target_turn(escalated=proposal)
                elif policy.check == "none":
                    yield from self.emit(proposal.token, "draft", proposal.draft_ppl, None, proposal.reading,
                                         draft_top=proposal.draft_top)
                else:
                    self.pending.append(proposal)
                    if self.time_to_check(proposal):
                        yield from self.target_turn()
        except GeneratorExit:
            self.stop_reason = "cancelled"
            raise
        finally:
            # Drafts the output did not keep leave the caches now, so each holds only real text.
            for runner in (self.pair.draft, self.pair.target):
                runner.trim_to(self.prompt + self.out)
        summary = self.recorder.summary(self.text.text, self.stop_reason, len(self.prompt))
        summary = dataclasses.replace(summary, routing_s=self.routing_s, router_s=self.router_s,
                                      rule=self.config.rule if self.mode.policy.escalates else "",
                                      answer_prefix=self.config.answer_prefix, n_given_tokens=self.n_given)
        yield self.score_text(summary) if self.score else summary

    def notify(self, hook: str, *args) -> None:
        for observer in self.observers:
            getattr(observer, hook)(*args)

    def start_round(self) -> None:
        if self.tuner is not None:
            lag = len(self.prompt) + len(self.out) - len(self.pair.draft.tokens)
            self.mode = self.tuner.choose(horizon=self.budget - len(self.out), draft_lag=max(lag, 0))
        self.notify("round_started", self.mode)

    def advance(self, model: str, context: list[int], n_rows: int,
                hidden: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The model reads what it lacks of `context`: the logits of its last `n_rows` positions, and, if
        `hidden`, its final hidden state at them (from the same decode; else None)."""
        runner = getattr(self.pair, model)
        before = runner.stats
        rows, states = runner.advance_hidden(context, n_rows) if hidden else (runner.advance(context, n_rows), None)
        done = runner.stats - before
        self.notify("model_called", model, done.tokens_evaluated, done.seconds, n_rows)
        return rows, states

    def draft_one(self) -> Proposal:
        context = self.prompt + self.out + [p.token for p in self.pending]
        rows, states = self.advance("draft", context, 1, hidden=self.router is not None and self.router.n_hidden > 0)
        row = rows[0]
        q = None if self.sampling.greedy else S.distribution(row, self.sampling)
        token = int(np.argmax(row)) if q is None else S.draw(q, self.rng_draft)
        position = len(self.out) + len(self.pending)
        reading = self.read(row, token, position, None if states is None else states[0])
        return Proposal(position, token, reading.draft_ppl, row, q, reading=reading, draft_top=self.named(reading.top))

    def read(self, row: np.ndarray, token: int, position: int, hidden: np.ndarray | None = None) -> DraftReading:
        """The draft's reading of its row at `position` for `token`, with the router's score if one is loaded."""
        started = time.perf_counter()
        reading = read_row(row, token, self.config.alternatives)
        if self.router is not None:
            scoring = time.perf_counter()
            # The last positions before this one: the output's, then the pending proposals'.
            history = History(self.history.items[-HISTORY:] + [_history_item(p.reading, p.draft_ppl)
                                                                for p in self.pending])
            x = features(reading, history, self.pair.token_class(token), position, hidden)
            reading = dataclasses.replace(reading, draft_score=self.router.probability(x))
            self.router_s += time.perf_counter() - scoring
        self.routing_s += time.perf_counter() - started
        return reading

    def doubtful(self, reading: DraftReading) -> bool:
        """Whether the rule sends this position to the target at the configured threshold."""
        return self.rule.escalates(self.rule.score(reading), self.config.threshold)

    def look_up(self) -> bool:
        """Prompt lookup: up to k tokens that followed the text's end where it occurred before become
        pending proposals, to be checked as speculative drafts are. False if it found none."""
        context = self.prompt + self.out
        room = self.budget - len(self.out)
        tokens = continuation(context, self.config.lookup_ngram, min(MIN_NGRAM, self.config.lookup_ngram),
                              min(self.mode.k, room))
        # Nothing is proposed past an end of generation, as the draft stops drafting there.
        end = next((i for i, t in enumerate(tokens) if self.pair.is_end_of_generation(t)), None)
        tokens = tokens if end is None else tokens[:end + 1]
        for token in tokens:
            # The proposal is certain: q is the one-hot of its token, so speculative sampling accepts it with
            # the target's probability of it and, on rejection, draws from the target's distribution
            # without it (the residual), which keeps the target's distribution exactly.
            q = None if self.sampling.greedy else S.one_hot(token, self.pair.n_vocab)
            self.pending.append(Proposal(len(self.out) + len(self.pending), token, None, None, q, "lookup"))
        if tokens:
            self.notify("looked_up", len(tokens))
        return bool(tokens)

    def time_to_check(self, last: Proposal) -> bool:
        window = self.mode.k if self.mode.policy.check == "speculative" else self.config.bild_window
        return (len(self.pending) >= window
                or self.pair.is_end_of_generation(last.token)
                or len(self.out) + len(self.pending) >= self.budget)

    def target_turn(self, escalated: Proposal | None = None) -> Iterator[Event]:
        """The target reads what it has not seen (pending draft tokens included) in one batch,
        judges the pending tokens, and writes the next token itself."""
        pending, self.pending = self.pending, []
        context = self.prompt + self.out + [p.token for p in pending]
        rows, _ = self.advance("target", context, len(pending) + 1)
        target_ppls = [S.token_perplexity(row, p.token) for p, row in zip(pending, rows)]
        kept, token = self.judge(pending, rows, target_ppls)
        for p, row, target_ppl in zip(pending[:kept], rows, target_ppls):
            self.target_seen[p.position] = (-math.log(target_ppl) if math.isfinite(target_ppl) else -math.inf,
                                            int(np.argmax(row)) == p.token)
        if pending:
            self.notify("checked", kept, min(kept + 1, len(pending)))
        for p, row, target_ppl in zip(pending[:kept], rows, target_ppls):
            yield from self.emit(p.token, p.source, p.draft_ppl, target_ppl, p.reading, draft_top=p.draft_top,
                                 target_top=self.top(row))
            if self.stop_reason:
                return
        discard: Status = "rolled_back" if self.mode.policy.check == "rollback" else "rejected"
        for p, row, target_ppl in zip(pending[kept:], rows[kept:], target_ppls[kept:]):
            yield self.tell(p.position, p.token, self.piece(p.token), p.source, discard, p.draft_ppl, target_ppl,
                            p.reading, draft_top=p.draft_top, target_top=self.top(row))
        if escalated is not None:
            yield self.tell(escalated.position, escalated.token, self.piece(escalated.token), "draft", "escalated",
                            escalated.draft_ppl, None, escalated.reading, draft_top=escalated.draft_top)
        # The draft's view of the position the target now writes, when the draft scored it.
        # (None where nothing was proposed here, or lookup proposed it: the draft scored nothing.)
        at = pending[kept] if kept < len(pending) else escalated
        scored = at is not None and at.draft_logits is not None
        draft_ppl = S.token_perplexity(at.draft_logits, token) if scored else None
        self.target_seen[len(self.out)] = (S.token_logprob(rows[kept], token), int(np.argmax(rows[kept])) == token)
        yield from self.emit(token, "target", draft_ppl, S.token_perplexity(rows[kept], token),
                             at.reading if scored else None, draft_top=at.draft_top if scored else None,
                             target_top=self.top(rows[kept]))

    def judge(self, pending: list[Proposal], rows: np.ndarray, target_ppls: list[float]) -> tuple[int, int]:
        """How many pending tokens to keep, and the target's token for the next position."""
        check = self.mode.policy.check
        if check == "rollback":
            kept = next((i for i, ppl in enumerate(target_ppls) if ppl > self.config.rollback_threshold),
                        len(pending))
            return kept, S.choose(rows[kept], self.sampling, self.rng_target)
        if check == "speculative" and not self.sampling.greedy:
            return self.speculative_sample(pending, rows)
        # Greedy verification is prefix matching against the target's argmax.
        for i, p in enumerate(pending):
            best = int(np.argmax(rows[i]))
            if best != p.token:
                return i, best
        return len(pending), S.choose(rows[len(pending)], self.sampling, self.rng_target)

    def speculative_sample(self, pending: list[Proposal], rows: np.ndarray) -> tuple[int, int]:
        """Rejection sampling (Leviathan et al.; Chen et al.): the output follows the target exactly."""
        for i, prop in enumerate(pending):
            p = S.distribution(rows[i], self.sampling)
            if not S.accept_draft(p[prop.token], prop.q[prop.token], self.rng_accept.random()):
                return i, S.draw(S.residual(p, prop.q), self.rng_target)
        return len(pending), S.choose(rows[len(pending)], self.sampling, self.rng_target)

    # ---- output -----------------------------------------------------------------------------------

    def emit(self, token: int, source: Source, draft_ppl: float | None, target_ppl: float | None,
             reading: DraftReading | None = None, **tops: Alternatives) -> Iterator[Event]:
        """Append a token to the output and stop if it ends the generation."""
        position = len(self.out)
        self.out.append(token)
        self.history.items.append(_history_item(reading, draft_ppl))
        text = self.text.push(self.pair.draft.llm.detokenize([token]))
        yield self.tell(position, token, text, source, "accepted", draft_ppl, target_ppl, reading, **tops)
        if self.pair.is_end_of_generation(token):
            self.stop_reason = "eos"
        elif self.text.stopped:
            self.stop_reason = "stop_string"
        elif len(self.out) >= self.budget:
            self.stop_reason = "max_tokens" if self.budget == self.config.max_tokens else "context_full"

    def piece(self, token: int) -> str:
        return self.pair.piece(token)

    def top(self, row: np.ndarray) -> Alternatives:
        """The target's likeliest tokens at a position it read, if the request asks for them (`alternatives`)."""
        return self.named(S.top_tokens(row, self.config.alternatives)) if self.config.alternatives else None

    def named(self, top: Sequence[tuple[int, float]]) -> Alternatives:
        """Token ids with probabilities as the events carry them: each token's text, as many as asked.
        (The draft's come from its reading of the row, `read_row`, in the same passes.)"""
        if not self.config.alternatives:
            return None
        return tuple((self.piece(t), p) for t, p in top[:self.config.alternatives])

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

    # ---- quality ----------------------------------------------------------------------------------

    def score_text(self, summary: Summary) -> Summary:
        """The Summary with the target's view of the finished text: its perplexity of the text and the
        share of tokens it would have chosen itself. Positions it scored while writing are not read
        again; it reads the rest now (from the first it did not score), which `scoring_s` times and
        `wall_s` does not include."""
        if not self.out:
            return summary
        started = time.perf_counter()
        seen = dict(self.target_seen)
        missing = [i for i in range(len(self.out)) if i not in seen]
        tops: dict[int, list[tuple[int, float]]] = {}
        if missing:
            seen.update(target_view(self.pair.target, self.prompt, self.out, missing[0],
                                    alternatives=self.config.alternatives, tops=tops))
        ppl, agreement = quality(seen[i] for i in range(len(self.out)))
        scored_top = tuple((i, self.named(tops[i])) for i in missing if i in tops)
        return dataclasses.replace(summary, text_ppl_by_target=ppl, target_agreement=agreement,
                                   scoring_s=time.perf_counter() - started, scored_top=scored_top)


SCORING_CHUNK = 32  # rows a scoring call asks for at most (each row is the whole vocabulary)


def target_view(target, prompt: Sequence[int], out: Sequence[int], first: int = 0, alternatives: int = 0,
                tops: dict[int, list[tuple[int, float]]] | None = None) -> dict[int, tuple[float, bool]]:
    """For output positions from `first` on: (the target's log-probability of the token written there,
    whether it is the target's own greedy choice), read in chunks of SCORING_CHUNK positions. The
    target's cache keeps what it already holds of the prompt and the text before `first`. With
    `alternatives` and a `tops` dict, each position's likeliest tokens are put in it too."""
    out_view: dict[int, tuple[float, bool]] = {}
    for start in range(first, len(out), SCORING_CHUNK):
        end = min(start + SCORING_CHUNK, len(out))
        # Row j of the last (end - start) rows of prompt + out[:end - 1] predicts out[start + j].
        rows = target.advance(list(prompt) + list(out[:end - 1]), end - start)
        for j, row in enumerate(rows):
            token = out[start + j]
            out_view[start + j] = (S.token_logprob(row, token), int(np.argmax(row)) == token)
            if alternatives and tops is not None:
                tops[start + j] = S.top_tokens(row, alternatives)
    return out_view


def quality(view: Iterable[tuple[float, bool]]) -> tuple[float, float]:
    """(the target's perplexity of a text, the share of its tokens that are the target's own choice), from
    the target's (log-probability, own choice?) at each of the text's positions."""
    view = list(view)
    nll = -sum(logp for logp, _ in view) / len(view)
    return (math.exp(nll) if nll < 700 else math.inf), sum(own for _, own in view) / len(view)


def _history_item(reading: DraftReading | None, draft_ppl: float | None) -> tuple[float, float] | None:
    """(entropy at a position, the draft's log-probability of the token written there), where the draft read it."""
    if reading is None or draft_ppl is None:
        return None
    return reading.draft_entropy, (-math.log(draft_ppl) if math.isfinite(draft_ppl) else -700.0)
