"""Requests no one should send, generated: arbitrary JSON, bodies with the right keys and wrong values,
deep nesting, odd unicode (lone surrogates, controls), odd headers. The request parser either reads a
request or refuses it (400, or 404 for a model not on offer), never anything else; the HTTP API answers
every one below 500, each refusal in OpenAI's error shape. On a service that never loads a model, in a
few seconds."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade.api import protocol
from cascade.api.fields import EXTENSION
from cascade.api.server import ApiSettings, create_api
from cascade.routing.rules import RULES

from .helpers import AnsweringService

KEY = "fuzz-key"
QUICK = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- what is generated -----------------------------------------------------------------------------

ODD_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates and controls included
TEXT = st.one_of(ODD_TEXT, st.sampled_from(["", "Hi", "\ud800", "\x00", "é" * 50, "🙂", "none", "auto"]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                    max_leaves=10)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


DEEP = st.integers(900, 3000).map(nested)
PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": TEXT})
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
                                 "content": TEXT | st.lists(PART, max_size=3)})
# Each field with values of its own type (in and out of range), to be mixed with anything at all.
RIGHT = {
    "model": st.sampled_from([*protocol.offered_models(), "gpt-4"]),
    "messages": st.lists(MESSAGE, max_size=3).map(lambda turns: [*turns, {"role": "user", "content": "Hi"}])
    | st.lists(MESSAGE, max_size=4),
    "stream": st.booleans(), "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "max_tokens": st.integers(-1, 16), "max_completion_tokens": st.integers(-1, 16),
    "temperature": st.floats(-1, 6), "top_p": st.floats(-1, 2), "n": st.integers(0, 2),
    "seed": st.integers(-1, 2**33), "stop": TEXT | st.lists(TEXT, max_size=5),
    "logprobs": st.booleans(), "top_logprobs": st.integers(-1, 25),
    "tools": st.lists(JSON, max_size=2), "tool_choice": st.sampled_from(["none", "auto", "required"]),
    "cascade": st.dictionaries(st.sampled_from([*EXTENSION, "policy"]),
                               st.floats(0, 40) | st.integers(0, 40) | st.sampled_from(RULES) | JSON, max_size=3),
}
COMPLETION_RIGHT = {
    **{k: v for k, v in RIGHT.items() if k not in ("messages", "tools", "tool_choice")},
    "prompt": TEXT | st.lists(TEXT, max_size=2), "logprobs": st.integers(-1, 6),
    "echo": st.booleans(), "suffix": TEXT, "best_of": st.integers(0, 2),
}


def near_valid(right: dict, required: tuple[str, ...]) -> st.SearchStrategy:
    """Bodies with the right keys, each value of its own type, and the same with one value of any other
    (or nested too deep to read)."""
    valid = st.fixed_dictionaries({k: right[k] for k in required},
                                  optional={k: right[k] for k in right if k not in required})
    spoiled = st.builds(lambda body, key, value: {**body, key: value}, valid, st.sampled_from(list(right)),
                        st.one_of(JSON, DEEP))
    return valid | spoiled


CHAT_BODIES = near_valid(RIGHT, ("model", "messages")) | JSON
COMPLETION_BODIES = near_valid(COMPLETION_RIGHT, ("model", "prompt")) | JSON


def as_json(body) -> bytes:
    """The body as JSON text; a list nested too deep for json.dumps written out by hand."""
    try:
        return json.dumps(body).encode("utf-8", "surrogatepass")
    except RecursionError:
        return b"[" * 3000 + b"]" * 3000


RAW_BODIES = st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"[" * 5000, b"{" * 5000, b'{"a":' * 2000]),
                       CHAT_BODIES.map(as_json))
HEADER = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=30).map(lambda t: t.encode("latin-1"))

# ---- the parser ------------------------------------------------------------------------------------


def read_or_refuse(read, body) -> None:
    """`read(body)` returns a Request, or refuses it in OpenAI's shape: 400, or 404 for an unknown model."""
    try:
        request = read(body)
    except protocol.ApiError as e:
        assert e.status == 400 or (e.status == 404 and e.code == "model_not_found"), e.message
        json.dumps(e.body()).encode("ascii")  # a response can always carry it
        return
    assert isinstance(request, protocol.Request)


@QUICK
@given(CHAT_BODIES)
def test_the_chat_parser_reads_or_refuses_any_body(body):
    read_or_refuse(protocol.chat_request, body)


@QUICK
@given(COMPLETION_BODIES)
def test_the_completion_parser_reads_or_refuses_any_body(body):
    read_or_refuse(protocol.completion_request, body)


# ---- the HTTP API ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    with TestClient(create_api(AnsweringService(), ApiSettings(api_key=KEY))) as client:
        yield client


def answered_below_500(r) -> None:
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}, r.text


@QUICK
@given(content=RAW_BODIES, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
       content_type=st.sampled_from([b"application/json", b"text/plain", b"", b"multipart/form-data; boundary=x",
                                     b"application/json; charset=latin-1"]),
       authorization=st.one_of(st.just(f"Bearer {KEY}".encode()), st.just(b"Bearer"), HEADER))
def test_the_api_answers_any_body_and_header_below_500(client, content, path, content_type, authorization):
    answered_below_500(client.post(path, content=content, headers={"Content-Type": content_type,
                                                                   "Authorization": authorization}))


@QUICK
@given(body=near_valid(RIGHT, ("model", "messages")))
def test_near_valid_chat_requests_are_answered_or_refused_below_500(client, body):
    r = client.post("/v1/chat/completions", content=as_json(body), headers={"Authorization": f"Bearer {KEY}"})
    answered_below_500(r)
    if r.status_code == 200 and body.get("stream") is not True:
        assert r.json()["choices"][0]["message"]["content"] == "Hi"
