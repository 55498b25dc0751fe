"""Bad input and model faults at the engine and the command line: a clear message, nothing broken.

After every fault the next normal request must give exactly what a fresh process gives.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from cascade import Engine, GenerationConfig, ModelConfig, ModelError, PromptError, load_pair
from cascade.engine.models import resolve_model

from .fakehub import FakeHub
from .helpers import TOY_THREADS, cascade, hub_at, run

NORMAL = dict(policy="speculative", threshold=4.0, k=3, max_tokens=24, temperature=0.8, seed=7, chat=True)
PROMPT = "My name is A"

BAD_SETTINGS = [
    {"threshold": -1.0}, {"threshold": math.nan}, {"threshold": math.inf}, {"threshold": 1e300},
    {"rollback_threshold": 0.0}, {"k": 0}, {"k": 10_000}, {"max_tokens": 0}, {"max_tokens": 1_000_000},
    {"temperature": -0.1}, {"temperature": math.nan}, {"top_p": -1.0}, {"top_k": -5}, {"policy": "fastest"},
    {"policy": ""}, {"stop": ("",)}, {"seed": -1},
]
BAD_PROMPTS = ["", "   ", "\n\t\r", "the cat " * 2000]  # the last is longer than the context


@pytest.fixture(scope="module")
def fresh_process_text(toy) -> str:
    """What a brand-new process writes for the normal request."""
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--policy", "speculative",
                "--threshold", "4", "--k", "3", "--max-tokens", "24", "--temperature", "0.8", "--seed", "7",
                "--n-ctx", "1024", "--json", PROMPT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])["summary"]["text"]


def test_bad_settings_and_prompts_leave_the_engine_as_new(toy, fresh_process_text):
    engine = Engine(load_pair(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS,
                                          n_ctx=1024)))
    tried = 0
    for bad in BAD_SETTINGS:
        with pytest.raises(ValueError) as info:
            run(engine, PROMPT, **{**NORMAL, **bad})
        assert str(info.value) and "Traceback" not in str(info.value)
        tried += 1
    for prompt in BAD_PROMPTS:
        with pytest.raises(PromptError):
            run(engine, prompt, **NORMAL)
        tried += 1
    # a generation abandoned half-way, and one with unusual text
    stream = engine.generate(PROMPT, GenerationConfig(**NORMAL))
    next(stream), next(stream)
    stream.close()
    run(engine, "\u202eשלום 🐱\x00\ud800", **NORMAL)
    tried += 2
    assert run(engine, PROMPT, **NORMAL)[1].text == fresh_process_text
    print(f"\n{tried} bad inputs, then the normal request: identical to a fresh process")


def test_truncated_gguf_is_refused(toy, tmp_path):
    data = toy.related.read_bytes()
    for name, body in (("truncated.gguf", data[: len(data) // 2]), ("header-only.gguf", data[:64]),
                       ("garbled.gguf", data[:4] + bytes(reversed(data[4:4096])) + data[4096:])):
        path = tmp_path / name
        path.write_bytes(body)
        with pytest.raises(ModelError, match="could not be loaded|not a GGUF"):
            load_pair(ModelConfig(draft=str(toy.small), target=str(path), n_threads=TOY_THREADS, n_ctx=256))
    # the good pair still loads and runs afterwards
    engine = Engine(load_pair(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=256)))
    assert run(engine, PROMPT, max_tokens=4)[1].counts.n_tokens == 4


def no_pause_between_resumes(monkeypatch) -> None:
    """huggingface_hub sleeps 1 s before each of its five attempts to resume a cut transfer: 5 s of
    nothing here, where every attempt meets the same cut. The attempts themselves still run."""
    from huggingface_hub import file_download

    monkeypatch.setattr(file_download, "time", SimpleNamespace(sleep=lambda _s: None))


def test_a_download_cut_mid_file_is_never_used(toy, tmp_path, monkeypatch):
    # In this process, as the page's own retry after a failed load would run it (a new process finds
    # the same files on disk: what is kept there is what this test checks).
    spec = "toy-org/toy-GGUF/related.gguf"
    with FakeHub({spec: toy.related}) as hub:
        hub_at(monkeypatch, hub.url, cache=tmp_path / "hf" / "hub")
        hub.cut_after = toy.related.stat().st_size // 3
        no_pause_between_resumes(monkeypatch)
        with pytest.raises(ModelError):
            resolve_model(spec, "target")
        assert not [p for p in (tmp_path / "hf").rglob("related.gguf")], "a partial download was kept as whole"
        hub.cut_after = None  # the network is back: the next request downloads the whole file
        assert resolve_model(spec, "target").read_bytes() == toy.related.read_bytes()
