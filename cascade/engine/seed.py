"""The seed's own loop, the `seed` policy's baseline: one `llm(text, max_tokens=1, logprobs=1)` call per token
on the growing text, the draft first, the target where the draft's perplexity exceeds the threshold."""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
import weakref
from typing import TYPE_CHECKING, Iterator

import llama_cpp

from .batching import on_decoding_thread
from .events import Counts, Event, ModelStats, Summary, Timings, TokenEvent, Work, Written
from .models import ModelPair, load_model
from .prompt import encode_prompt, render_chat
from .scoring import score_text

if TYPE_CHECKING:
    from .config import GenerationConfig

# The seed's models keep logits for every position, so their context is kept small (room for a chat prompt).
SEED_N_CTX = 1024

# The seed's copies of each loaded pair's models, keyed by the draft's shared context (one for all slots).
_SEED_MODELS: "weakref.WeakKeyDictionary[object, tuple[llama_cpp.Llama, llama_cpp.Llama]]" = \
    weakref.WeakKeyDictionary()
_LOADING = threading.Lock()


def seed_models(pair: ModelPair) -> tuple[llama_cpp.Llama, llama_cpp.Llama]:
    """Copies of the pair's models with logits_all=True (as `logprobs` needs), loaded on first use."""
    key = pair.draft.context
    with _LOADING:
        if key not in _SEED_MODELS:
            config = dataclasses.replace(pair.config, n_ctx=min(pair.config.n_ctx, SEED_N_CTX))
            _SEED_MODELS[key] = (load_model(pair.draft_path, config, "draft", logits_all=True),
                                 load_model(pair.target_path, config, "target", logits_all=True))
        return _SEED_MODELS[key]


def release_seed_models(pair: ModelPair) -> None:
    """Free the copies (their all-position logits are large) until the baseline runs again."""
    _SEED_MODELS.pop(pair.draft.context, None)


def _next_token(llm, prompt: str, config: "GenerationConfig") -> tuple[str, float | None, str]:
    # The engine's sampling settings (no repeat penalty or min-p), on the one decoding thread.
    out = on_decoding_thread(llm, prompt, max_tokens=1, logprobs=1, echo=False, temperature=config.temperature,
                             top_p=config.top_p, top_k=config.top_k, min_p=0.0, repeat_penalty=1.0, seed=config.seed)
    choice = out["choices"][0]
    logprobs = choice["logprobs"]["token_logprobs"] if choice["logprobs"] else []
    return choice["text"], (logprobs[0] if logprobs else None), choice["finish_reason"]


def run_seed_loop(pair: ModelPair, prompt: str, config: "GenerationConfig", score: bool = True,
                  mark_written: bool = False) -> Iterator[Event]:
    """The seed's loop on its copies of the pair's models: TokenEvents, then a Summary (scored as the engine's)."""
    request = encode_prompt(pair.target.llm, prompt, config.chat, config.system, config.answer_prefix,
                            config.history)  # the engine's checks, and the tokens the scoring pass reads
    small, large = seed_models(pair)
    # The answer prefix is read as given, as the engine reads it: the models continue after it.
    text = (render_chat(large, prompt, config.system, config.history) if config.chat else prompt) + config.answer_prefix
    prompt_tokens = len(large.tokenize(text.encode("utf-8"), add_bos=False, special=True))
    generated, counts = "", {"draft": 0, "target": 0, "escalated": 0}
    draft_s = target_s = 0.0
    stop_reason = "max_tokens"
    first_token_s = None
    t0 = time.perf_counter()
    for position in range(config.max_tokens):
        if prompt_tokens + position + 1 >= large.n_ctx():
            stop_reason = "context_full"
            break
        t = time.perf_counter()
        piece, logprob, finish = _next_token(small, text + generated, config)
        draft_s += time.perf_counter() - t
        ppl = math.exp(-logprob) if logprob is not None else math.inf
        source, target_ppl = "draft", None
        if ppl > config.threshold:
            counts["escalated"] += 1
            yield TokenEvent(position, -1, piece, "draft", "escalated", ppl, None, time.perf_counter() - t0)
            t = time.perf_counter()
            piece, target_logprob, finish = _next_token(large, text + generated, config)
            target_s += time.perf_counter() - t
            source = "target"
            target_ppl = math.exp(-target_logprob) if target_logprob is not None else None
        if piece == "" and finish == "stop":  # the model ended its answer
            stop_reason = "eos"
            break
        counts[source] += 1
        generated += piece
        first_token_s = time.perf_counter() - t0 if first_token_s is None else first_token_s
        yield TokenEvent(position, -1, piece, source, "accepted", ppl if source == "draft" else None,
                         target_ppl, time.perf_counter() - t0)
        if any(s in generated for s in config.stop):
            stop_reason = "stop_string"
            break
    n = counts["draft"] + counts["target"]
    made = functools.partial(
        Summary, text=generated, policy="seed", stop_reason=stop_reason, prompt_tokens=prompt_tokens,
        counts=Counts(n_tokens=n, n_draft_tokens=counts["draft"], n_target_tokens=counts["target"],
                      n_drafted=counts["draft"] + counts["escalated"], n_escalated=counts["escalated"]),
        timings=Timings(wall_s=time.perf_counter() - t0, first_token_s=first_token_s),
        # llama-cpp-python does not report evaluation counts; time inside each model's calls is known.
        work=Work(draft=ModelStats(calls=counts["draft"] + counts["escalated"], seconds=draft_s),
                  target=ModelStats(calls=counts["target"], seconds=target_s)),
        device=pair.config.device, answer_prefix=config.answer_prefix, n_given_tokens=request.n_given)
    if not (score and generated):
        yield made()
        return
    if mark_written:
        yield Written(made())
    yield made(quality=score_text(generated, pair.target, request.tokens))
