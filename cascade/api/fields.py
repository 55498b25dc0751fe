"""Each request field's type, one table per endpoint (`CHAT`, `COMPLETION`), checked by `check`; `body_of` reads
a request's body into one JSON object; a refusal is an `ApiError`."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..engine.config import GenerationConfig

MAX_STOP = 4  # as OpenAI
ROLES = ("system", "developer", "user", "assistant")
# OpenAI's integers are 64-bit; a larger one is no count, length or seed anyone means.
LARGEST_INTEGER = 2**63 - 1
QUOTED_CHARS = 40  # of a string a refusal quotes
MAX_BODY_BYTES = 4 * 2**20  # refused (413) before it is read: over a hundred times the largest context's text


class ApiError(Exception):
    """A refused request: OpenAI's error object, its HTTP status and, for a 503, its Retry-After."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error", retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def shown(value: Any) -> str:
    """A value as a refusal quotes it: a scalar's JSON (a string cut short, in ASCII), a list's or object's kind."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return json.dumps(value if len(value) <= QUOTED_CHARS else value[:QUOTED_CHARS] + "...")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "an integer of more than 64 bits"
    return json.dumps(value)  # true, false, null, a number


@dataclass(frozen=True)
class Kind:
    """What a field takes: a test, a refusal's words (and why), an object's `inner` (`required`), a list's `items`."""

    words: str
    test: Callable[[Any], bool]
    why: str = ""
    inner: Mapping[str, Kind] | None = None
    required: tuple[str, ...] = ()
    items: Kind | None = None


def _is_integer(value: Any) -> bool:
    """An integer, or a float that is one (JSON does not tell 12 from 12.0); never a bool."""
    whole = isinstance(value, int) or isinstance(value, float) and value.is_integer()
    return whole and not isinstance(value, bool) and abs(value) <= LARGEST_INTEGER


