"""Stand-in GGUFs: a toy model's shapes, types and tokenizer written again with random weights, that loads,
decodes finite logits and costs what the toy costs; the vocabulary's padding; a full disk; the Q4_K_M recipe
against the types recorded from Qwen2.5-Coder's own Q4_K_M files (and against those files where they are here)."""

from __future__ import annotations

import dataclasses
import errno
import os
import time
from collections import namedtuple
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from gguf.quants import dequantize

from cascade.bench import standin
from cascade.bench.standin import BLOCKS, StandInError, build_stand_in, shape_of
from cascade.engine.catalog import SIZES, Shape


def tensors_of(path: Path) -> list[tuple[str, list[int], str]]:
    """A file's tensors as the gguf package reads them: name, dimensions, type."""
    return [(t.name, [int(n) for n in t.shape], t.tensor_type.name) for t in gguf.GGUFReader(path).tensors]


def tokens_of(path: Path) -> tuple[list[str], list[int]]:
    reader = gguf.GGUFReader(path)
    return (list(reader.fields["tokenizer.ggml.tokens"].contents()),
            list(reader.fields["tokenizer.ggml.token_type"].contents()))


def load(path: Path, threads: int = 2) -> llama_cpp.Llama:
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=threads, logits_all=True, verbose=False)


@pytest.fixture(scope="module")
def toy_stand_in(toy, tmp_path_factory) -> Path:
    """A stand-in of the large toy: its shape, its types (`like`), its tokenizer."""
    out = tmp_path_factory.mktemp("stand-ins") / "toy-large-stand-in.gguf"
    return build_stand_in(shape_of(toy.large), out, toy.large, like=toy.large)


def test_a_toys_stand_in_has_its_tensors_and_decodes_finite_logits(toy, toy_stand_in):
    assert tensors_of(toy_stand_in) == tensors_of(toy.large)
    assert tokens_of(toy_stand_in) == tokens_of(toy.large)
    assert not toy_stand_in.with_name(toy_stand_in.name + ".partial").exists()
    llm = load(toy_stand_in)
    llm.eval(llm.tokenize(b"The cat sat on the mat"))
    for _ in range(8):
        row = np.array(llm.scores[llm.n_tokens - 1])
        assert np.isfinite(row).all() and row.std() > 0
        llm.eval([int(np.argmax(row))])
    standin.check_finite(toy_stand_in)


def test_a_stand_ins_weights_are_not_the_toys(toy, toy_stand_in):
    ours, theirs = gguf.GGUFReader(toy_stand_in), gguf.GGUFReader(toy.large)
    a, b = (next(t.data for t in r.tensors if t.name == "blk.0.attn_q.weight") for r in (ours, theirs))
    assert not np.array_equal(a, b)
    norm = next(t.data for t in ours.tensors if t.name == "blk.0.attn_norm.weight")
    bias = next(t.data for t in ours.tensors if t.name == "blk.0.attn_q.bias")
    assert (norm == 1).all() and (bias == 0).all()


def step_s(llm: llama_cpp.Llama) -> float:
    """Seconds of one greedy token, one token a call."""
    token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    start = time.perf_counter()
    llm.eval([token])
    return time.perf_counter() - start


def test_a_toys_stand_in_costs_what_the_toy_costs(toy, toy_stand_in):
    models = {"stand-in": load(toy_stand_in, threads=1), "toy": load(toy.large, threads=1)}
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(3):
        for llm in models.values():
            llm.reset()
            llm.eval(llm.tokenize(b"My name is"))
        for i in range(64):  # token by token, alternating, so that a busy moment of the machine falls on both
            for name in (list(models) if i % 2 else list(models)[::-1]):
                times[name].append(step_s(models[name]))
    ratio = float(np.median(times["stand-in"]) / np.median(times["toy"]))
    # Medians of alternating tokens stay within 10% of each other under load here; a stand-in with half or twice
    # the layers reads 0.55 or 1.75, so the margin admits a busy machine and nothing of another shape.
    assert 0.6 < ratio < 1.6, ratio


def test_a_larger_vocabulary_is_padded_with_unused_tokens(toy, tmp_path):
    shape = dataclasses.replace(shape_of(toy.large), vocab=shape_of(toy.large).vocab + 3)
    out = build_stand_in(shape, tmp_path / "padded.gguf", toy.large)
    tokens, types = tokens_of(out)
    toy_tokens, toy_types = tokens_of(toy.large)
    n = len(toy_tokens)
    assert tokens == toy_tokens + [f"[PAD{i}]" for i in range(n, n + 3)]
    assert types == toy_types + [int(gguf.TokenType.UNUSED)] * 3
    assert dict((name, dims) for name, dims, _ in tensors_of(out))["token_embd.weight"] == [shape.hidden, n + 3]
    llm = load(out)
    assert llm.n_vocab() == n + 3 and llm.tokenize(b"The cat") == load(toy.large).tokenize(b"The cat")
    standin.check_finite(out)


