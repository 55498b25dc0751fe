"""A request's fields are read by type, as OpenAI's API reads them, and no body, header or size gets a
server error or a closed connection: each wrong one gets a 400 (or 413) naming what to send instead."""

from __future__ import annotations

import http.client
import json

import pytest
from fastapi.testclient import TestClient

from cascade.api import protocol
from cascade.api.fields import shown
from cascade.api.fields import MAX_BODY_BYTES
from cascade.api.server import ApiSettings, create_api

from .helpers import AnsweringService, Server

MESSAGES = [{"role": "user", "content": "Hi"}]


def chat(**fields) -> dict:
    return {"model": "cascade", "messages": MESSAGES, **fields}


def refusal(read, body) -> protocol.ApiError:
    with pytest.raises(protocol.ApiError) as refused:
        read(body)
    return refused.value


@pytest.mark.parametrize("body, param, words", [
    (chat(stream="yes"), "stream", "stream must be a boolean"),
    (chat(stream=1), "stream", "stream must be a boolean"),
    (chat(max_tokens=12.5), "max_tokens", "max_tokens must be an integer, got 12.5"),
    (chat(max_tokens=True), "max_tokens", "max_tokens must be an integer, got true"),
    (chat(max_tokens="12"), "max_tokens", "max_tokens must be an integer"),
    (chat(max_completion_tokens=[1]), "max_completion_tokens", "must be an integer, got a list"),
    (chat(max_tokens=10**30), "max_tokens", "must be an integer"),
    (chat(temperature="0.7"), "temperature", "temperature must be a number"),
    (chat(temperature=float("inf")), "temperature", "temperature must be a number"),
    (chat(top_p=False), "top_p", "top_p must be a number"),
    (chat(stop=5), "stop", "stop must be a non-empty string or a list of at most 4"),
    (chat(stop=["a", "b", "c", "d", "e"]), "stop", "a list of at most 4"),
    (chat(stop=["a", 1]), "stop", "a list of at most 4 non-empty strings"),
    (chat(n="1"), "n", "n must be an integer"),
    (chat(seed=1.5), "seed", "seed must be an integer"),
    (chat(logprobs="true"), "logprobs", "logprobs must be a boolean"),
    (chat(logprobs=True, top_logprobs="3"), "top_logprobs", "top_logprobs must be an integer"),
    (chat(stream_options=True), "stream_options", "stream_options must be an object"),
    (chat(stream_options={"include_usage": "yes"}), "stream_options.include_usage", "must be a boolean"),
    (chat(model=3), "model", "model must be a string"),
    ({"messages": MESSAGES}, "model", "model is required"),
    ({"model": "cascade"}, "messages", "messages is required"),
    (chat(messages=[]), "messages", "messages must be a non-empty list"),
    (chat(messages={"role": "user"}), "messages", "messages must be a non-empty list"),
    (chat(messages=["Hi"]), "messages[0]", "messages[0] must be an object with a role and a content"),
    (chat(messages=[{"role": "robot", "content": "Hi"}]), "messages[0].role", "must be one of system, developer"),
    (chat(messages=[{"role": ["user"], "content": "Hi"}]), "messages[0].role", "got a list"),
    (chat(messages=[{"content": "Hi"}]), "messages[0].role", "messages[0].role is required"),
    (chat(messages=[{"role": "user", "content": 5}]), "messages[0].content", "a string or a list of text parts"),
    (chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
     "messages[0].content", "this server reads text only"),
    (chat(cascade=[]), "cascade", "cascade must be an object"),
    (chat(cascade={"threshold": "3"}), "cascade.threshold", "cascade.threshold must be a number"),
    (chat(cascade={"k": 2.5}), "cascade.k", "cascade.k must be an integer"),
    (chat(cascade={"rule": 1}), "cascade.rule", "cascade.rule must be a string"),
    (chat(cascade={"top_k": True}), "cascade.top_k", "cascade.top_k must be an integer"),
    (chat(cascade={"budget": "0.2"}), "cascade.budget", 'cascade.budget must be a number, got "0.2"'),
    (chat(cascade={"budget": True}), "cascade.budget", "cascade.budget must be a number, got true"),
    (chat(cascade={"budget": 1.5}), "cascade.budget", "cascade.budget must be between 0 and 1, got 1.5"),
    (chat(cascade={"budget": -0.1}), "cascade.budget", "cascade.budget must be between 0 and 1"),
    (chat(cascade={"k": 0}), "cascade.k", "cascade.k must be between 1 and 32"),
    (chat(tool_choice="required"), "tool_choice", "tools are not supported"),
    (chat(tool_choice={"type": "function", "function": {"name": "get_weather"}}), "tool_choice",
     "tools are not supported"),
    (chat(function_call={"name": "get_weather"}), "function_call", "tools are not supported"),
])
def test_a_chat_field_of_the_wrong_type_is_refused_by_name(body, param, words):
    error = refusal(protocol.chat_request, body)
    assert error.status == 400 and error.param == param and words in error.message, error.message


@pytest.mark.parametrize("body, param, words", [
    ({"model": "draft", "prompt": 5}, "prompt", "prompt must be a string"),
    ({"model": "draft", "prompt": ["a", 1]}, "prompt", "prompt must be a string"),
    ({"model": "draft", "prompt": ["a", "b"]}, "prompt", "a list of one string"),
    ({"model": "draft"}, "prompt", "prompt is required"),
    ({"model": "draft", "prompt": "a", "logprobs": True}, "logprobs", "logprobs must be an integer"),
    ({"model": "draft", "prompt": "a", "echo": "no"}, "echo", "echo must be a boolean"),
    ({"model": "draft", "prompt": "a", "stream": "yes"}, "stream", "stream must be a boolean"),
])
def test_a_completion_field_of_the_wrong_type_is_refused_by_name(body, param, words):
    error = refusal(protocol.completion_request, body)
    assert error.status == 400 and error.param == param and words in error.message, error.message


