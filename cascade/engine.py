"""The generation loop: the draft proposes, the policy decides when the target is asked.

One loop serves every policy (see `policies.py`). Its state is the emitted tokens, the draft tokens
still waiting for the target's check (`pending`), and the two models' cache cursors, which
`ModelRunner.advance` moves: each model evaluates only tokens it has not seen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from . import sampling as S
from .auto import AutoTuner
from .config import GenerationConfig
from .events import Event, StopReason, Summary, TokenEvent
from .models import ModelPair
from .policies import POLICY_TABLE, Policy
from .prompt import PromptError, encode_prompt
from .text import TextAssembler


@dataclass(frozen=True)
class Proposal:
    """A token the draft sampled, with what the later decisions need to know about it."""

    position: int
    token: int
    draft_ppl: float
    draft_logits: np.ndarray  # the draft's row for this position: scores a target token written here
    q: np.ndarray | None  # the distribution it was drawn from (speculative sampling needs it)


class Engine:
    def __init__(self, pair: ModelPair) -> None:
        self.pair = pair
        # What `auto` has learned about this pair's costs; it carries over between requests.
        self.tuner = AutoTuner()

    def encode(self, prompt: str, chat: bool) -> list[int]:
        tokens = encode_prompt(self.pair.target.llm, prompt, chat)
        room = self.pair.config.n_ctx - len(tokens)
        if room < 1:
            raise PromptError(
                f"the prompt is {len(tokens)} tokens but the context holds {self.pair.config.n_ctx}; "
                f"shorten it (whoever runs the models can raise the context with --n-ctx or CASCADE_N_CTX)"
            )
        return tokens

    def generate(self, prompt: str, config: GenerationConfig | None = None) -> Iterator[Event]:
        """Yield TokenEvents as decisions are made, then one Summary.

        The pair's lock is held for the whole generation, so one pair serves one request at a time.
        Closing the generator early (a Stop button) leaves both models ready for the next request.
        """
        config = (config or GenerationConfig()).validate()
        if config.policy == "seed":
            from .seed import run_seed_loop

            with self.pair.lock:
                yield from run_seed_loop(self.pair, prompt, config)
            return
        with self.pair.lock:
            prompt_tokens = self.encode(prompt, config.chat)
            # Every request reads its prompt afresh. Reusing the previous request's cache would save
            # that, but quantized models give slightly different logits for a token read alone or in a
            # batch, so the same request could then write a different text; this way it never does.
            self.pair.draft.clear()
            self.pair.target.clear()
            tuner = self.tuner if config.policy == "auto" else None
            yield from _Generation(self.pair, prompt_tokens, config, tuner).run()


class _Generation:
    def __init__(self, pair: ModelPair, prompt: Sequence[int], config: GenerationConfig,
                 tuner: AutoTuner | None = None) -> None:
        self.pair, self.config, self.tuner = pair, config, tuner
        self.name = config.policy
        self.policy: Policy = POLICY_TABLE.get(config.policy, POLICY_TABLE["target"])
        self.k = config.k
        self.modes: dict[str, int] = {}  # rounds written in each way (auto switches between them)
        self.prompt = list(prompt)
        self.sampling = S.Sampling(config.temperature, config.top_k, config.top_p)
        # One stream per use, so the target's draws do not depend on how often the draft sampled:
        # `cascade` that escalates everything then reproduces `target` exactly, sampling included.
        self.rng_draft, self.rng_target, self.rng_accept = (
            np.random.default_rng([config.seed, i]) for i in range(3))
        self.room = pair.config.n_ctx - len(self.prompt)
        self.budget = min(config.max_tokens, self.room)
        self.out: list[int] = []
        self.pending: list[Proposal] = []
        self.text = TextAssembler(config.stop)
        self.stop_reason: StopReason | None = None
        self.counts = {"draft": 0, "target": 0, "drafted": 0, "escalated": 0, "rejected": 0, "rolled_back": 0}
        self._start_stats = (pair.draft.stats, pair.target.stats)
        self._t0 = time.perf_counter()

    # ---- the loop ---------------------------------------------------------------------------------

    def run(self) -> Iterator[Event]:
        try:
            while self.stop_reason is None:
                if self.tuner is not None and not self.pending:
                    self.choose_mode()
                if not self.policy.drafts:
                    yield from self.target_turn()
                    continue
                proposal = self.draft_one()
                doubtful = proposal.draft_ppl > self.config.threshold
                if self.tuner is not None:
                    self.tuner.observe_proposal(doubtful)
                if self.policy.escalates and doubtful:
                    yield from self.target_turn(escalated=proposal)
                elif self.policy.check == "none":
                    yield from self.emit(proposal.token, "draft", proposal.draft_ppl, None)
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
        yield self.summary()

    def choose_mode(self) -> None:
        lag = len(self.prompt) + len(self.out) - len(self.pair.draft.tokens)
        choice = self.tuner.choose(horizon=self.budget - len(self.out), draft_lag=max(lag, 0))
        self.policy, self.k = choice.policy, choice.k
        mode = f"{choice.policy.name} k={choice.k}" if choice.policy.check == "speculative" else choice.policy.name
        self.modes[mode] = self.modes.get(mode, 0) + 1

    def timed_advance(self, model: str, context: list[int], n_rows: int) -> np.ndarray:
        runner = getattr(self.pair, model)
        before = runner.stats
        rows = runner.advance(context, n_rows)
        if self.tuner is not None:
            done = runner.stats - before
            observe = self.tuner.observe_draft_call if model == "draft" else self.tuner.observe_target_call
            observe(done.tokens_evaluated, done.seconds)
        return rows

    def draft_one(self) -> Proposal:
        context = self.prompt + self.out + [p.token for p in self.pending]
        row = self.timed_advance("draft", context, 1)[0]
        q = None if self.sampling.greedy else S.distribution(row, self.sampling)
        token = int(np.argmax(row)) if q is None else S.draw(q, self.rng_draft)
        self.counts["drafted"] += 1
        ppl = S.perplexity(S.token_logprob(row, token))
        return Proposal(len(self.out) + len(self.pending), token, ppl, row, q)

    def time_to_check(self, last: Proposal) -> bool:
        window = self.k if self.policy.check == "speculative" else self.config.bild_window
        return (len(self.pending) >= window
                or self.pair.is_end_of_generation(last.token)
                or len(self.out) + len(self.pending) >= self.budget)

    def target_turn(self, escalated: Proposal | None = None) -> Iterator[Event]:
        """The target reads what it has not seen (pending draft tokens included) in one batch,
        judges the pending tokens, and writes the next token itself."""
        pending, self.pending = self.pending, []
        context = self.prompt + self.out + [p.token for p in pending]
        rows = self.timed_advance("target", context, len(pending) + 1)
        kept, token = self.judge(pending, rows)
        if self.tuner is not None and pending:
            self.tuner.observe_check(kept, min(kept + 1, len(pending)))
        for p, row in zip(pending[:kept], rows):
            yield from self.emit(p.token, "draft", p.draft_ppl, S.perplexity(S.token_logprob(row, p.token)))
            if self.stop_reason:
                return
        discard = "rolled_back" if self.policy.check == "rollback" else "rejected"
        for p, row in zip(pending[kept:], rows[kept:]):
            yield self.event(p.position, p.token, p.draft_ppl, S.perplexity(S.token_logprob(row, p.token)),
                             "draft", discard, text=self.piece(p.token))
            self.counts[discard] += 1
        if escalated is not None:
            yield self.event(escalated.position, escalated.token, escalated.draft_ppl, None, "draft",
                             "escalated", text=self.piece(escalated.token))
            self.counts["escalated"] += 1
        # The draft's view of the position the target now writes, when the draft scored it.
        at = pending[kept] if kept < len(pending) else escalated
        draft_ppl = S.perplexity(S.token_logprob(at.draft_logits, token)) if at is not None else None
        yield from self.emit(token, "target", draft_ppl, S.perplexity(S.token_logprob(rows[kept], token)))

    def judge(self, pending: list[Proposal], rows: np.ndarray) -> tuple[int, int]:
        """How many pending tokens to keep, and the target's token for the next position."""
        if self.policy.check == "rollback":
            kept = next((i for i, p in enumerate(pending)
                         if S.perplexity(S.token_logprob(rows[i], p.token)) > self.config.rollback_threshold),
                        len(pending))
            return kept, S.choose(rows[kept], self.sampling, self.rng_target)
        if self.policy.check == "speculative" and not self.sampling.greedy:
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

    def emit(self, token: int, source: str, draft_ppl: float | None, target_ppl: float | None) -> Iterator[Event]:
        """Append a token to the output and stop if it ends the generation."""
        position = len(self.out)
        self.out.append(token)
        self.counts[source] += 1
        if self.tuner is not None:
            self.tuner.observe_emitted(1)
        text = self.text.push(self.pair.draft.llm.detokenize([token]))
        yield self.event(position, token, draft_ppl, target_ppl, source, "accepted", text=text)
        if self.pair.is_end_of_generation(token):
            self.stop_reason = "eos"
        elif self.text.stopped:
            self.stop_reason = "stop_string"
        elif len(self.out) >= self.budget:
            self.stop_reason = "max_tokens" if self.budget == self.config.max_tokens else "context_full"

    def piece(self, token: int) -> str:
        return self.pair.draft.llm.detokenize([token]).decode("utf-8", errors="replace")

    def event(self, position, token, draft_ppl, target_ppl, source, status, text) -> TokenEvent:
        return TokenEvent(position=position, token_id=token, text=text, source=source, status=status,
                          draft_ppl=draft_ppl, target_ppl=target_ppl, t=time.perf_counter() - self._t0)

    def summary(self) -> Summary:
        c = self.counts
        return Summary(
            text=self.text.text, policy=self.name, stop_reason=self.stop_reason,
            prompt_tokens=len(self.prompt), n_tokens=len(self.out),
            n_draft_tokens=c["draft"], n_target_tokens=c["target"], n_drafted=c["drafted"],
            n_escalated=c["escalated"], n_rejected=c["rejected"], n_rolled_back=c["rolled_back"],
            wall_s=time.perf_counter() - self._t0,
            draft=self.pair.draft.stats - self._start_stats[0],
            target=self.pair.target.stats - self._start_stats[1],
            modes=dict(self.modes),
        )
