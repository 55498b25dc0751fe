"""The engine: a pair of models and the requests it writes, one at a time under the pair's lock."""

from __future__ import annotations

from typing import Iterator, Sequence

from ..routing.curves import Position
from ..routing.router import Router
from .auto import AutoTuner, CostWatcher
from .config import GenerationConfig
from .costmodel import target_alone_s
from .events import Event
from .forcing import forced_positions
from .loop import Generation
from .models import ModelPair
from .policies import POLICY_TABLE
from .prompt import EncodedPrompt, PromptError, encode_prompt
from .seed import run_seed_loop

# A chat request like a visitor's: how often the draft is unsure depends on the kind of text.
CALIBRATION_PROMPT = "Explain in a few sentences how a bicycle stays upright, for a curious child."


class ContextFull(PromptError):
    """A request's prompt (its earlier turns included) leaves the context no room to write."""


class Engine:
    def __init__(self, pair: ModelPair, router: Router | None = None, tuner: AutoTuner | None = None) -> None:
        self.pair = pair
        self.router = router
        self.tuner = tuner or AutoTuner()

    def set_priority(self, priority: int) -> None:
        """Whether this engine's calls go before others' (`batching.INTERACTIVE`) or after (`BACKGROUND`)."""
        self.pair.draft.priority = self.pair.target.priority = priority

    def slots(self) -> list["Engine"]:
        """This engine and one per further slot of its pair (`ModelPair.slots`), sharing router and tuner."""
        return [self] + [Engine(pair, self.router, self.tuner) for pair in self.pair.slots()[1:]]

    def encode(self, prompt: str, chat: bool, system: str = "", answer_prefix: str = "",
               history: Sequence[tuple[str, str]] = ()) -> list[int]:
        """The tokens the models read before writing: the request, then the answer prefix (`prompt.py`)."""
        return self.encode_request(prompt, chat, system, answer_prefix, history).tokens

    def encode_request(self, prompt: str, chat: bool, system: str = "", answer_prefix: str = "",
                       history: Sequence[tuple[str, str]] = ()) -> EncodedPrompt:
        encoded = encode_prompt(self.pair.target.llm, prompt, chat, system, answer_prefix, history)
        n, n_ctx = len(encoded.tokens), self.pair.config.n_ctx
        if n >= n_ctx:
            given = f" ({encoded.n_given} of them the answer prefix)" if encoded.n_given else ""
            what, fix = ((f"the conversation is {n} tokens{given}, its {len(history)} earlier messages included,",
                          "no earlier turn is left out without asking you: start a new conversation, or ask from an "
                          "earlier turn") if history else (f"the prompt is {n} tokens{given}", "shorten it"))
            raise ContextFull(f"{what} but the context holds {n_ctx}, with room for at least one more; {fix} (whoever "
                              "runs the models can raise the context with --n-ctx or CASCADE_N_CTX)")
        return encoded

    def generate(self, prompt: str, config: GenerationConfig | None = None, score: bool = True,
                 mark_written: bool = False) -> Iterator[Event]:
        """Yield TokenEvents, then one Summary, under the pair's lock; `score` adds quality (after a `Written`
        with `mark_written`). Closing the generator early leaves both models ready for the next request."""
        config = (config or GenerationConfig()).validate().check_router(self.router is not None)
        policy = POLICY_TABLE[config.policy]
        with self.pair.writing():
            if policy.own_loop:
                yield from run_seed_loop(self.pair, prompt, config, score, mark_written)
                return
            request = self.encode_request(prompt, config.chat, config.system, config.answer_prefix, config.history)
            # A fresh cache each request: reused, batched numerics could change the same request's text.
            self.pair.draft.clear()
            self.pair.target.clear()
            steered = self.tuner if policy.steered else None
            yield from Generation(self.pair, request.tokens, config, steered,
                                  watchers=[] if steered else [CostWatcher(self.tuner)], router=self.router,
                                  score=score, n_given=request.n_given, mark_written=mark_written).run()

    def teacher_force(self, prompt: str, chat: bool, target_tokens: Sequence[int], system: str = "",
                      answer_prefix: str = "", hidden: bool = False,
                      history: Sequence[tuple[str, str]] = ()) -> list[Position]:
        """The draft's reading at every position of the target's text for this prompt (`forcing.forced_positions`)."""
        with self.pair.writing():
            prompt_tokens = self.encode(prompt, chat, system, answer_prefix, history)
            return forced_positions(self.pair, prompt_tokens, target_tokens, self.router, hidden=hidden)

    def break_even_share(self, horizon: int = 128) -> float | None:
        """The largest big-model share at which cascade beats the target alone (None before costs are measured)."""
        return self.tuner.break_even_share(horizon)

    def cascade_speed(self, share: float, horizon: int = 128) -> float | None:
        """Cascade's predicted speed over the target alone at `share`, from `auto`'s measured costs (None before)."""
        return self.tuner.cascade_speed(share, horizon)

    def estimate_target_alone_s(self, prompt_tokens: int, n_tokens: int) -> float | None:
        """Seconds the target alone would take for this request at the recent costs (None before any)."""
        costs = self.tuner.alone_costs()
        return None if costs is None else target_alone_s(*costs, prompt_tokens, n_tokens)

    def calibrate(self, prompt: str = CALIBRATION_PROMPT, tokens: int = 24) -> None:
        """Teach `auto` this pair's costs: a short run of the target alone, then one of speculative decoding."""
        with self.pair.writing():
            prompt_tokens = self.encode(prompt, chat=True)
            for config in (GenerationConfig(policy="target", max_tokens=tokens),
                           GenerationConfig(policy="speculative", k=4, max_tokens=tokens)):
                self.pair.draft.clear()
                self.pair.target.clear()
                for _ in Generation(self.pair, prompt_tokens, config, watchers=[self.tuner], score=False).run():
                    pass
