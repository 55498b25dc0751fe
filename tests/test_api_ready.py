"""Ready when the port opens: `/health` in llama-server's shape, and a request that comes while the models
load waits for them (up to CASCADE_API_LOAD_WAIT) instead of being told to come back; every 503 says when
to try again."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from cascade import ModelConfig, ModelError, load_pair
from cascade.api.server import LOADING_RETRY_AFTER_S, ApiSettings, create_api
from cascade.serving.service import EngineService

from .helpers import TOY_THREADS, Server

CHAT = {"model": "cascade", "max_tokens": 4, "messages": [{"role": "user", "content": "Tell me about cats."}]}


class Gate:
    """A loader of the toy pair that loads only once the test opens the gate (or fails, if it never does)."""

    def __init__(self, toy) -> None:
        self.called, self.opened, self.open_for_real = threading.Event(), threading.Event(), True
        self.config = ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=512)

    def __call__(self, config: ModelConfig, progress) -> object:
        self.called.set()
        self.opened.wait(60)
        if not self.open_for_real:
            raise ModelError("the test ended before the models were let load")
        return load_pair(config, progress=progress)

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def gate(toy):
    gate = Gate(toy)
    yield gate
    gate.open_for_real = False  # a load still waiting gives up: nothing is loaded after the test
    gate.open()


@pytest.fixture
def served(gate):
    """The API over a service whose models load only once the gate opens; served(**settings)."""
    servers = []

    def serve(**settings) -> tuple[EngineService, Server]:
        service = EngineService(gate.config, loader=gate)
        servers.append(Server(create_api(service, ApiSettings(**settings))))
        return service, servers[-1]

    yield serve
    for server in servers:
        server.close()


def until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "it did not happen in time"
        time.sleep(0.05)


def test_health_says_loading_then_ok_and_asking_starts_the_load(served, gate):
    _, server = served()
    for path in ("/health", "/v1/health"):  # llama-server answers at both
        r = httpx.get(server.url + path)
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        assert r.headers["retry-after"] == str(LOADING_RETRY_AFTER_S)
    until(gate.called.is_set, 10)  # asking /health started loading the models
    gate.open()
    until(lambda: httpx.get(server.url + "/health").status_code == 200)
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def test_health_needs_no_key(served, gate):
    gate.open()
    service, server = served(api_key="a-key")
    service.engines()
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    assert httpx.get(server.url + "/v1/models").status_code == 401


def test_a_request_sent_while_the_models_load_is_answered_once_they_are(served, gate):
    _, server = served()
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(httpx.post, server.url + "/v1/chat/completions", json=CHAT, timeout=120)
        time.sleep(1.0)
        assert not asked.done(), "the request was answered before the models loaded"
        r = httpx.get(server.url + "/health", timeout=2)  # the event loop still serves while the request waits
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        gate.open()
        answer = asked.result(timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]


def test_past_the_wait_a_request_gets_503_with_retry_after(served):
    _, server = served(load_wait_s=1.0)
    started = time.monotonic()
    r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=30)
    waited = time.monotonic() - started
    assert r.status_code == 503 and r.json()["error"]["code"] == "models_loading", r.text
    assert r.headers["retry-after"] == str(LOADING_RETRY_AFTER_S)
    assert 1.0 <= waited < 6, f"the request waited {waited:.1f} s, not the 1 s it was given"


def test_after_a_failed_load_health_and_requests_say_why_at_once_with_retry_after():
    def loader(config, progress):
        raise ModelError("the draft model file not found: /home/someone/models/small.gguf")

    service = EngineService(ModelConfig(draft="small.gguf", target="large.gguf"), loader=loader, retry_after_s=60)
    server = Server(create_api(service, ApiSettings()))
    try:
        started = time.monotonic()
        r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert time.monotonic() - started < 5, "a failed load should be told at once, not after the wait"
        assert r.status_code == 503 and r.json()["error"]["code"] == "models_unavailable"
        assert "not found: small.gguf" in r.json()["error"]["message"] and "/home/someone" not in r.text
        assert 1 <= int(r.headers["retry-after"]) <= 60
        health = httpx.get(server.url + "/health")
        assert health.status_code == 503 and health.json()["status"] == "error"
        assert "not found: small.gguf" in health.json()["error"] and "/home/someone" not in health.text
        assert 1 <= int(health.headers["retry-after"]) <= 60
    finally:
        server.close()


def test_the_queue_counts_the_requests_that_wait_for_the_models(served, gate):
    _, server = served(queue=1)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(httpx.post, server.url + "/v1/chat/completions", json=CHAT, timeout=120)
        time.sleep(0.5)
        r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
        gate.open()
        assert waiting.result(timeout=120).status_code == 200


def test_the_launcher_starts_loading_the_models_as_the_server_starts(monkeypatch, gate):
    """app.py's main begins the load, in the background, before the server serves (importing app loads nothing)."""
    import uvicorn

    import app

    service = EngineService(loader=gate)
    monkeypatch.setattr(app, "service", service)
    monkeypatch.setattr(app, "tune_interpreter", lambda: None)  # the test process keeps its own switch interval
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda server, **where: served.append(gate.called.wait(10)))
    app.main(["--draft", gate.config.draft, "--target", gate.config.target, "--threads", "1"])
    assert served == [True], "the models had not begun to load when the server started"
    assert not service.loaded  # in the background: the server did not wait for them
