"""OpenAI's request and response shapes, as pure functions: a checked body becomes a prompt and a
`GenerationConfig` (`chat_request`, `completion_request`; else an `ApiError`), and the engine's events become chunks
and responses, each token's writer, draft perplexity and rule score in a `cascade` extension of the choice."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..engine.config import GenerationConfig, SettingError
from ..engine.events import NO_BUDGET, Alternatives, Counts, Summary, TokenEvent
from ..engine.policies import POLICY_TABLE, offered
from ..routing.rules import RULE_TABLE
from . import fields
from .fields import EXTENSION_SETTINGS, OPENAI_SETTINGS, ApiError, given, shown

# A chat app sends no length: an answer of a page or two, within the context (the engine stops there).
DEFAULT_MAX_TOKENS = 1024
MAX_TOP_LOGPROBS = 20  # OpenAI's own limit
# Fields a chat app may send that this server accepts and does not use (docs/api.md lists them).
IGNORED = ("frequency_penalty", "presence_penalty", "logit_bias", "user", "metadata", "store", "service_tier",
           "parallel_tool_calls", "response_format", "modalities", "reasoning_effort", "prediction",
           "tools", "tool_choice", "functions", "function_call")


def offered_models() -> list[str]:
    """One model id per policy on offer: the page's (the seed's loop is a baseline only)."""
    return [p.name for p in offered()]


@dataclass(frozen=True)
class Request:
    """What a request asks, in the engine's terms."""

    model: str
    prompt: str
    config: GenerationConfig
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    chat: bool = True


# ---- reading requests (each field's type checked first, against `fields.CHAT` or `fields.COMPLETION`) ----------

def _text(content: str | list[dict[str, str]]) -> str:
    """A message's content: text, or text parts (`fields.MESSAGE` let no other part through)."""
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def conversation(messages: list[dict[str, Any]]) -> tuple[str, tuple[tuple[str, str], ...], str, str]:
    """(system message, earlier turns, the user's last message, the answer's start) of a chat request: system
    messages first, then turns ending with a user's message or, for the answer to continue it, an assistant's."""
    system, turns = [], []
    for i, message in enumerate(messages):
        role, text = message["role"], _text(message["content"])
        if role in ("system", "developer"):
            if turns:
                raise ApiError(400, f"messages[{i}]: system messages must come before the conversation's turns",
                               "messages")
            system.append(text)
        elif turns and turns[-1][0] == role:  # two in a row: one turn, as the template would merge them
            turns[-1] = (role, turns[-1][1] + "\n\n" + text)
        else:
            turns.append((role, text))
    prefix = ""
    if turns and turns[-1][0] == "assistant":
        prefix = turns.pop()[1]
    if not turns or turns[-1][0] != "user":
        raise ApiError(400, "the conversation needs a user's message to answer", "messages")
    *history, (_, prompt) = turns
    return "\n\n".join(system), tuple(history), prompt, prefix


