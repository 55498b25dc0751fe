"""Bigger big models: sizes by name, split files fetched from the Hub in every part, downloads that resume and
say their progress, the memory check before downloading or loading, and pairs whose vocabularies differ only in
padding rows (which neither model may ever write)."""

from __future__ import annotations

import argparse
import io
from dataclasses import replace
from types import SimpleNamespace

import gguf
import numpy as np
import pytest

from cascade import Engine, ModelConfig, ModelError, load_pair
from cascade.cli.shared import DOWNLOAD_LOG_EVERY_S, LoadLog
from cascade.engine import memory, models
from cascade.engine.catalog import SIZES, SMALL
from cascade.engine.memory import KvShape, free_memory, read_kv_shape
from cascade.engine.models import HubFile, local_model, parse_model_spec, resolve_model
from cascade.engine.transfer import PROGRESS_EVERY_S, Download, amounts
from cascade.serving.messages import model_name
from cascade.serving.service import EngineService
from cascade.serving.settings import add_model_flags, model_config

from .fakehub import FakeHub
from .helpers import TOY_THREADS, FakeClock, cascade, engine_for, hub_at, run
from .toymodels import (LARGE, RELATED, RELATED_EXTRA_GAIN, RELATED_NOISE, SMALL as SMALL_TOY, SMALL_PADDING,
                        build_padded_models, main_vocab, random_weights, related_weights, write_gguf, write_padded,
                        write_split)

PROMPT = "My name is"
REAL_TOKENS = 509  # the toy vocabulary's size; padding ids start here
SPLIT_REPO = "toy-org/toy-related-GGUF"
SMALL_SPEC = "toy-org/toy-small-GGUF/small.gguf"
PLENTY = 64 * 10 ** 9


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    return build_padded_models(tmp_path_factory.mktemp("padded-toys"))


@pytest.fixture(scope="module")
def related_parts(tmp_path_factory):
    """`related`, split in two parts as the Hub splits big files."""
    vocab = main_vocab()
    tensors = related_weights(random_weights(SMALL_TOY, vocab), SMALL_TOY, RELATED, RELATED_NOISE, RELATED_EXTRA_GAIN)
    return write_split(tmp_path_factory.mktemp("split") / "toy-related.gguf", RELATED, vocab, tensors, parts=2)


def no_pause_between_resumes(monkeypatch) -> None:
    """huggingface_hub sleeps 1 s before resuming a cut transfer; the resumption itself still runs."""
    from huggingface_hub import file_download

    monkeypatch.setattr(file_download, "time", SimpleNamespace(sleep=lambda _s: None))


def gets(hub: FakeHub) -> list[str]:
    return [r.split("/")[-1] for r in hub.requests if r.startswith("GET")]


# ---- sizes by name ------------------------------------------------------------------------------

def test_sizes_resolve_through_the_catalog_and_an_unknown_size_is_refused():
    seven = SIZES["7B"]
    assert parse_model_spec("7B") == parse_model_spec(" 7b ") == HubFile(seven.repo_id, seven.filename)
    assert seven.filename == "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf"
    assert parse_model_spec("0.5B") == HubFile(SMALL.repo_id, SMALL.filename)
    assert model_config(env={"CASCADE_TARGET": "7B"}).target == "7B" and model_name("7B") == seven.spec
    with pytest.raises(ModelError, match=r"no target model of size 8B: the sizes are 0\.5B, 1\.5B, 3B, 7B, 14B"):
        resolve_model("8B", "target")
    parser = argparse.ArgumentParser()
    add_model_flags(parser)
    assert "1.5B, 3B, 7B, 14B" in " ".join(parser.format_help().split())


# ---- padding rows -------------------------------------------------------------------------------

def test_a_pair_differing_only_in_padding_rows_writes_what_the_plain_pair_writes_and_never_padding(toy, padded):
    plain, engine = engine_for(toy.small, toy.large), engine_for(padded.small, padded.large)
    assert engine.pair.n_vocab == REAL_TOKENS + SMALL_PADDING  # the target's further padding rows are cut
    assert engine.pair.target.padding.tolist() == list(range(REAL_TOKENS, REAL_TOKENS + SMALL_PADDING))
    for policy in ("target", "draft", "cascade", "bild", "speculative", "lookup+draft"):
        for temperature in (0.0, 0.8):
            settings = dict(policy=policy, temperature=temperature, seed=5, max_tokens=12)
            events, summary = run(engine, PROMPT, **settings)
            assert max(e.token_id for e in events) < REAL_TOKENS, (policy, temperature)
            assert summary.text == run(plain, PROMPT, **settings)[1].text, (policy, temperature)


