"""Switching the big model while serving: the service swaps the pair once no engine is lent, a refusal or a
failed load leaves the old pair serving, the page's control says so, and pass rates are quoted only for the
pair measured."""

from __future__ import annotations

import os
import runpy
import threading
from dataclasses import replace
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from fastapi.testclient import TestClient  # noqa: E402

from cascade import GenerationConfig, ModelConfig, ModelError, load_pair  # noqa: E402
from cascade.api.server import ApiSettings, create_api  # noqa: E402
from cascade.engine import memory  # noqa: E402
from cascade.engine.models import check_memory, locate  # noqa: E402
from cascade.serving import service as service_module  # noqa: E402
from cascade.serving.service import EngineService  # noqa: E402
from cascade.serving.settings import switching_allowed  # noqa: E402
from cascade.ui.bigmodel import BigModels, label  # noqa: E402
from cascade.ui.quality import quality_sentence  # noqa: E402

from .helpers import TOY_THREADS, engine_for, engine_text, page_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INPUTS = page_inputs(prompt="The cat sat on the mat", policy="cascade", max_tokens=16, temperature=0.0)


def toy_service(draft: Path, target: Path, loader=load_pair) -> EngineService:
    config = ModelConfig(draft=str(draft), target=str(target), n_threads=TOY_THREADS, n_ctx=1024)
    return EngineService(config, loader=loader, warm=lambda engine: None)


def served_target(service: EngineService) -> Path:
    with service.lease() as engine:
        return engine.pair.target_path


def test_a_switch_loads_the_new_target_and_the_next_generation_uses_it(toy):
    service = toy_service(toy.small, toy.related)
    old = service.engine()
    said: list[str] = []
    config = service.switch_target(str(toy.large), progress=said.append)
    assert config.target == str(toy.large) and service.config == config
    with service.lease() as engine:
        assert engine.pair.target_path == toy.large and engine.pair.draft_path == toy.small
        assert engine_text(engine, INPUTS) == engine_text(engine_for(toy.small, toy.large), INPUTS)
    assert old.pair.draft.context._batch is None, "the old pair's memory was not given back"
    assert "locating the target model" in said and "loading the target model" in said
    assert "toy-large" in service.describe() and service.started_target == str(toy.related)
    with TestClient(create_api(service, ApiSettings())) as client:
        entry = client.get("/v1/models").json()["data"][0]
    assert entry["cascade"]["target"] == toy.large.name


def test_a_switch_waits_until_the_leased_engine_comes_back_and_new_leases_wait_for_it(toy):
    service = toy_service(toy.small, toy.related)
    waiting, later_got = threading.Event(), []

    def progress(message: str) -> None:
        if message.startswith("waiting for the generations"):
            waiting.set()

    with service.lease() as engine:
        switch = threading.Thread(target=service.switch_target, args=(str(toy.large), progress))
        switch.start()
        assert waiting.wait(60), "the switch did not wait for the engine lent"
        later = threading.Thread(target=lambda: later_got.append(served_target(service)))
        later.start()
        later.join(1.0)
        assert switch.is_alive() and later.is_alive() and not later_got  # both wait for the lease to end
        assert engine.pair.target_path == toy.related
        assert engine_text(engine, INPUTS)  # the engine lent still writes
    switch.join(60)
    later.join(60)
    assert later_got == [toy.large]


def test_a_refused_switch_leaves_the_old_pair_serving_and_says_why(toy, monkeypatch):
    loads = []
    service = toy_service(toy.small, toy.small, loader=lambda config, progress: loads.append(config.target)
                          or load_pair(config, progress))
    before = engine_text(service.engine(), INPUTS)
    monkeypatch.setattr(memory, "free_memory", lambda: 0)  # only the loaded pair's memory is there to take
    with pytest.raises(ModelError, match=r"target model toy-related-v\d+\.gguf needs about .* GB free"):
        service.switch_target(str(toy.related))
    assert loads == [str(toy.small)], "a refused pair was loaded"
    assert service.config.target == str(toy.small) and served_target(service) == toy.small
    assert engine_text(service.engine(), INPUTS) == before


def test_the_memory_the_loaded_pair_holds_counts_as_free_for_its_successor(toy, monkeypatch):
    service = toy_service(toy.small, toy.related)
    service.engine()
    # Nothing free while the old pair is loaded; its memory comes back once it is closed.
    monkeypatch.setattr(memory, "free_memory", lambda: 0 if service.loaded else 10 ** 12)
    monkeypatch.setenv(memory.SKIP_ENV, "")
    smaller = replace(service.config, target=str(toy.small))
    with pytest.raises(ModelError, match="GB free"):  # counted alone, the free memory would not do
        check_memory(smaller, locate(smaller.draft), locate(smaller.target), free_memory=lambda: 0)
    assert service.switch_target(str(toy.small)).target == str(toy.small)
    assert served_target(service) == toy.small


