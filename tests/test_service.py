"""The page's engines: loaded once, lent one per running request, failures remembered a while, and an
unreachable Hub told within seconds."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from gradio_client import Client

from cascade import ModelConfig, ModelError, load_pair
from cascade.engine import models
from cascade.engine.models import HUB_TIMEOUT_S, resolve_model
from cascade.serving.service import EngineService

from .helpers import FakeClock, engine_text, hub_at, page_inputs, serve


def test_a_failed_load_is_remembered_for_a_while_then_tried_again():
    attempts, clock = [], FakeClock()

    def loader(config, progress):
        attempts.append(clock.now)
        raise ModelError("the draft model file not found: small.gguf")

    service = EngineService(ModelConfig(draft="small.gguf", target="large.gguf"), loader=loader, clock=clock,
                            retry_after_s=60)
    for _ in range(3):
        with pytest.raises(ModelError, match="not found"):
            service.engine()
    assert len(attempts) == 1  # the two later requests were answered from memory
    clock.now += 61
    with pytest.raises(ModelError):
        service.engine()
    assert len(attempts) == 2 and not service.loaded


def test_with_the_hub_down_the_second_generate_answers_at_once(monkeypatch, tmp_path):
    """Through the page: a Hub that does not answer costs the first visitor the wait, not the next."""
    with silent_server() as port:
        hub_at(monkeypatch, f"http://127.0.0.1:{port}", cache=tmp_path / "empty-cache")
        timeout_s = quick_hub_timeout(monkeypatch)
        loads = []

        def loader(config, progress):
            loads.append(config)
            return load_pair(config, progress)

        service = EngineService(ModelConfig(draft="cascade-tests/down/small.gguf",
                                            target="cascade-tests/down/large.gguf", n_threads=2), loader=loader)
        demo, url = serve(service.lease)
        try:
            client = Client(url, verbose=False)
            started = time.monotonic()
            summaries = [client.predict(*page_inputs(), api_name="/generate")[2]]
            first_s = time.monotonic() - started
            summaries.append(client.predict(*page_inputs(), api_name="/generate")[2])
        finally:
            demo.close()
    assert all("unreachable" in s and "CASCADE_DRAFT" in s for s in summaries), summaries
    assert summaries[0] == summaries[1]
    assert first_s < timeout_s + 3, f"the first answer took {first_s:.1f} s"
    assert len(loads) == 1, "the second request asked the Hub again"  # it was answered from memory


def quick_hub_timeout(monkeypatch) -> float:
    """The Hub's timeout at one second, for a test that waits it out: the product's own is a few seconds,
    and what the test proves (the wait is bounded by the timeout, not by huggingface_hub's retries) holds
    for any value."""
    assert HUB_TIMEOUT_S <= 10, "a visitor should learn within seconds that the Hub cannot be reached"
    monkeypatch.setattr(models, "HUB_TIMEOUT_S", 1.0)
    return models.HUB_TIMEOUT_S


class silent_server:
    """A port on this machine that accepts connections and never answers: a Hub that hangs."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


def test_a_hub_that_never_answers_is_reported_within_seconds(monkeypatch, tmp_path):
    with silent_server() as port:
        hub_at(monkeypatch, f"http://127.0.0.1:{port}", cache=tmp_path / "empty-cache")
        timeout_s = quick_hub_timeout(monkeypatch)
        started = time.monotonic()
        with pytest.raises(ModelError, match="unreachable"):
            resolve_model("cascade-tests/hangs/small.gguf", "draft")
        took = time.monotonic() - started
    print(f"\nan unreachable (silent) Hub was reported in {took:.1f} s")
    assert took < timeout_s + 3, "the Hub's timeout was not what bounded the wait"


def test_two_slots_run_two_requests_at_once_each_on_its_own_sequence_of_one_pair(toy):
    config = ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=1, n_ctx=1024, parallel=2)
    service = EngineService(config)
    engines = service.engines()
    assert len(engines) == 2 and engines[0] is not engines[1]
    assert engines[0].pair.draft.llm is engines[1].pair.draft.llm  # one model, one context
    assert [e.pair.slot for e in engines] == [0, 1] and engines[0].tuner is engines[1].tuner
    in_use, peak, lock = set(), [0], threading.Lock()
    requests = [page_inputs(prompt=p, policy=pol, max_tokens=24, temperature=t, seed=s)
                for p, pol, t, s in (("The cat sat on the mat", "cascade", 0.0, 0), ("My name is Sam", "speculative", 0.8, 3),
                                     ("Once upon a time", "bild", 0.0, 0), ("A dog and a cat", "target", 0.8, 5))]

    def alone(inputs) -> str:
        with service.lease() as engine:
            return engine_text(engine, inputs)

    expected = [alone(r) for r in requests]

    def at_once(inputs) -> str:
        with service.lease() as engine:
            with lock:
                assert id(engine) not in in_use, "two requests on one engine"
                in_use.add(id(engine))
                peak[0] = max(peak[0], len(in_use))
            try:
                return engine_text(engine, inputs)
            finally:
                with lock:
                    in_use.discard(id(engine))

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(at_once, requests * 2))
    assert got == expected * 2
    assert peak[0] == 2


def test_the_page_runs_as_many_generations_at_once_as_it_has_slots(toy):
    config = ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=1, n_ctx=1024, parallel=2)
    service = EngineService(config)
    demo, url = serve(service.lease, concurrency=2)
    try:
        inputs = [page_inputs(prompt="The cat sat on the mat", max_tokens=40),
                  page_inputs(prompt="My name is Sam", policy="speculative", max_tokens=40)]
        expected = [engine_text(service.engine(), i) for i in inputs]
        with ThreadPoolExecutor(2) as pool:
            texts = list(pool.map(lambda i: Client(url, verbose=False).predict(*i, api_name="/generate")[3], inputs))
    finally:
        demo.close()
    assert texts == expected


def test_wait_ready_waits_for_a_load_begun_elsewhere_and_status_says_where_it_stands(toy):
    called, gate = threading.Event(), threading.Event()

    def loader(config, progress):
        called.set()
        gate.wait(60)
        return load_pair(config, progress=progress)

    service = EngineService(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=1, n_ctx=512),
                            loader=loader)
    visitor = threading.Thread(target=service.engines)  # a page visitor's Generate begins the load
    visitor.start()
    assert called.wait(10)
    assert service.status() == ("loading", "")
    assert service.wait_ready(0.2) is False
    gate.set()
    assert service.wait_ready(60) is True and service.status() == ("ok", "")
    visitor.join()


def test_after_a_failed_load_status_says_why_and_when_it_is_tried_again():
    clock = FakeClock()

    def loader(config, progress):
        raise ModelError("the draft model file not found: /home/someone/small.gguf")

    service = EngineService(ModelConfig(draft="small.gguf", target="large.gguf"), loader=loader, clock=clock,
                            retry_after_s=60)
    assert service.retry_in_s() == 0
    with pytest.raises(ModelError, match="not found"):
        service.wait_ready(10)  # starts the load, and is told of its failure at once
    state, reason = service.status()
    assert state == "error" and "not found: small.gguf" in reason and "/home/someone" not in reason
    clock.now += 45
    assert service.retry_in_s() == pytest.approx(15)