def test_a_smaller_vocabulary_than_the_tokenizers_is_refused(toy, tmp_path):
    shape = dataclasses.replace(shape_of(toy.large), vocab=100)
    with pytest.raises(StandInError, match="more than the shape's vocabulary"):
        build_stand_in(shape, tmp_path / "small.gguf", toy.large)


def test_a_full_disk_mid_write_leaves_nothing_and_says_so(toy, tmp_path, monkeypatch):
    writes = []

    def fill_up(f, data):
        writes.append(len(data))
        if len(writes) == 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        f.write(data)

    monkeypatch.setattr(standin, "_write", fill_up)
    out = tmp_path / "full.gguf"
    with pytest.raises(StandInError, match="No space left on device") as caught:
        build_stand_in(shape_of(toy.large), out, toy.large)
    assert "nothing was left behind" in str(caught.value) and len(writes) == 5
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_build_leaves_nothing(toy, tmp_path, monkeypatch):
    def interrupt(f, data):
        f.write(data)
        raise KeyboardInterrupt

    monkeypatch.setattr(standin, "_write", interrupt)
    with pytest.raises(KeyboardInterrupt):
        build_stand_in(shape_of(toy.large), tmp_path / "stopped.gguf", toy.large)
    assert list(tmp_path.iterdir()) == []