def test_a_failed_load_loads_the_old_pair_again(toy):
    def loader(config, progress):
        if config.target == str(toy.large):
            raise ModelError("the target model could not be loaded (truncated or corrupt?): toy-large.gguf")
        return load_pair(config, progress)

    service = toy_service(toy.small, toy.related, loader=loader)
    service.engine()
    with pytest.raises(ModelError, match="corrupt"):
        service.switch_target(str(toy.large))
    assert service.loaded and service.config.target == str(toy.related)
    assert served_target(service) == toy.related and engine_text(service.engine(), INPUTS)


def test_the_control_offers_each_size_with_its_need_and_switches_to_the_one_chosen(toy):
    service = toy_service(toy.small, toy.related)
    big = BigModels(service, sizes={"1.5B": str(toy.related), "7B": str(toy.large)})
    offered = big.offered()
    assert offered["value"] == "1.5B" and [value for _, value in offered["choices"]] == ["1.5B", "7B"]
    assert all(" · about " in words and words.endswith(" GB") for words, _ in offered["choices"])
    line, dropdown = big.switch("7B", progress=lambda *a, **k: None)
    assert "toy-large" in line and "Not switched" not in line and dropdown["value"] == "7B"
    assert served_target(service) == toy.large
    line, _ = big.switch("70B", progress=lambda *a, **k: None)
    assert "**Not switched:** There is no big model '70B' on this page" in line


def test_the_control_says_a_refusal_under_the_models_line_and_keeps_the_old_pair(toy, monkeypatch):
    service = toy_service(toy.small, toy.small)
    service.engine()
    big = BigModels(service, sizes={"1.5B": str(toy.related)})
    monkeypatch.setattr(memory, "free_memory", lambda: 0)
    words = dict((value, words) for words, value in big.offered()["choices"])
    assert toy.small.name in words, "the started big model, none of the sizes, is offered too"
    assert " · needs " in words["1.5B"] and words["1.5B"].endswith(" GB free")
    line, dropdown = big.switch("1.5B", progress=lambda *a, **k: None)
    first, refusal = line.split("  \n")
    assert first == service.describe() and "toy-small" in first
    assert refusal.startswith("**Not switched:** The target model toy-related") and "GB free" in refusal
    assert str(toy.small.parent) not in refusal  # no path of this machine
    assert dropdown["value"] == toy.small.name and served_target(service) == toy.small


def test_the_catalog_sizes_read_as_hosting_md_gives_them_before_any_file_is_here(monkeypatch):
    """The default pair (a Q4_0 draft the catalog does not hold, estimated by its size's file) at 4 slots."""
    monkeypatch.setattr(service_module, "local_model", lambda spec: None)  # nothing downloaded yet
    monkeypatch.setattr(memory, "free_memory", lambda: 9_100_000_000)
    monkeypatch.setenv(memory.SKIP_ENV, "")
    big = BigModels(EngineService(ModelConfig(parallel=4)))
    assert [words for words, _ in big.offered()["choices"]] == [
        "1.5B · about 3.8 GB", "3B · about 4.9 GB", "7B · about 7.8 GB", "14B · needs 14.4 GB, 9.1 GB free"]


def test_a_choice_reads_its_need_against_the_room_here():
    assert label("7B", 7_800_000_000, 9_100_000_000) == "7B · about 7.8 GB"
    assert label("14B", 14_400_000_000, 9_100_000_000) == "14B · needs 14.4 GB, 9.1 GB free"
    assert label("7B", 7_800_000_000, None) == "7B · about 7.8 GB" and label("7B", None, 1) == "7B"


def test_an_operator_can_hide_the_control(monkeypatch):
    assert switching_allowed({}) and switching_allowed({"CASCADE_SWITCH_MODELS": "1"})
    assert not switching_allowed({"CASCADE_SWITCH_MODELS": "0"})
    for value, shown in (("0", False), ("", True)):
        monkeypatch.setenv("CASCADE_SWITCH_MODELS", value)
        app = runpy.run_path(str(ROOT / "app.py"), run_name="app_imported")
        labels = [getattr(block, "label", None) for block in app["demo"].blocks.values()]
        assert ("Big model" in labels) is shown


def test_pass_rates_are_quoted_only_for_the_sizes_measured():
    draft = "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_0.gguf"
    for target in ("7B", "Qwen/Qwen2.5-3B-Instruct-GGUF/qwen2.5-3b-instruct-q4_k_m.gguf", "/models/toy-large.gguf"):
        words = quality_sentence(GenerationConfig(), draft, target)
        assert words.startswith("No pass rate was measured for this pair") and "%" not in words, words
        assert "Qwen2.5-Coder 0.5B → 1.5B pair only" in words and "/models" not in words
    assert "(Qwen2.5 0.5B → 7B)" in quality_sentence(GenerationConfig(), draft, "7B")
    for target in ("1.5B", "Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf"):
        assert "the big model alone solved" in quality_sentence(GenerationConfig(), draft, target)