def _settings(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The GenerationConfig values a request names: OpenAI's fields, then the `cascade` object's."""
    if model not in offered_models():
        raise ApiError(404, f"the model {shown(model)} does not exist; choose one of {', '.join(offered_models())} "
                            f"(GET /v1/models)", "model", "model_not_found")
    if given(body, "n") not in (None, 1):
        raise ApiError(400, "n must be 1: one answer per request", "n")
    length = given(body, "max_completion_tokens", "max_tokens")
    values: dict[str, Any] = {"policy": model, "max_tokens": DEFAULT_MAX_TOKENS if length is None else int(length)}
    values.update({name: body[name] for name in OPENAI_SETTINGS if name not in values and body.get(name) is not None})
    extension = body.get("cascade") or {}
    for name, value in extension.items():
        if name not in EXTENSION_SETTINGS:
            raise ApiError(400, f"cascade.{name} is not a setting this object takes; it takes "
                                f"{', '.join(EXTENSION_SETTINGS)} (the model names the policy)", f"cascade.{name}")
        if value is not None:
            values[name] = value
    return values


def _parse(values: dict[str, Any]) -> GenerationConfig:
    try:
        return GenerationConfig.parse(values)
    except SettingError as e:
        raise refused(e) from None


def refused(e: SettingError) -> ApiError:
    """A refused setting as a 400 naming the field as the request gives it (`cascade.budget must be ...`)."""
    message = str(e)
    if e.name in EXTENSION_SETTINGS:
        path = f"cascade.{e.name}"
        return ApiError(400, f"cascade.{message}" if message.startswith(e.name + " ") else f"{path}: {message}", path)
    return ApiError(400, message, e.name if e.name in GenerationConfig.__dataclass_fields__ else None)


def _logprobs(body: Mapping[str, Any]) -> tuple[bool, int]:
    logprobs = bool(body.get("logprobs"))
    top = int(given(body, "top_logprobs") or 0)
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ApiError(400, f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}", "top_logprobs")
    if top and not logprobs:
        raise ApiError(400, "top_logprobs needs logprobs set to true", "top_logprobs")
    return logprobs, top


def _stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    options = body.get("stream_options") or {}
    return bool(body.get("stream")), bool(options.get("include_usage"))


def chat_request(body: Any) -> Request:
    """A chat completion request, checked; ApiError names the first thing wrong with it."""
    fields.check(body, fields.CHAT)
    values = _settings(body, body["model"])
    system, history, prompt, prefix = conversation(body["messages"])
    logprobs, top = _logprobs(body)
    stream, usage = _stream(body)
    config = _parse({**values, "chat": True, "system": system, "history": history, "answer_prefix": prefix,
                     "alternatives": top})
    return Request(body["model"], prompt, config, stream, usage, logprobs, top, chat=True)


def completion_request(body: Any) -> Request:
    """A (raw) completion request: the prompt is continued as written."""
    fields.check(body, fields.COMPLETION)
    values = _settings(body, body["model"])
    prompt = body["prompt"]
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise ApiError(400, "prompt must be one text: a string, or a list of one string", "prompt")
        prompt = prompt[0]
    for unsupported in ("suffix", "echo", "best_of"):
        if body.get(unsupported) not in (None, False, 1, ""):
            raise ApiError(400, f"{unsupported} is not supported", unsupported)
    top = int(given(body, "logprobs") or 0)  # the legacy API: logprobs is the number of alternatives
    if not 0 <= top <= 5:
        raise ApiError(400, "logprobs must be between 0 and 5", "logprobs")
    stream, usage = _stream(body)
    config = _parse({**values, "chat": False, "alternatives": top})
    return Request(body["model"], prompt, config, stream, usage, body.get("logprobs") is not None, top, chat=False)


# ---- writing responses ------------------------------------------------------------------------------

def writer_logprob(event: TokenEvent) -> float | None:
    """log p of the token under the model that wrote it (the target, for a token lookup proposed)."""
    ppl = event.draft_ppl if event.source == "draft" else event.target_ppl
    return None if ppl is None else _lp(1.0 / ppl)


def writer_top(event: TokenEvent) -> Alternatives:
    return event.draft_top if event.source == "draft" else event.target_top


def _lp(p: float) -> float:
    """log p, and -9999 (as OpenAI writes it) for a probability of 0 or none at all."""
    return math.log(p) if p > 0 else -9999.0


def provenance(event: TokenEvent, rule: str) -> dict[str, Any]:
    """Who wrote a token and how sure the draft was: the `cascade` extension's entry for it."""
    score = RULE_TABLE[rule].score(event) if rule in RULE_TABLE and event.draft_top1 is not None else None
    ppl = event.draft_ppl
    return {"text": event.text, "writer": event.source, "position": event.position,
            "draft_perplexity": ppl if ppl is None or math.isfinite(ppl) else None,
            "rule": rule, "score": score if score is None or math.isfinite(score) else None}


def chat_logprob(event: TokenEvent, top: int) -> dict[str, Any]:
    return {"token": event.text, "logprob": writer_logprob(event), "bytes": list(event.text.encode("utf-8")),
            "top_logprobs": [{"token": t, "logprob": _lp(p), "bytes": list(t.encode("utf-8"))}
                             for t, p in (writer_top(event) or ())[:top]]}


def finish_reason(summary: Summary) -> str | None:
    return {"eos": "stop", "stop_string": "stop", "max_tokens": "length", "context_full": "length"}.get(
        summary.stop_reason)


def usage(summary: Summary, target_tokens_per_s: float | None, batched: bool = False) -> dict[str, Any]:
    """OpenAI's usage, with the big model's share, the speed, the drafts' counts (llama-server's names too) and
    the slots' mode (`batched`: decoded with other requests; `shared_calls`: this request's calls that were)."""
    c = summary.counts
    vs_target = summary.tokens_per_s / target_tokens_per_s if target_tokens_per_s else None
    return {"prompt_tokens": summary.prompt_tokens, "completion_tokens": c.n_tokens,
            "total_tokens": summary.prompt_tokens + c.n_tokens,
            "cascade": {"policy": summary.policy, "rule": summary.rule or None,
                        "target_share": c.target_share, "n_target_tokens": c.n_target_tokens,
                        "n_draft_tokens": c.n_draft_tokens, "n_lookup_tokens": c.n_lookup_tokens,
                        "n_escalated": c.n_escalated, "n_rejected": c.n_rejected,
                        "n_rolled_back": c.n_rolled_back, "tokens_per_s": summary.tokens_per_s,
                        "vs_target": vs_target, "wall_s": summary.timings.wall_s, **drafts(c),
                        "stop_reason": summary.stop_reason, **budget(summary),
                        "slots": {"batched": batched,
                                  "shared_calls": summary.work.draft.shared_calls + summary.work.target.shared_calls}}}


def drafts(counts: Counts) -> dict[str, int]:
    """The proposals (the draft's and prompt lookup's) and those kept, as llama-server names them."""
    return {"draft_n": counts.n_drafted + counts.n_lookup_proposed,
            "draft_n_accepted": counts.n_draft_tokens + counts.n_lookup_tokens}


def budget(summary: Summary) -> dict[str, Any]:
    """A token budget's account in `usage.cascade` (null without one): share asked, threshold meant, calibration."""
    account = summary.budget.to_dict() if summary.budget is not None else NO_BUDGET
    return {**account, "budget_source": account["budget_source"] or None}


def timings(summary: Summary) -> dict[str, Any]:
    """The final chunk's `timings`, as llama-server names them."""
    return {"predicted_n": summary.counts.n_tokens, "predicted_ms": 1000 * summary.timings.wall_s,
            "predicted_per_second": summary.tokens_per_s, "prompt_n": summary.prompt_tokens,
            **drafts(summary.counts)}


@dataclass
class Stream:
    """One request's events as OpenAI chunks; a token that adds no text yet waits for the one that completes it."""

    request: Request
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    waiting: list[TokenEvent] = field(default_factory=list)
    started: bool = False

    def _chunk(self, *choices: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk" if self.request.chat else "text_completion",
                "created": self.created, "model": self.request.model, "choices": list(choices), **extra}

    def first(self) -> dict[str, Any] | None:
        """The chunk that opens a chat stream (the assistant's role), once."""
        if self.started or not self.request.chat:
            return None
        self.started = True
        return self._chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                            "finish_reason": None})

    def token(self, event: TokenEvent) -> dict[str, Any] | None:
        """The chunk of an accepted token (None while its character is incomplete, or for a discarded one)."""
        if not event.accepted:
            return None
        self.waiting.append(event)
        if not event.text:
            return None
        events, self.waiting = self.waiting, []
        return self._chunk(self.choice(events))

    def choice(self, events: Sequence[TokenEvent], reason: str | None = None) -> dict[str, Any]:
        text = "".join(e.text for e in events)
        rule = self.request.config.rule
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason,
                                  "cascade": {"tokens": [provenance(e, rule) for e in events]}}
        if self.request.chat:
            choice["delta"] = {"content": text}
            choice["logprobs"] = ({"content": [chat_logprob(e, self.request.top_logprobs) for e in events]}
                                  if self.request.logprobs else None)
        else:
            choice["text"] = text
            choice["logprobs"] = (completion_logprobs(events, self.request.top_logprobs)
                                  if self.request.logprobs else None)
        return choice

    def last(self, summary: Summary, target_tokens_per_s: float | None, batched: bool = False) -> list[dict[str, Any]]:
        """The closing chunks: the finish reason (with waiting tokens and timings), then the usage if asked."""
        events, self.waiting = self.waiting, []
        closing = self.choice(events, finish_reason(summary))
        if self.request.chat and not events:
            closing["delta"] = {}
        out = [self._chunk(closing, timings=timings(summary))]
        if self.request.include_usage:
            out.append(self._chunk(usage=usage(summary, target_tokens_per_s, batched)))
        return out


