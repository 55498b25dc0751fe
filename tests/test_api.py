"""The OpenAI-compatible API, through the official `openai` client against the real server, on toy models."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import openai  # noqa: E402
from gradio_client import Client  # noqa: E402

from cascade import ModelConfig  # noqa: E402
from cascade.api import protocol  # noqa: E402
from cascade.api.server import ApiSettings, create_api  # noqa: E402
from cascade.engine.events import Summary, TokenEvent  # noqa: E402
from cascade.engine.runner import ModelRunner  # noqa: E402
from cascade.engine.sampling import log_softmax  # noqa: E402
from cascade.serving.pump import EventPump  # noqa: E402
from cascade.serving.service import EngineService  # noqa: E402

from .helpers import TOY_THREADS, Server, engine_text, page_inputs  # noqa: E402

KEY = "test-key-1234"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about cats."}]


@pytest.fixture(scope="module")
def service(toy):
    # Four slots, as app.py and `serve` run: every test's requests go through one of them.
    service = EngineService(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=512,
                                        parallel=4))
    service.engines()  # loaded (and calibrated) before the first request
    return service


@pytest.fixture(scope="module")
def server(service):
    """The page and the API on one port, as app.py serves them, with a key."""
    import gradio as gr

    from cascade.ui.layout import build_demo, queued

    app = create_api(service, ApiSettings(api_key=KEY, cors=("http://chat.example",)))
    app = gr.mount_gradio_app(app, queued(build_demo(service.lease, describe_models=service.describe, concurrency=4)),
                              path="/")
    s = Server(app)
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def engine_run(service, body: dict, chat: bool = True) -> tuple[list[TokenEvent], Summary]:
    """The engine's own events for the request a body describes, run directly."""
    request = protocol.chat_request(body) if chat else protocol.completion_request(body)
    with service.lease() as engine:
        *events, summary = engine.generate(request.prompt, request.config)
    return events, summary


def body(model="cascade", **extra) -> dict:
    return {"model": model, "messages": MESSAGES, "max_tokens": 24, **extra}


# ---- models, answers, provenance -------------------------------------------------------------------

def test_the_models_are_the_policies_on_offer_with_the_pair_named(client, toy):
    ids = [m.id for m in client.models.list().data]
    assert ids == protocol.offered_models() and "cascade" in ids and "seed" not in ids
    entry = client.models.list().data[0].model_dump()
    assert entry["cascade"]["draft"] == toy.small.name and entry["cascade"]["target"] == toy.related.name


def test_an_answer_is_the_engines_own_with_every_tokens_writer(client, service):
    answer = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=24,
                                            extra_body={"cascade": {"threshold": 3}})
    events, summary = engine_run(service, body(cascade={"threshold": 3}))
    assert answer.choices[0].message.content == summary.text
    extension = answer.choices[0].model_dump()["cascade"]["tokens"]
    accepted = [e for e in events if e.accepted]
    assert [t["writer"] for t in extension] == [e.source for e in accepted]
    assert [t["text"] for t in extension] == [e.text for e in accepted]
    assert answer.usage.completion_tokens == summary.counts.n_tokens
    assert answer.usage.prompt_tokens == summary.prompt_tokens
    assert answer.choices[0].finish_reason == "length"


def test_a_stream_carries_the_same_text_provenance_and_usage(client, service):
    stream = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=24, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"cascade": {"threshold": 3}})
    chunks = [c.model_dump() for c in stream]
    events, summary = engine_run(service, body(cascade={"threshold": 3}))
    accepted = [e for e in events if e.accepted]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == summary.text and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    tokens = [t for c in chunks if c["choices"] for t in (c["choices"][0].get("cascade") or {}).get("tokens", [])]
    assert [(t["writer"], t["position"]) for t in tokens] == [(e.source, e.position) for e in accepted]
    # Another slot, its own cache: the same numbers to the last digit (batch-invariant slots).
    assert [t["draft_perplexity"] for t in tokens] == [e.draft_ppl for e in accepted]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == len(accepted)
    by_target = sum(t["writer"] == "target" for t in tokens)
    assert usage["cascade"]["n_target_tokens"] == by_target == summary.counts.n_target_tokens
    assert usage["cascade"]["target_share"] == pytest.approx(by_target / len(tokens))
    assert usage["cascade"]["draft_n"] == summary.counts.n_drafted and usage["cascade"]["draft_n_accepted"] == \
        summary.counts.n_draft_tokens
    assert usage["cascade"]["slots"] == {"batched": False, "shared_calls": 0}  # the slots took turns
    assert usage["cascade"]["vs_target"] is not None and usage["cascade"]["vs_target"] > 0