def test_a_chat_apps_own_fields_are_accepted_and_not_used():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    plain = protocol.chat_request(chat())
    for extra in ({"tools": tools, "tool_choice": "auto"}, {"tools": tools, "tool_choice": "none"},
                  {"functions": tools, "function_call": "auto"}, {"user": "u1", "parallel_tool_calls": False}):
        assert protocol.chat_request(chat(**extra)) == plain
    assert {"tools", "tool_choice", "functions", "function_call"} <= set(protocol.IGNORED)


def test_null_is_not_given_and_a_whole_float_is_an_integer():
    request = protocol.chat_request(chat(max_tokens=None, max_completion_tokens=12.0, temperature=None, stop=None,
                                         n=None, cascade={"threshold": None, "k": 2.0}))
    assert request.config.max_tokens == 12 and request.config.k == 2 and request.config.temperature == 0.0


def test_a_budget_is_a_share_or_null():
    assert protocol.chat_request(chat(cascade={"budget": 0.2})).config.budget == 0.2
    assert protocol.chat_request(chat(cascade={"budget": 0})).config.budget == 0.0
    assert protocol.chat_request(chat(cascade={"budget": None})).config.budget is None
    assert protocol.chat_request(chat()).config.budget is None


def test_a_refusal_quotes_a_value_short_and_safe():
    assert shown("x" * 1000).startswith('"xxxx') and len(shown("x" * 1000)) < 60
    assert shown("\ud800") == '"\\ud800"' and shown([[[]]]) == "a list" and shown({"a": 1}) == "an object"
    assert shown(10**400) == "an integer of more than 64 bits" and shown(True) == "true" and shown(None) == "null"


# ---- bodies, through HTTP --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    with TestClient(create_api(AnsweringService(), ApiSettings())) as client:
        yield client


@pytest.mark.parametrize("content, status, words", [
    (b"", 400, "the request body is empty"),
    (b"   \n", 400, "the request body is empty"),
    (b"null", 400, "must be a JSON object, got null"),
    (b"[1, 2]", 400, "must be a JSON object, got a list"),
    (b"42", 400, "must be a JSON object, got 42"),
    (b'"hi"', 400, "must be a JSON object"),
    (b"{not json", 400, "not valid JSON"),
    (b"\xff\xfe{}", 400, "not UTF-8"),
    (b'{"model": "cascade", "temperature": NaN}', 400, "NaN is not a JSON number"),
    (b'{"max_tokens": ' + b"9" * 5000 + b"}", 400, "not valid JSON"),
    (b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "nested too deeply"),
    (b"[" * 100_000, 400, "nested too deeply"),
    (b"x" * (20 * 2**20), 413, "over 4 MiB"),
])
def test_a_body_that_is_no_request_gets_a_clear_refusal(client, content, status, words):
    r = client.post("/v1/chat/completions", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == status and words in r.json()["error"]["message"], r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_a_body_over_the_limit_is_refused_without_a_length_given(client):
    chunks = (b"x" * 2**20 for _ in range(MAX_BODY_BYTES // 2**20 + 2))
    r = client.post("/v1/chat/completions", content=chunks)
    assert r.status_code == 413


def test_valid_json_under_another_content_type_is_read(client):
    for content_type in ("text/plain", "application/x-www-form-urlencoded", ""):
        r = client.post("/v1/chat/completions", content=json.dumps(chat()), headers={"Content-Type": content_type})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hi"


def test_a_path_or_method_the_api_lacks_is_refused_in_openais_shape(client):
    for r in (client.get("/v1/nothing"), client.delete("/v1/chat/completions")):
        assert r.status_code in (404, 405) and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_an_unexpected_failure_is_a_500_in_openais_shape_and_the_server_goes_on(caplog):
    class Broken(AnsweringService):
        @property
        def config(self):
            raise RuntimeError("a bug")

    with TestClient(create_api(Broken(), ApiSettings())) as client:
        r = client.get("/v1/models")
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error" and "a bug" not in r.text
        assert client.post("/v1/chat/completions", json=chat()).status_code == 200
    assert "a request failed" in caplog.text


def test_after_a_bad_body_the_same_connection_serves_the_next_request():
    server = Server(create_api(AnsweringService(), ApiSettings()))
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for content in (b"[" * 5000, b"\xff", b"[]", json.dumps(chat(stream="yes")).encode(), b""):
            connection.request("POST", "/v1/chat/completions", body=content,
                               headers={"Content-Type": "application/json"})
            if content == b"[" * 5000:
                opened = connection.sock.getsockname()
            refused = connection.getresponse()
            assert refused.status == 400 and json.loads(refused.read())["error"]["message"]
            assert refused.getheader("connection") != "close"
        connection.request("POST", "/v1/chat/completions", body=json.dumps(chat()))
        answered = connection.getresponse()
        assert answered.status == 200 and json.loads(answered.read())["choices"][0]["message"]["content"] == "Hi"
        assert connection.sock.getsockname() == opened, "the server closed the connection"
        connection.close()
    finally:
        server.close()