def completion_logprobs(events: Sequence[TokenEvent], top: int) -> dict[str, Any]:
    """The legacy completions API's logprobs: parallel lists."""
    return {"tokens": [e.text for e in events], "token_logprobs": [writer_logprob(e) for e in events],
            "top_logprobs": [{t: _lp(p) for t, p in (writer_top(e) or ())[:top]} for e in events] if top else None,
            "text_offset": []}


def response(request: Request, events: Sequence[TokenEvent], summary: Summary,
             target_tokens_per_s: float | None, batched: bool = False) -> dict[str, Any]:
    """The whole answer at once (a request without `stream`)."""
    stream = Stream(request)
    choice = stream.choice([e for e in events if e.accepted], finish_reason(summary))
    if request.chat:
        choice.pop("delta", None)
        choice["message"] = {"role": "assistant", "content": summary.text}
    else:
        choice["text"] = summary.text
    return {"id": stream.id, "object": "chat.completion" if request.chat else "text_completion",
            "created": stream.created, "model": request.model, "choices": [choice],
            "usage": usage(summary, target_tokens_per_s, batched), "timings": timings(summary)}


def models_list(draft: str, target: str) -> dict[str, Any]:
    """GET /v1/models: one id per policy, the loaded pair's file names in each entry's metadata."""
    created = int(time.time())
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": created, "owned_by": "cascade",
         "cascade": {"description": POLICY_TABLE[name].description, "draft": draft, "target": target}}
        for name in offered_models()]}