def test_each_answered_request_leaves_one_line_in_the_hosts_log(client, caplog):
    caplog.set_level(logging.INFO, logger="cascade.api.server")
    for stream in (True, False):
        answer = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=6, stream=stream)
        if stream:
            list(answer)
    lines = [r.getMessage() for r in caplog.records if r.name == "cascade.api.server"]
    assert [line.split()[0] for line in lines] == ["stream", "whole"], lines
    for line in lines:
        assert re.search(r"^\w+ cascade for 127\.0\.0\.1 key \w+: \d+ prompt tokens, waited \d+\.\d\d s for a slot, "
                         r"first token \d+\.\d\d s, \d+ tokens in \d+\.\d\d s \(\w+\)$", line), line


def test_the_stream_ends_without_waiting_for_the_targets_scoring_pass(client, service, monkeypatch):
    """No API field reports the target's perplexity of the text, so the API never pays for that pass;
    the engine's text without it is the same."""
    from cascade.engine import loop

    with service.lease() as engine:
        *_, unscored = engine.generate("Tell me about cats.", score=False)
        *_, scored = engine.generate("Tell me about cats.")
    assert unscored.text == scored.text and unscored.quality is None and scored.quality is not None

    def refuse(*_args, **_kwargs):
        raise AssertionError("the API ran the target's scoring pass")

    monkeypatch.setattr(loop, "score", refuse)
    stream = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=24, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_settings_in_extra_body_take_effect(client):
    def share(**cascade) -> float:
        answer = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=16,
                                                extra_body={"cascade": cascade})
        return answer.usage.model_dump()["cascade"]["target_share"]

    assert share(threshold=1.0) == 1.0  # every token is doubtful at perplexity 1
    assert share(threshold=1e6) == 0.0
    assert share(rule="margin", threshold=1.0) == 1.0
    alone = client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=8)
    assert {t["writer"] for t in alone.choices[0].model_dump()["cascade"]["tokens"]} == {"target"}


def test_a_budget_is_answered_with_the_share_it_delivered_and_the_threshold_it_meant(client):
    answer = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=24,
                                            extra_body={"cascade": {"budget": 0.2, "rule": "margin"}})
    figures = answer.usage.model_dump()["cascade"]
    assert figures["budget"] == 0.2 and figures["rule"] == "margin" and figures["budget_source"]
    assert 0 <= figures["budget_threshold"] <= 1  # in the margin rule's units
    writers = [t["writer"] for t in answer.choices[0].model_dump()["cascade"]["tokens"]]
    assert figures["target_share"] == pytest.approx(writers.count("target") / len(writers))
    assert abs(figures["target_share"] - 0.2) <= 0.1, figures  # delivered: near the budget, at this length
    plain = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=4)
    assert {k: plain.usage.model_dump()["cascade"][k] for k in ("budget", "budget_threshold", "budget_source")} == \
        {"budget": None, "budget_threshold": None, "budget_source": None}


def test_a_streamed_budgets_figures_come_in_the_usage_chunk(client):
    stream = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=24, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"cascade": {"budget": 0.2}})
    figures = [c.model_dump() for c in stream][-1]["usage"]["cascade"]
    assert figures["budget"] == 0.2 and figures["rule"] == "perplexity" and figures["budget_threshold"] >= 1


@pytest.mark.parametrize("budget, words", [
    ("0.2", 'cascade.budget must be a number, got "0.2"'),
    (False, "cascade.budget must be a number, got false"),
    (1.5, "cascade.budget must be between 0 and 1, got 1.5"),
])
def test_a_bad_budget_is_refused_naming_the_field(server, budget, words):
    r = post(server, "/v1/chat/completions", json.dumps(body(cascade={"budget": budget})))
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "cascade.budget" and words in error["message"], r.text


def test_logprobs_are_the_writing_models_own(client, service):
    answer = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=12, logprobs=True,
                                            top_logprobs=3, extra_body={"cascade": {"threshold": 3}})
    content = answer.choices[0].logprobs.content
    writers = [t["writer"] for t in answer.choices[0].model_dump()["cascade"]["tokens"]]
    request = protocol.chat_request(body(max_tokens=12, cascade={"threshold": 3}))
    with service.lease() as engine:
        *events, _ = engine.generate(request.prompt, request.config)
        out = [e.token_id for e in events if e.accepted]
        c = request.config
        context = engine.encode(request.prompt, c.chat, c.system, c.answer_prefix, c.history)
        engine.pair.draft.clear()
        engine.pair.target.clear()
        draft_rows = engine.pair.draft.advance(context + out[:-1], len(out))
        target_rows = engine.pair.target.advance(context + out[:-1], len(out))
    for i, (entry, writer, token) in enumerate(zip(content, writers, out)):
        row = draft_rows[i] if writer == "draft" else target_rows[i]
        assert entry.logprob == pytest.approx(log_softmax(row)[token], abs=2e-3)
        best = np.argsort(-row)[:3]
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(list(log_softmax(row)[best]), abs=2e-3)