def test_padding_rows_only_the_bigger_model_has_are_accepted_and_cut(toy, padded):
    engine = engine_for(toy.small, padded.large)
    assert engine.pair.n_vocab == REAL_TOKENS and engine.pair.target.padding is None
    settings = dict(policy="cascade", max_tokens=12)
    assert run(engine, PROMPT, **settings)[1].text == run(engine_for(toy.small, toy.large), PROMPT, **settings)[1].text


def test_the_toy_padding_would_win_without_the_mask(padded):
    """The control: the padded target's padding rows out-score its real tokens, so the mask is what keeps them out."""
    engine = Engine(load_pair(ModelConfig(draft=str(padded.small), target=str(padded.large), n_threads=TOY_THREADS,
                                          n_ctx=256)))
    engine.pair.target.padding = None
    events, _ = run(engine, PROMPT, policy="target", max_tokens=4)
    assert all(e.token_id >= REAL_TOKENS for e in events)


def test_pairs_whose_real_tokens_differ_are_refused(toy, tmp_path):
    extra_words = write_padded(tmp_path / "large-extra-words.gguf", LARGE, 8, token_type=int(gguf.TokenType.NORMAL))
    with pytest.raises(ModelError, match=r"the target has 8 more tokens, and token 509 .*is not padding"):
        load_pair(ModelConfig(draft=str(toy.small), target=str(extra_words), n_threads=TOY_THREADS, n_ctx=256))
    vocab = main_vocab()
    swapped = replace(vocab, tokens=[vocab.tokens[1], vocab.tokens[0], *vocab.tokens[2:]])  # same size, same EOS
    write_gguf(tmp_path / "swapped.gguf", SMALL_TOY, swapped, random_weights(SMALL_TOY, vocab))
    with pytest.raises(ModelError, match=r"vocabularies differ \(token 0 is b'!' vs b'\"'\)"):
        load_pair(ModelConfig(draft=str(toy.small), target=str(tmp_path / "swapped.gguf"), n_threads=TOY_THREADS,
                              n_ctx=256))
    with pytest.raises(ModelError, match="vocabularies differ"):
        load_pair(ModelConfig(draft=str(toy.other_vocab), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=256))


# ---- split files, progress, resuming --------------------------------------------------------------