def test_too_little_free_space_is_refused_before_writing(toy, tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(standin.shutil, "disk_usage", lambda _: usage(10**9, 10**9 - 10**6, 10**6))
    monkeypatch.setattr(standin, "_write", lambda f, data: pytest.fail("wrote to a disk without room"))
    with pytest.raises(StandInError, match="not enough free disk space .* 0.00 GB free"):
        build_stand_in(shape_of(toy.large), tmp_path / "no-room.gguf", toy.large)
    assert list(tmp_path.iterdir()) == []


def test_stand_ins_are_cached_by_shape_and_rebuilt_when_asked(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADE_CACHE", str(tmp_path))
    shape, seen = shape_of(toy.large), []
    path = standin.stand_in(shape, toy.large, progress=lambda done, total: seen.append((done, total)))
    assert path.parent == tmp_path / "stand-ins" and path.stat().st_size == seen[-1][1] == seen[-1][0]
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    monkeypatch.setattr(standin, "build_stand_in", lambda *a, **k: pytest.fail("built again"))
    assert standin.stand_in(shape, toy.large) == path
    assert standin.cache_name(dataclasses.replace(shape, layers=2), toy.large) != path.name
    monkeypatch.undo()
    path.write_bytes(b"GGUF")  # an incomplete file is never reused
    assert standin.stand_in(shape, toy.large, cache_dir=tmp_path / "stand-ins") == path
    assert path.stat().st_size == seen[-1][1]
    before = path.stat().st_mtime_ns
    assert standin.stand_in(shape, toy.large, cache_dir=tmp_path / "stand-ins", rebuild=True) == path
    assert path.stat().st_mtime_ns != before


@pytest.mark.parametrize("kind", [k for k, b in BLOCKS.items() if b.elems > 1])
def test_random_blocks_have_sane_scales(kind):
    block, row = BLOCKS[kind], 4096
    d = standin._scale(block, row)
    data = np.frombuffer(standin._random_blocks(block, 64 * 16, d, np.random.default_rng(0)), np.uint8)
    weights = dequantize(data.reshape(64, -1), gguf.GGMLQuantizationType[kind])
    assert np.isfinite(weights).all()
    assert 0.5 < weights.std() * np.sqrt(row) < 2, weights.std()
    for offset, factor in block.scales:  # every fp16 scale in the normal range: no denormals
        scale = np.frombuffer(np.float16(d * factor).tobytes(), np.float16)[0]
        assert abs(float(scale)) >= 2.0 ** -14 and np.isfinite(scale)


def test_use_more_bits_picks_the_layers_llama_cpp_does():
    assert [i for i in range(24) if standin.use_more_bits(i, 24)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]
    assert [i for i in range(28) if standin.use_more_bits(i, 28)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26,
                                                                     27]


# Recorded from Qwen2.5-Coder-0.5B/1.5B-Instruct's Q4_K_M files: the layers whose attn_v and ffn_down got more
# bits (llama.cpp counted the layers by name, 0, 1, 10, 11, ..., so these are not use_more_bits' own numbers).
CODER = {
    "0.5B": (Shape(24, 896, 4864, 14, 2, 151_936, tied=False), {0, 1, 3, 6, 7, 8, 9, 10, 13, 16, 19, 21},
             {"output.weight": "Q8_0", "token_embd.weight": "Q5_0", "attn_v": ("Q8_0", "Q5_0"),
              "ffn_down": ("Q6_K", "Q4_K"), "other": "Q5_0"}),
    "1.5B": (Shape(28, 1536, 8960, 12, 2, 151_936, tied=False), {0, 1, 5, 6, 7, 8, 9, 10, 13, 16, 19, 21, 24, 27},
             {"output.weight": "Q6_K", "token_embd.weight": "Q4_K", "attn_v": ("Q6_K", "Q4_K"),
              "ffn_down": ("Q6_K", "Q4_K"), "other": "Q4_K"}),
}


def recorded_type(name: str, more_bits: set[int], types: dict) -> str:
    if name in types:
        return types[name]
    if not name.endswith(".weight") or name.endswith("_norm.weight"):
        return "F32"
    layer, kind = int(name.split(".")[1]), name.split(".")[2]
    return types[kind][layer not in more_bits] if kind in types else types["other"]


@pytest.mark.parametrize("name", list(CODER))
def test_the_q4_k_m_recipe_gives_the_recorded_types(name):
    shape, more_bits, types = CODER[name]
    got = {t.name: t.type for t in standin.plan(shape)}
    assert got == {n: recorded_type(n, more_bits, types) for n, _ in standin.layout(shape)}
    assert len(got) == 2 + 12 * shape.layers + 1


def test_a_tied_model_quantizes_its_embedding_as_the_output():
    plan = {t.name: t.type for t in standin.plan(dataclasses.replace(SIZES["3B"].shape, tied=True))}
    assert "output.weight" not in plan and plan["token_embd.weight"] == "Q6_K"
    # Layers counted by name (0, 1, 10, ..., 19, 2, 20, ..., 29, 3, ...): blk.2 comes at index 12, blk.3 at 23.
    assert plan["blk.2.attn_v.weight"] == "Q6_K" and plan["blk.3.attn_v.weight"] == "Q4_K"
    assert sum(plan[f"blk.{i}.attn_v.weight"] == "Q6_K" for i in range(36)) == \
        sum(standin.use_more_bits(i, 36) for i in range(36))


@pytest.mark.parametrize("name", ["7B", "14B"])
def test_a_stand_in_weighs_what_the_hubs_file_weighs(name, toy):
    _, tensors, total = standin.prepare(SIZES[name].shape, toy.small)
    # The real files' tokenizer takes ~6 MB of header that the toy's does not; weights are all the rest.
    assert abs(total + 6_000_000 - SIZES[name].file_bytes) / SIZES[name].file_bytes < 0.001


@pytest.mark.real
def test_the_recipe_reproduces_the_real_q4_k_m_files(real_pair):
    checked = 0
    for path in map(Path, real_pair):
        reader = gguf.GGUFReader(path)  # another reader than the stand-ins' own
        if reader.fields["general.file_type"].contents() != standin.MOSTLY_Q4_K_M:
            continue
        shape = shape_of(path)
        theirs = [(t.name, [int(n) for n in t.shape], t.tensor_type.name) for t in reader.tensors]
        assert [(t.name, list(t.dims), t.type) for t in standin.plan(shape)] == theirs
        assert abs(standin.prepare(shape, path)[2] - path.stat().st_size) < 1024  # the names in the header differ
        checked += 1
    if not checked:
        pytest.skip("neither file of the real pair is Q4_K_M")


def test_a_split_models_shape_reads_every_part(tmp_path):
    shape = Shape(2, 256, 512, 4, 2, 1000, tied=False)
    tensors = standin.plan(shape)
    kv = {"general.architecture": standin._scalar(standin.STRING, "qwen2"), "split.count": (2, b"\x02\x00")}
    kv |= {f"qwen2.{k}": standin._scalar(4, v) for k, v in (
        ("block_count", 2), ("embedding_length", 256), ("feed_forward_length", 512), ("attention.head_count", 4),
        ("attention.head_count_kv", 2))}
    first, second = tmp_path / "m-00001-of-00002.gguf", tmp_path / "m-00002-of-00002.gguf"
    first.write_bytes(standin.header_bytes(kv, [t for t in tensors if t.name != "output.weight"]))
    second.write_bytes(standin.header_bytes({}, [t for t in tensors if t.name == "output.weight"]))
    assert shape_of(first) == shape  # untied: its output matrix is in the second part