def test_raw_completion_continues_the_text(client, service):
    completion = client.completions.create(model="draft", prompt="The cat sat on the mat", max_tokens=10)
    _, summary = engine_run(service, {"model": "draft", "prompt": "The cat sat on the mat", "max_tokens": 10},
                            chat=False)
    assert completion.choices[0].text == summary.text and completion.object == "text_completion"


def test_a_trailing_assistant_message_is_the_answers_start(client, service):
    messages = MESSAGES + [{"role": "assistant", "content": "Cats are"}]
    answer = client.chat.completions.create(model="target", messages=messages, max_tokens=8)
    _, summary = engine_run(service, {"model": "target", "messages": messages, "max_tokens": 8})
    assert summary.answer_prefix == "Cats are" and answer.choices[0].message.content == summary.text


def test_earlier_turns_go_through_the_chat_template(service):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "And now?"}]
    request = protocol.chat_request({"model": "target", "messages": messages})
    with service.lease() as engine:
        c = request.config
        tokens = engine.encode(request.prompt, c.chat, c.system, c.answer_prefix, c.history)
        text = engine.pair.target.llm.detokenize(tokens, special=True).decode()
    assert ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nAnd now?"
            "<|im_end|>\n<|im_start|>assistant\n") in text


# ---- errors -----------------------------------------------------------------------------------------

def post(server, path: str, content: str | bytes, key: str | None = KEY) -> httpx.Response:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    return httpx.post(f"{server.url}{path}", content=content, headers=headers, timeout=60)


@pytest.mark.parametrize("content, status, words", [
    ("{not json", 400, "not valid JSON"),
    (json.dumps(body(model="gpt-4")), 404, "does not exist"),
    (json.dumps(body(cascade={"threshold": -1})), 400, "threshold must be between"),
    (json.dumps({"model": "cascade", "messages": []}), 400, "messages must be a non-empty list"),
    (json.dumps(body(messages=[{"role": "user", "content": "word " * 600}])), 400, "the context holds 512"),
    (json.dumps(body(cascade={"policy": "target"})), 400, "cascade.policy is not a setting"),
    (json.dumps(body(n=2)), 400, "n must be 1"),
    (json.dumps(body(stream="yes")), 400, "stream must be a boolean"),
    (json.dumps(body(max_tokens=12.5)), 400, "max_tokens must be an integer"),
    (json.dumps(body(tool_choice="required")), 400, "tools are not supported"),
    ("[" * 5000, 400, "nested too deeply"),
    ("[1, 2]", 400, "must be a JSON object"),
    ("", 400, "the request body is empty"),
])
def test_bad_requests_get_openais_error_shape_and_the_server_goes_on(server, content, status, words):
    r = post(server, "/v1/chat/completions", content)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"] and {"message", "type", "param", "code"} <= set(error)
    ok = post(server, "/v1/chat/completions", json.dumps(body(max_tokens=4)))
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"]


def test_a_chat_apps_tools_are_accepted_and_not_used_but_a_required_call_is_refused(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                               "parameters": {"type": "object", "properties": {}}}}]
    answer = client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=4, tools=tools,
                                            tool_choice="auto")
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=4, tools=tools,
                                           tool_choice=choice)
        error = refused.value.response.json()["error"]
        assert error["param"] == "tool_choice" and "tools are not supported" in error["message"]


def test_a_wrong_or_missing_key_is_refused(server):
    for key in ("wrong", None):
        r = post(server, "/v1/chat/completions", json.dumps(body(max_tokens=4)), key=key)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()


def test_health_answers_beside_the_page_without_a_key(server):
    r = httpx.get(f"{server.url}/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert r.json()["slots"] == {"total": 4, "busy": 0, "batched": False,
                                 "waiting": {"interactive": 0, "background": 0},
                                 "waiting_calls": {"interactive": 0, "background": 0}}


def test_one_client_past_its_own_queue_is_told_when_to_come_back_and_others_are_not(service):
    from types import SimpleNamespace

    from cascade.api.fields import ApiError
    from cascade.api.server import _Api, client_of

    api = _Api(service, ApiSettings(client_queue=2))
    places = [api.take_place("10.0.0.1"), api.take_place("10.0.0.1")]
    with pytest.raises(ApiError) as refused:
        api.take_place("10.0.0.1")
    reply = api.reply(refused.value)
    assert reply.status_code == 429 and reply.headers["Retry-After"] == "5"
    assert json.loads(reply.body)["error"]["code"] == "client_queue_full"
    api.take_place("10.0.0.2")()  # another client is not refused
    places[0]()
    api.take_place("10.0.0.1")()  # a place given back is the client's again
    # Who a request comes from: its address, and the key it sends where it sends one.
    http = lambda key=None: SimpleNamespace(client=SimpleNamespace(host="10.0.0.1"),  # noqa: E731
                                            headers={"authorization": f"Bearer {key}"} if key else {})
    assert client_of(http()) == "10.0.0.1"
    assert client_of(http("alice")) != client_of(http("bob")) and "alice" not in client_of(http("alice"))