def test_a_split_model_is_fetched_in_every_part_and_loaded_from_the_first(toy, related_parts, tmp_path, monkeypatch):
    files = {f"{SPLIT_REPO}/{p.name}": p for p in related_parts} | {SMALL_SPEC: toy.small}
    spec = f"{SPLIT_REPO}/{related_parts[1].name}"  # any part names the whole
    total = sum(p.stat().st_size for p in related_parts)
    with FakeHub(files) as hub:
        hub_at(monkeypatch, hub.url, cache=tmp_path / "hf" / "hub")
        assert local_model(spec) is None
        config = ModelConfig(draft=SMALL_SPEC, target=spec, n_threads=TOY_THREADS, n_ctx=1024)
        said: list[str] = []
        engine = EngineService(config, warm=lambda _engine: None).engine(progress=said.append)  # the page's way
        assert sorted(gets(hub)) == sorted([p.name for p in related_parts] + ["small.gguf"])
        # The CLI's way, in a new process with a cache of its own.
        r = cascade("generate", "--draft", SMALL_SPEC, "--target", spec, "--max-tokens", "4", PROMPT,
                    env={"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "cli-hf"), "HF_HUB_DISABLE_XET": "1"})
    assert r.returncode == 0, r.stderr
    assert f"[downloading the target model (part 2 of 2): {amounts(total, total)}]" in r.stderr
    path = engine.pair.target_path
    assert path.name == related_parts[0].name and (path.parent / related_parts[1].name).is_file()
    assert local_model(spec) == path
    assert said[:3] == ["locating the draft model", "locating the target model",
                        f"downloading the draft model: {amounts(0, toy.small.stat().st_size)}"]
    assert f"downloading the target model (part 1 of 2): {amounts(0, total)}" in said
    assert f"downloading the target model (part 2 of 2): {amounts(total, total)}" in said
    settings = dict(policy="cascade", max_tokens=12)
    plain = engine_for(toy.small, toy.related)
    assert run(engine, PROMPT, **settings)[1].text == run(plain, PROMPT, **settings)[1].text
    (path.parent / related_parts[1].name).unlink()  # one part gone: not on disk as a whole
    assert local_model(spec) is None


def test_a_download_cut_mid_file_resumes_where_it_stopped(toy, tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    spec, size = "toy-org/toy-GGUF/related.gguf", toy.related.stat().st_size
    chunk = 64 * 1024  # huggingface_hub writes what it receives in chunks (10 MB); a toy file needs smaller ones
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", chunk)
    with FakeHub({spec: toy.related}) as hub:
        hub_at(monkeypatch, hub.url, cache=tmp_path / "hf" / "hub")
        no_pause_between_resumes(monkeypatch)
        hub.cut_after, hub.cuts = size // 3, 1  # the connection drops once, a third of the way in
        said: list[str] = []
        path = resolve_model(spec, "target", progress=said.append)
    assert path.read_bytes() == toy.related.read_bytes()
    kept = size // 3 // chunk * chunk  # the whole chunks written before the cut
    assert hub.ranges == [None, f"bytes={kept}-"] and hub.served - size < chunk  # only the broken chunk again
    assert said[-1] == f"downloading the target model: {amounts(size, size)}"


def test_progress_is_said_at_most_every_half_second_and_at_a_parts_end():
    said, clock = [], FakeClock()
    bar = Download(said.append, "downloading the target model", 0, 3_000_000_000, clock).bar(total=3_000_000_000)
    for _ in range(10):
        bar.update(100_000_000)  # ten updates in no time after the start: none said
    clock.now += PROGRESS_EVERY_S
    bar.update(1_000_000_000)  # half a second on: said
    bar.update(1_000_000_000)  # the end is said whenever it comes
    assert said == ["downloading the target model: 0.0 of 3.0 GB", "downloading the target model: 2.0 of 3.0 GB",
                    "downloading the target model: 3.0 of 3.0 GB"]


def test_the_command_lines_log_keeps_a_downloads_figures_to_one_line_a_while():
    stream, clock = io.StringIO(), FakeClock()  # a StringIO is no terminal: a log
    log = LoadLog(stream, clock)
    for message in ["locating the target model", "downloading the target model (part 1 of 2): 0.0 of 4.7 GB",
                    "downloading the target model (part 1 of 2): 0.1 of 4.7 GB",
                    "downloading the target model (part 1 of 2): 4.0 of 4.7 GB",
                    "downloading the target model (part 2 of 2): 4.0 of 4.7 GB",
                    "downloading the target model (part 2 of 2): 4.1 of 4.7 GB"]:
        log(message)
    clock.now += DOWNLOAD_LOG_EVERY_S
    log("downloading the target model (part 2 of 2): 4.2 of 4.7 GB")
    log("downloading the target model (part 2 of 2): 4.7 of 4.7 GB")
    log("loading the target model")
    assert stream.getvalue().splitlines() == ["[locating the target model]",
                                              "[downloading the target model (part 1 of 2): 0.0 of 4.7 GB]",
                                              "[downloading the target model (part 2 of 2): 4.0 of 4.7 GB]",
                                              "[downloading the target model (part 2 of 2): 4.2 of 4.7 GB]",
                                              "[downloading the target model (part 2 of 2): 4.7 of 4.7 GB]",
                                              "[loading the target model]"]


# ---- memory -------------------------------------------------------------------------------------

def test_the_memory_check_refuses_before_downloading_or_loading(toy, related_parts, tmp_path, monkeypatch):
    seven = SIZES["7B"]
    names = [seven.filename, seven.filename.replace("00001-of", "00002-of")]
    files = {f"{seven.repo_id}/{name}": part for name, part in zip(names, related_parts)}
    loads = []
    real_load = models.load_model
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    config = ModelConfig(draft=str(toy.small), target="7B", n_threads=TOY_THREADS, n_ctx=1024)
    with FakeHub(files) as hub:
        hub_at(monkeypatch, hub.url, cache=tmp_path / "hf" / "hub")
        with pytest.raises(ModelError) as refused:
            load_pair(config, free_memory=lambda: 100_000_000)
        assert not gets(hub) and not loads  # asked the Hub the parts' sizes, fetched nothing, loaded nothing
        # The stand-in files are tiny, but until they are here the 7B's own shapes size its context and buffers.
        assert str(refused.value).startswith(
            "the 7B target needs about 0.6 GB with its draft (model files 0.0 GB, context 0.1 GB, working memory "
            "0.6 GB); this machine has 0.1 GB free. Choose a smaller big model, or free memory")
        monkeypatch.setenv(memory.SKIP_ENV, "1")  # the expert's way past it
        engine = Engine(load_pair(config, free_memory=lambda: 100_000_000))
        assert sorted(gets(hub)) == sorted(names) and len(loads) == 2
    assert run(engine, PROMPT, max_tokens=4)[1].counts.n_tokens == 4


def test_the_memory_check_reads_the_files_shapes_once_they_are_here(toy):
    config = ModelConfig(draft=str(toy.small), target=str(toy.related), n_ctx=1024, parallel=2, n_batch=512)
    draft, target = models.locate(config.draft, "draft"), models.locate(config.target, "target")
    need = models.pair_need(config, draft, target)
    assert need.weights == toy.small.stat().st_size + toy.related.stat().st_size
    assert need.kv == 1024 * 2 * (2 + 4) * 2 * 2 * 16 * 2  # n_ctx x slots x layers x K,V x kv heads x dim x f16
    assert need.working == 2 * (512 * REAL_TOKENS * 4 * 2 + memory.WORKING_SPARE)
    models.check_memory(config, draft, target, free_memory=lambda: need.total)  # exactly enough passes
    with pytest.raises(ModelError, match=r"the target model toy-related-v1\.gguf needs about"):
        models.check_memory(config, draft, target, free_memory=lambda: need.total - 1)


def test_free_memory_is_the_smaller_of_the_machines_and_the_containers(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    8000000 kB\n")
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("4000000000\n")
    (v2 / "memory.current").write_text("3000000000\n")
    (v2 / "memory.stat").write_text("anon 1500000000\ninactive_file 1000000000\n")
    assert free_memory(meminfo, v2) == 2_000_000_000  # 4 GB limit, 3 GB used of which 1 GB is reclaimable cache
    (v2 / "memory.max").write_text("max\n")
    assert free_memory(meminfo, v2) == 8_000_000 * 1024
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("3000000000\n")
    (v1 / "memory" / "memory.usage_in_bytes").write_text("2500000000\n")
    assert free_memory(meminfo, v1) == 500_000_000
    assert free_memory(tmp_path / "none", tmp_path / "none") is None


def test_the_kv_shape_comes_from_the_gguf_header(toy, related_parts, tmp_path):
    assert read_kv_shape(toy.small) == KvShape(layers=2, kv_heads=2, head_dim=16, vocab=REAL_TOKENS)
    assert read_kv_shape(related_parts[0]) == KvShape(layers=4, kv_heads=2, head_dim=16, vocab=REAL_TOKENS)
    garbled = tmp_path / "garbled.gguf"
    garbled.write_bytes(b"GGUF" + bytes(reversed(toy.small.read_bytes()[4:4096])))
    assert read_kv_shape(garbled) is None and read_kv_shape(related_parts[1]) is None


def test_masking_a_rows_padding_leaves_its_real_tokens_alone():
    from cascade.engine.runner import NEVER

    rows = np.random.default_rng(0).standard_normal((3, 152_064)).astype(np.float32)
    padding = np.arange(151_665, 152_064)
    masked = rows.copy()
    masked[:, padding] = NEVER
    assert np.array_equal(masked[:, :151_665], rows[:, :151_665]) and (masked.argmax(1) < 151_665).all()
    from cascade.routing.reading import read_row

    reading = read_row(masked[0], int(masked[0].argmax()))
    assert np.isfinite(reading.draft_entropy) and reading.draft_entropy > 0
