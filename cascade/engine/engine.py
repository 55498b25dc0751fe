"""The engine: a pair of models and the requests it writes, one at a time.

`Engine.generate` turns a request into tokens (`prompt.py`) and runs the loop (`loop.py`) under the pair's
lock, yielding its events; `teacher_force` reads the draft along the target's own text (`forcing.py`) for
the rules' curves; `calibrate` teaches `auto` the pair's costs as part of loading.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from ..routing.curves import Position
from ..routing.router import Router
from .auto import AutoTuner
from .config import GenerationConfig
from .costmodel import target_alone_s
from .events import Event
from .forcing import forced_positions
from .loop import Generation
from .models import ModelPair
from .policies import POLICY_TABLE
from .prompt import EncodedPrompt, PromptError, encode_prompt
from .seed import run_seed_loop

# A chat request like a visitor's for `Engine.calibrate`: how often the draft is unsure, and how often the
# two agree, depend on the kind of text; a continuation of raw prose made `auto` expect far more escalations
# than chat answers have, and keep the target alone where cascade was faster.
CALIBRATION_PROMPT = "Explain in a few sentences how a bicycle stays upright, for a curious child."


class ContextFull(PromptError):
    """A request's prompt (its earlier turns included) leaves the context no room to write."""


class Engine:
    def __init__(self, pair: ModelPair, router: Router | None = None, tuner: AutoTuner | None = None) -> None:
        self.pair = pair
        # The learned rule's router, if one was loaded: every draft reading then carries its score.
        self.router = router
        # What `auto` has learned about this pair's costs; it carries over between requests, and the slots of
        # one loaded pair share it (their costs are those of the shared, batched decodes).
        self.tuner = tuner or AutoTuner()

    def slots(self) -> list["Engine"]:
        """This engine and one per further slot of its pair (`ModelPair.slots`), sharing router and tuner."""
        return [self] + [Engine(pair, self.router, self.tuner) for pair in self.pair.slots()[1:]]

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
                raise ContextFull(
                    f"the conversation is {n} tokens{given}, its {len(history)} earlier messages included, but "
                    f"the context holds {n_ctx}, with room for at least one more; no earlier turn is left out "
                    f"without asking you: start a new conversation, or ask from an earlier turn (whoever runs the "
                    f"models can raise the context with --n-ctx or CASCADE_N_CTX)")
            raise ContextFull(
                f"the prompt is {n} tokens{given} but the context holds {n_ctx}, with room for at least one "
                f"more; shorten it (whoever runs the models can raise the context with --n-ctx or CASCADE_N_CTX)"
            )
        return encoded

    def generate(self, prompt: str, config: GenerationConfig | None = None, score: bool = True,
                 mark_written: bool = False) -> Iterator[Event]:
        """Yield TokenEvents as decisions are made, then one Summary.

        `score`: the target then reads the finished text for the Summary's quality figures
        (`text_ppl_by_target`, `target_agreement`), a pass that delays the Summary by a good share of a
        second; a caller that does not report them (the API) leaves them None and gets its Summary at once.
        `mark_written`: with `score`, a `Written` event (the Summary as it stands) comes the moment the last
        token is written, before that pass, so a page can show the answer finished and the pass apart.
        The pair's lock is held for the whole generation, so one pair (one slot) serves one request at a time;
        the slots of one loaded pair write side by side, their model calls decoded together (`batching`).
        Closing the generator early (a Stop button) leaves both models ready for the next request.
        """
        config = (config or GenerationConfig()).validate().check_router(self.router is not None)
        policy = POLICY_TABLE[config.policy]
        with self.pair.writing():
            if policy.own_loop:
                yield from run_seed_loop(self.pair, prompt, config, score, mark_written)
                return
            request = self.encode_config(prompt, config)
            # Every request reads its prompt afresh. Reusing the previous request's cache would save
            # that, but quantized models give slightly different logits for a token read alone or in a
            # batch, so the same request could then write a different text; this way it never does.
            self.pair.draft.clear()
            self.pair.target.clear()
            yield from Generation(self.pair, request.tokens, config, self.tuner if policy.steered else None,
                                  router=self.router, score=score, n_given=request.n_given,
                                  mark_written=mark_written).run()

    def teacher_force(self, prompt: str, chat: bool, target_tokens: Sequence[int], system: str = "",
                      answer_prefix: str = "", hidden: bool = False,
                      history: Sequence[tuple[str, str]] = ()) -> list[Position]:
        """The draft's reading at every position of the target's own text for this prompt (after the
        conversation's earlier turns, `history`), in one batched draft pass (`forcing.forced_positions`):
        what every rule's curve is drawn from. `hidden`: the features include the draft's hidden state
        (to train a router that reads it)."""
        with self.pair.writing():
            prompt_tokens = self.encode(prompt, chat, system, answer_prefix, history)
            return forced_positions(self.pair, prompt_tokens, target_tokens, self.router, hidden=hidden)

    def break_even_share(self, horizon: int = 128) -> float | None:
        """The largest big-model share at which cascade beats the target alone on this machine, from the
        costs `auto` has measured on this pair (calibration included); None before any were measured."""
        return self.tuner.break_even_share(horizon)

    def estimate_target_alone_s(self, prompt_tokens: int, n_tokens: int) -> float | None:
        """Seconds the target alone would take to read this many prompt tokens and write this many, from the
        costs measured on this pair (at loading, `calibrate`, and since); None before any were measured."""
        t1, b = self.tuner.target_step.value, self.tuner.target_extra.value
        return None if t1 is None or b is None else target_alone_s(t1, b, prompt_tokens, n_tokens)

    def calibrate(self, prompt: str = CALIBRATION_PROMPT, tokens: int = 24) -> None:
        """Teach `auto` this pair's costs before any request, as part of loading: a short run of the
        target alone (its cost per token) and one of speculative decoding (the draft's cost, the
        target's batches, how often the two agree), both watched by auto's tuner. No request's time
        includes it, so auto's first request already writes the way it predicts fastest."""
        with self.pair.writing():
            prompt_tokens = self.encode(prompt, chat=True)
            for config in (GenerationConfig(policy="target", max_tokens=tokens),
                           GenerationConfig(policy="speculative", k=4, max_tokens=tokens)):
                self.pair.draft.clear()
                self.pair.target.clear()
                for _ in Generation(self.pair, prompt_tokens, config, watchers=[self.tuner], score=False).run():
                    pass