def test_a_request_answered_whole_runs_behind_streamed_ones_then_its_slot_is_everyones_again(client, service,
                                                                                         monkeypatch):
    from cascade.engine.batching import BACKGROUND, INTERACTIVE
    from cascade.engine.engine import Engine

    seen = []
    generate = Engine.generate

    def watched(engine, *args, **kwargs):
        seen.append(engine.pair.target.priority)
        yield from generate(engine, *args, **kwargs)

    monkeypatch.setattr(Engine, "generate", watched)
    client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=4)
    list(client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=4, stream=True))
    assert seen == [BACKGROUND, INTERACTIVE]
    assert all(e.pair.draft.priority == e.pair.target.priority == INTERACTIVE for e in service.engines())


def test_a_browser_client_from_an_allowed_origin_may_call(server):
    r = httpx.options(f"{server.url}/v1/chat/completions", headers={
        "Origin": "http://chat.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://chat.example"


# ---- behaving like a server -------------------------------------------------------------------------

def test_a_client_that_leaves_after_three_chunks_frees_its_slot(server, service, monkeypatch):
    scheduler = service.engines()[0].pair.draft.context.scheduler
    # After 30 model calls the generation waits until its pump is cancelled (the client gone), so the
    # client leaves a generation that is still running however fast this machine writes, and the calls
    # made after it left are the generation's last round, not the rest of its 400 tokens.
    advance, cancel = ModelRunner.advance, EventPump.cancel
    cancelled, calls = threading.Event(), []

    def gated(self, context, n_rows=1):
        calls.append(cancelled.is_set())
        if len(calls) > 30:
            cancelled.wait(timeout=60)
        return advance(self, context, n_rows)

    def cancelling(self):
        cancelled.set()
        cancel(self)

    monkeypatch.setattr(ModelRunner, "advance", gated)
    monkeypatch.setattr(EventPump, "cancel", cancelling)

    def writing() -> list:
        return [e for e in service.engines() if e.pair.lock.locked()]

    request = json.dumps(body(max_tokens=400, cascade={"threshold": 1e6}))
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", content=request.replace(
            '"max_tokens"', '"stream": true, "max_tokens"'), headers=headers, timeout=60) as r:
        chunks = 0
        for line in r.iter_lines():
            chunks += line.startswith("data: ")
            if chunks == 3:  # (seen before leaving: the server may notice the leaving before this thread runs on)
                running = len(writing()) == 1 and scheduler.writing == 1
                break
        assert running, "the generation should still be running"
    assert cancelled.wait(timeout=30), "the client's leaving did not cancel its generation"
    deadline = time.monotonic() + 30
    while writing() or scheduler.writing:
        assert time.monotonic() < deadline, "the slot was not freed"
        time.sleep(0.01)
    assert calls.count(True) < 10, "the generation wrote on after its client left"


def test_ten_streaming_clients_and_a_page_visitor_all_finish_without_cross_talk(server, service, client):
    prompts = [f"Tell me about animal number {i}." for i in range(10)]
    expected = {p: engine_run(service, {"model": "cascade", "max_tokens": 12,
                                        "messages": [{"role": "user", "content": p}]})[1].text for p in prompts}
    visitor = page_inputs(max_tokens=12)
    with service.lease() as engine:
        visitor_text = engine_text(engine, visitor)

    def ask(prompt: str) -> str:
        stream = client.chat.completions.create(model="cascade", max_tokens=12, stream=True,
                                                messages=[{"role": "user", "content": prompt}])
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with ThreadPoolExecutor(11) as pool:
        page = pool.submit(lambda: Client(server.url, verbose=False).predict(*visitor, api_name="/generate")[3])
        answers = dict(zip(prompts, pool.map(ask, prompts)))
        assert page.result(timeout=300) == visitor_text
    assert answers == expected


def test_logprob_math_of_the_protocol():
    event = TokenEvent(0, 5, "hi", "draft", "accepted", draft_ppl=4.0, target_ppl=None, t=0.0,
                       draft_top=(("hi", 0.25), ("ho", 0.2)))
    entry = protocol.chat_logprob(event, 2)
    assert entry["logprob"] == pytest.approx(math.log(0.25)) and entry["bytes"] == [104, 105]
    assert [t["token"] for t in entry["top_logprobs"]] == ["hi", "ho"]
    assert protocol.writer_logprob(TokenEvent(0, 5, "x", "lookup", "accepted", None, 2.0, 0.0)) == \
        pytest.approx(-math.log(2.0))