def _is_number(value: Any) -> bool:
    """A finite number (JSON's 1e999 reads as infinity); never a bool."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def _is_stop(value: Any) -> bool:
    stops = [value] if isinstance(value, str) else value
    return isinstance(stops, list) and len(stops) <= MAX_STOP and all(isinstance(s, str) and s for s in stops)


def _is_text_part(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)


BOOLEAN = Kind("a boolean (true or false)", lambda v: isinstance(v, bool))
INTEGER = Kind("an integer", _is_integer)
NUMBER = Kind("a number", _is_number)
STRING = Kind("a string", lambda v: isinstance(v, str))
OBJECT = Kind("an object", lambda v: isinstance(v, Mapping))
STOP = Kind(f"a non-empty string or a list of at most {MAX_STOP} non-empty strings", _is_stop)
MODEL = Kind("a string", STRING.test, why="the id of a model on offer (GET /v1/models lists them)")
PROMPT = Kind("a string (or a list of one string)",
              lambda v: isinstance(v, str) or isinstance(v, list) and all(isinstance(p, str) for p in v))
TOOL_CHOICE = Kind('"none" or "auto"', lambda v: v in ("none", "auto"),
                   why="tools are not supported here, so no answer can be made to call one")
MESSAGE = Kind("an object with a role and a content", OBJECT.test, required=("role", "content"), inner={
    "role": Kind("one of " + ", ".join(ROLES[:-1]) + " or " + ROLES[-1], lambda v: v in ROLES),
    "content": Kind('a string or a list of text parts ({"type": "text", "text": "..."})',
                    lambda v: isinstance(v, str) or isinstance(v, list) and all(map(_is_text_part, v)),
                    why="this server reads text only"),
})
MESSAGES = Kind("a non-empty list of messages, each an object with a role and a content",
                lambda v: isinstance(v, list) and len(v) > 0, items=MESSAGE)


def _setting_kind(f: dataclasses.Field) -> Kind:
    """A `cascade` setting's kind: its GenerationConfig field's type."""
    kind = f.metadata.get("type", type(f.default))
    return {str: STRING, int: INTEGER, float: NUMBER, bool: BOOLEAN}[kind]


# GenerationConfig fields given by OpenAI's fields of those names, and by the `cascade` object.
OPENAI_SETTINGS = ("max_tokens", "temperature", "top_p", "seed", "stop")
EXTENSION_SETTINGS = ("rule", "threshold", "budget", "span", "k", "rollback_threshold", "bild_window", "lookup_ngram",
                      "top_k")
EXTENSION = {f.name: _setting_kind(f) for f in dataclasses.fields(GenerationConfig) if f.name in EXTENSION_SETTINGS}

# Both endpoints' fields; each adds its own below.
COMMON = {
    "model": MODEL, "stream": BOOLEAN,
    "stream_options": Kind("an object, such as {\"include_usage\": true}", OBJECT.test,
                           inner={"include_usage": BOOLEAN}),
    "max_tokens": INTEGER, "max_completion_tokens": INTEGER, "temperature": NUMBER, "top_p": NUMBER,
    "n": INTEGER, "seed": INTEGER, "stop": STOP,
    "cascade": Kind("an object of settings, such as {\"threshold\": 3}", OBJECT.test, inner=EXTENSION),
}
CHAT = Kind("a JSON object", OBJECT.test, required=("model", "messages"), inner={
    **COMMON, "messages": MESSAGES, "logprobs": BOOLEAN, "top_logprobs": INTEGER,
    "tool_choice": TOOL_CHOICE, "function_call": TOOL_CHOICE,  # the legacy name
})
COMPLETION = Kind("a JSON object", OBJECT.test, required=("model", "prompt"), inner={
    **COMMON, "prompt": PROMPT, "logprobs": INTEGER,  # the legacy API's logprobs: a number of alternatives
    "suffix": STRING, "echo": BOOLEAN, "best_of": INTEGER,
})


def check(value: Any, kind: Kind, param: str = "") -> None:
    """Raise ApiError 400 (its `param` the path, such as messages[0].role) for the first field not of its kind."""
    if not kind.test(value):
        why = f": {kind.why}" if kind.why else ""
        raise ApiError(400, f"{param or 'the request body'} must be {kind.words}, got {shown(value)}{why}",
                       param or None)
    if kind.items is not None:
        for i, item in enumerate(value):
            check(item, kind.items, f"{param}[{i}]")
    for name, inner in (kind.inner or {}).items():
        where = f"{param}.{name}" if param else name
        if value.get(name) is not None:
            check(value[name], inner, where)
        elif name in kind.required:
            why = f": {inner.why}" if inner.why else ""
            raise ApiError(400, f"{where} is required ({inner.words}){why}", where)


def given(body: Mapping[str, Any], *names: str) -> Any:
    """The first of `names` the body gives (absent and null are not given), or None."""
    return next((body[n] for n in names if body.get(n) is not None), None)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


async def body_of(http: Any) -> dict[str, Any]:
    """The request's JSON object; a body over MAX_BODY_BYTES is refused before more of it is read."""
    declared = http.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large()
    raw = bytearray()
    async for chunk in http.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise too_large()
    return json_object(bytes(raw))


def too_large() -> ApiError:
    return ApiError(413, f"the request body is over {MAX_BODY_BYTES // 2**20} MiB, far more text than the models' "
                         "context can hold; send a shorter conversation", code="request_too_large")


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body's bytes as a JSON object; ApiError 400, saying what to send, for anything else."""
    if not raw.strip():
        raise ApiError(400, "the request body is empty: send a JSON object, such as "
                            '{"model": "cascade", "messages": [{"role": "user", "content": "Hi"}]}')
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ApiError(400, "the request body is not valid JSON: it is not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply to read (a thousand levels or more); "
                            "send JSON that is flatter") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"the request body is not valid JSON ({e})") from None
    except ValueError as e:  # NaN or Infinity, or an integer of thousands of digits
        raise ApiError(400, f"the request body is not valid JSON ({str(e).split(';')[0]})") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {shown(value)}")
    return value
