"""Stand-in GGUFs: a file of a real model's shapes and quantization with random weights, built on the spot, that
costs what the real model costs to run (and says nothing of its quality). Written with `struct`; read by `engine.gguf`.

The Q4_K_M recipe is llama.cpp's `llama_tensor_get_type` (src/llama-quant.cpp): Q4_K, the output matrix (a tied
model's token embedding) Q6_K, attn_v and ffn_down Q6_K on the layers `use_more_bits` picks, counted in the order
llama.cpp visited them when the Qwen2.5 files were made (by name: blk.0, blk.1, blk.10, ...); rows that are not
whole blocks fall back (Q4_K to Q5_0, Q6_K to Q8_0, then F16); 1-D tensors stay F32.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Callable

import numpy as np

from ..engine.catalog import Shape, Size, size, split_parts
from ..engine.gguf import SCALAR, STRING, Header, read_header
from .local import cache_folder

STANDIN_VERSION = 1  # part of a cached stand-in's name: bump it when what a stand-in holds changes
ALIGNMENT = 32  # GGUF's default data alignment
CHUNK_BYTES = 64 << 20  # written (and held in memory) at a time
SLACK_BYTES = 64 << 20  # free space asked for beyond the file itself
MOSTLY_Q4_K_M = 15  # general.file_type
UNUSED_TOKEN = 5  # a token type: llama.cpp's converter pads a vocabulary with "[PAD{id}]" entries of this type
# Taken from the tokenizer's file where it has them: the family's context and rope, not the shape's.
FAMILY_KEYS = ("qwen2.context_length", "qwen2.rope.freq_base", "qwen2.attention.layer_norm_rms_epsilon")
Progress = Callable[[int, int], None]  # (bytes written, bytes in all)


class StandInError(Exception):
    """A stand-in could not be built or read; the message says why and what to do."""


@dataclass(frozen=True)
class Block:
    """A ggml type's block: its elements and bytes, and how random quants are given sane fp16 scales."""

    type_id: int
    elems: int
    nbytes: int
    unit_std: float = 1.0  # a weight's std when every fp16 scale is d (for a d times its factor below)
    scales: tuple[tuple[int, float], ...] = ()  # (byte offset, factor of d) of each fp16 scale
    fixed: tuple[tuple[int, bytes], ...] = ()  # (byte offset, bytes): the sub-block scales, set small


_K_SCALES = bytes([1, 1, 1, 1, 8, 8, 8, 8, 0x81, 0x81, 0x81, 0x81])  # Q4_K/Q5_K's packed 6-bit scales: 1, mins 8
BLOCKS: dict[str, Block] = {
    "F32": Block(0, 1, 4),
    "F16": Block(1, 1, 2),
    "Q4_0": Block(2, 32, 18, 4.61, ((0, 1.0),)),
    "Q4_1": Block(3, 32, 20, 4.61, ((0, 1.0), (2, -7.5))),
    "Q5_0": Block(6, 32, 22, 9.23, ((0, 1.0),)),
    "Q5_1": Block(7, 32, 24, 9.23, ((0, 1.0), (2, -15.5))),
    "Q8_0": Block(8, 32, 34, 73.9, ((0, 1.0),)),
    "Q4_K": Block(12, 256, 144, 4.61, ((0, 1.0), (2, 7.5 / 8)), ((4, _K_SCALES),)),
    "Q5_K": Block(13, 256, 176, 9.23, ((0, 1.0), (2, 15.5 / 8)), ((4, _K_SCALES),)),
    "Q6_K": Block(14, 256, 210, 18.47, ((208, 1.0),), ((192, bytes([1] * 16)),)),
}
TYPE_NAMES = {b.type_id: name for name, b in BLOCKS.items()}


@dataclass(frozen=True)
class Tensor:
    """One tensor of a file: its name, its dimensions in ggml's order (row length first), its ggml type."""

    name: str
    dims: tuple[int, ...]
    type: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.dims)) // BLOCKS[self.type].elems * BLOCKS[self.type].nbytes


@dataclass(frozen=True)
class Head:
    """A GGUF's metadata (`gguf.Header.kv`) and its tensors by type name."""

    kv: dict[str, tuple[int, bytes]]
    tensors: list[Tensor]
    header: Header

    def value(self, key: str, default=None):
        return self.header.value(key, default)


def read_head(path: str | Path) -> Head:
    """A GGUF file's metadata and tensor list, or a StandInError saying the file is not one."""
    try:
        header = read_header(path)
    except (OSError, ValueError) as e:
        raise StandInError(f"cannot read {path} as a GGUF file ({e})") from e
    tensors = [Tensor(name, dims, TYPE_NAMES.get(type_id, f"type {type_id}")) for name, dims, type_id in header.tensors]
    return Head(header.kv, tensors, header)


def _pack_string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def _scalar(vtype: int, value) -> tuple[int, bytes]:
    return vtype, (_pack_string(value) if vtype == STRING else struct.pack("<" + SCALAR[vtype], value))


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def header_bytes(kv: dict[str, tuple[int, bytes]], tensors: list[Tensor]) -> bytes:
    """A GGUF v3 header for these values and tensors, padded to where the tensor data starts."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, (vtype, raw) in kv.items():
        out += _pack_string(key) + struct.pack("<I", vtype) + raw
    offset = 0
    for t in tensors:
        if t.type not in BLOCKS:
            raise StandInError(f"a stand-in cannot hold {t.name}'s {t.type} (it writes {', '.join(BLOCKS)})")
        out += _pack_string(t.name) + struct.pack(f"<I{len(t.dims)}QIQ", len(t.dims), *t.dims,
                                                  BLOCKS[t.type].type_id, offset)
        offset += t.nbytes + _pad(t.nbytes)
    return bytes(out + bytes(_pad(len(out))))


_LAYER = ("attn_norm.weight", "ffn_down.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_norm.weight",
          "attn_k.bias", "attn_k.weight", "attn_output.weight", "attn_q.bias", "attn_q.weight", "attn_v.bias",
          "attn_v.weight")  # a block's tensors in the Qwen2.5 files' order


def layout(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """A qwen2 model's tensors (name, dims) in the Qwen2.5 files' order: layers by name, output first."""
    h, f, kv = shape.hidden, shape.ffn, shape.kv_heads * shape.head_dim
    dims = {"attn_norm.weight": (h,), "ffn_down.weight": (f, h), "ffn_gate.weight": (h, f), "ffn_up.weight": (h, f),
            "ffn_norm.weight": (h,), "attn_k.bias": (kv,), "attn_k.weight": (h, kv), "attn_output.weight": (h, h),
            "attn_q.bias": (h,), "attn_q.weight": (h, h), "attn_v.bias": (kv,), "attn_v.weight": (h, kv)}
    top = ([] if shape.tied else [("output.weight", (h, shape.vocab))]) + [("token_embd.weight", (h, shape.vocab))]
    blocks = [(f"blk.{i}.{name}", dims[name]) for i in sorted(range(shape.layers), key=str) for name in _LAYER]
    return top + blocks + [("output_norm.weight", (h,))]


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's choice of the layers that get more bits: the first and last eighth and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fallback(kind: str, row: int) -> str:
    """llama.cpp's type for a matrix whose rows are not whole blocks of `kind`."""
    if row % BLOCKS[kind].elems == 0:
        return kind
    kind = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}.get(kind, kind)
    return kind if row % BLOCKS[kind].elems == 0 else "F16"


def q4_k_m(tensors: list[tuple[str, tuple[int, ...]]], layers: int) -> dict[str, str]:
    """Each tensor's ggml type in a llama.cpp Q4_K_M file of these tensors (see the module's docstring)."""
    tied = all(name != "output.weight" for name, _ in tensors)
    counters = {"attn_v.weight": [0, sum("attn_v.weight" in name for name, _ in tensors)], "ffn_down": [0, layers]}
    types = {}
    for name, dims in sorted(tensors):
        kind = "Q4_K"
        if len(dims) < 2 or not name.endswith("weight") or name.endswith("_norm.weight"):
            kind = "F32"
        elif name == "output.weight" or (tied and name == "token_embd.weight"):
            kind = "Q8_0" if dims[0] % BLOCKS["Q4_K"].elems else "Q6_K"
        for part, count in counters.items():
            if part in name and kind != "F32":
                kind = "Q6_K" if use_more_bits(*count) else kind
                count[0] += 1
        types[name] = kind if kind == "F32" else _fallback(kind, dims[0])
    return types


def plan(shape: Shape, like: str | Path | None = None) -> list[Tensor]:
    """A stand-in's tensors in file order: the Q4_K_M recipe's types, or those of `like`, a file of this shape."""
    tensors = layout(shape)
    if like is None:
        types = q4_k_m(tensors, shape.layers)
        return [Tensor(name, dims, types[name]) for name, dims in tensors]
    theirs = read_head(like).tensors
    if sorted((t.name, t.dims) for t in theirs) != sorted(tensors):
        raise StandInError(f"{Path(like).name} is not of the shape {shape} (its tensors differ)")
    return theirs


def shape_of(path: str | Path) -> Shape:
    """A qwen2 GGUF's shape from its metadata and tensors (tied: no output.weight)."""
    head = read_head(path)
    if head.value("general.architecture") != "qwen2":
        raise StandInError(f"{Path(path).name} is not a qwen2 model ({head.value('general.architecture')})")
    parts = [read_head(part) for part in split_parts(str(path))] if head.value("split.count", 1) > 1 else [head]
    tensors = {t.name: t for part in parts for t in part.tensors}
    if "token_embd.weight" not in tensors:
        raise StandInError(f"{Path(path).name} has no token_embd.weight")
    hp = [head.value(f"qwen2.{key}") for key in ("block_count", "embedding_length", "feed_forward_length",
                                                 "attention.head_count", "attention.head_count_kv")]
    return Shape(*hp, vocab=tensors["token_embd.weight"].dims[1], tied="output.weight" not in tensors)


def _padded(kv: dict[str, tuple[int, bytes]], vocab: int) -> dict[str, tuple[int, bytes]]:
    """The tokenizer's values with the token list grown to `vocab` by UNUSED "[PAD{id}]" entries."""
    out = dict(kv)
    n = struct.unpack_from("<Q", kv["tokenizer.ggml.tokens"][1], 4)[0]
    if vocab < n:
        raise StandInError(f"the tokenizer has {n} tokens, more than the shape's vocabulary of {vocab}")
    extra = {"tokenizer.ggml.tokens": b"".join(_pack_string(f"[PAD{i}]") for i in range(n, vocab)),
             "tokenizer.ggml.token_type": struct.pack(f"<{vocab - n}i", *[UNUSED_TOKEN] * (vocab - n)),
             "tokenizer.ggml.scores": struct.pack(f"<{vocab - n}f", *[0.0] * (vocab - n))}
    for key, more in extra.items():
        if key in kv:
            vtype, raw = kv[key]
            out[key] = (vtype, raw[:4] + struct.pack("<Q", vocab) + raw[12:] + more)
    return out


def metadata(shape: Shape, tokenizer: Head, file_type: int) -> dict[str, tuple[int, bytes]]:
    """A stand-in's values: qwen2's hyperparameters for `shape`, and every tokenizer.* value of `tokenizer`."""
    kv = {"general.architecture": _scalar(STRING, "qwen2"), "general.type": _scalar(STRING, "model"),
          "general.name": _scalar(STRING, f"stand-in with random weights (qwen2, {shape.layers} layers of "
                                          f"{shape.hidden}); costs what the real model costs, means nothing")}
    ints = (("block_count", shape.layers), ("context_length", 32768), ("embedding_length", shape.hidden),
            ("feed_forward_length", shape.ffn), ("attention.head_count", shape.heads),
            ("attention.head_count_kv", shape.kv_heads))
    floats = (("rope.freq_base", 1_000_000.0), ("attention.layer_norm_rms_epsilon", 1e-6))
    kv |= {f"qwen2.{k}": _scalar(4, v) for k, v in ints} | {f"qwen2.{k}": _scalar(6, v) for k, v in floats}
    kv |= {k: tokenizer.kv[k] for k in FAMILY_KEYS if k in tokenizer.kv}
    kv["general.file_type"] = _scalar(4, file_type)
    kv |= _padded({k: v for k, v in tokenizer.kv.items() if k.startswith("tokenizer.")}, shape.vocab)
    kv["general.quantization_version"] = _scalar(4, 2)
    return kv


def _scale(block: Block, row: int) -> float:
    """The fp16 scale d that gives weights a std of about 1/sqrt(row), no fp16 scale below the normal range."""
    smallest = min([abs(f) for _, f in block.scales] + [1.0])
    return float(np.float16(max(1 / np.sqrt(row) / block.unit_std, 2.0 ** -14 / smallest * 1.01)))


def _chunks(t: Tensor, rng: np.random.Generator):
    """A tensor's bytes, CHUNK_BYTES or fewer at a time: random quants with sane scales, norms 1, biases 0."""
    block, n, dtype = BLOCKS[t.type], int(np.prod(t.dims)), np.float32 if t.type == "F32" else np.float16
    step = max(1, CHUNK_BYTES // block.nbytes) * block.elems
    for start in range(0, n, step):
        count = min(step, n - start)
        if len(t.dims) == 1:
            yield np.full(count, 1.0 if t.name.endswith("_norm.weight") else 0.0, dtype).tobytes()
        elif block.elems == 1:
            yield (rng.standard_normal(count, np.float32) / np.sqrt(t.dims[0])).astype(dtype).tobytes()
        else:
            yield _random_blocks(block, count // block.elems, _scale(block, t.dims[0]), rng)


def _random_blocks(block: Block, n: int, d: float, rng: np.random.Generator) -> bytes:
    blocks = rng.bit_generator.random_raw(-(-n * block.nbytes // 8)).view(np.uint8)[:n * block.nbytes].reshape(n, -1)
    for offset, factor in block.scales:
        blocks[:, offset:offset + 2] = np.frombuffer(np.float16(d * factor).tobytes(), np.uint8)
    for offset, value in block.fixed:
        blocks[:, offset:offset + len(value)] = np.frombuffer(value, np.uint8)
    return blocks.tobytes()


def _write(f, data: bytes) -> None:
    """Every byte of a stand-in goes through here (the tests make it fail)."""
    f.write(data)


def prepare(shape: Shape, tokenizer_from: str | Path, like: str | Path | None = None
            ) -> tuple[bytes, list[Tensor], int]:
    """A stand-in's header, its tensors, and its size in bytes (nothing written)."""
    tensors = plan(shape, like)
    file_type = MOSTLY_Q4_K_M if like is None else read_head(like).value("general.file_type", 0)
    header = header_bytes(metadata(shape, read_head(tokenizer_from), file_type), tensors)
    return header, tensors, len(header) + sum(t.nbytes + _pad(t.nbytes) for t in tensors)


def build_stand_in(shape: Shape, out_path: str | Path, tokenizer_from: str | Path, like: str | Path | None = None,
                   seed: int = 0, progress: Progress | None = None) -> Path:
    """Write a stand-in of `shape` to `out_path` (through `<out>.partial`, removed on any failure): the Q4_K_M
    recipe's types (or `like`'s), random weights, and `tokenizer_from`'s tokenizer and chat template."""
    out = Path(out_path)
    header, tensors, total = prepare(shape, tokenizer_from, like)
    out.parent.mkdir(parents=True, exist_ok=True)
    if (free := shutil.disk_usage(out.parent).free) < total + SLACK_BYTES:
        raise StandInError(f"not enough free disk space for a stand-in of {total / 1e9:.2f} GB in {out.parent}: "
                           f"{free / 1e9:.2f} GB free; free some space or set CASCADE_CACHE to another disk")
    partial = out.with_name(out.name + ".partial")
    rng = np.random.Generator(np.random.SFC64(seed))
    try:
        with open(partial, "wb") as f:
            _write(f, header)
            done = len(header)
            for t in tensors:
                for data in chain(_chunks(t, rng), [bytes(_pad(t.nbytes))]):
                    _write(f, data)
                    done += len(data)
                    if progress:
                        progress(done, total)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, out)
    except BaseException as e:
        partial.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise StandInError(f"could not write the stand-in {out.name} ({e.strerror or e}); nothing was left "
                               f"behind. It needs {total / 1e9:.2f} GB in {out.parent}.") from e
        raise
    return out


def cache_name(shape: Shape, tokenizer_from: str | Path) -> str:
    """A stand-in's file name: its shape, its recipe, its tokenizer and the stand-ins' version."""
    kv = read_head(tokenizer_from).kv
    tokenizer = hashlib.sha256(b"".join(k.encode() + raw for k, (_, raw) in kv.items() if k.startswith("tokenizer.")))
    return (f"standin-qwen2-{shape.layers}x{shape.hidden}-ffn{shape.ffn}-h{shape.heads}kv{shape.kv_heads}-v"
            f"{shape.vocab}-{'tied' if shape.tied else 'untied'}-q4_k_m-tok{tokenizer.hexdigest()[:10]}-"
            f"v{STANDIN_VERSION}.gguf")


def check_finite(path: str | Path, n_threads: int | None = None) -> None:
    """Load a model in llama.cpp and decode a prompt and one token; a StandInError where a logit is not finite."""
    import llama_cpp

    try:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=n_threads, logits_all=True, verbose=False)
    except (ValueError, RuntimeError, OSError) as e:
        raise StandInError(f"llama.cpp could not load the stand-in {Path(path).name} ({e})") from e
    try:
        llm.eval(llm.tokenize(b"def add(a, b):"))
        rows = [np.array(llm.scores[llm.n_tokens - 1])]
        llm.eval([int(np.argmax(rows[0]))])
        rows.append(np.array(llm.scores[llm.n_tokens - 1]))
    finally:
        llm.close()
    if not all(np.isfinite(row).all() for row in rows):
        raise StandInError(f"the stand-in {Path(path).name} decodes logits that are not finite")


def stand_in(size_or_shape: str | Size | Shape, tokenizer_from: str | Path, cache_dir: str | Path | None = None,
             rebuild: bool = False, progress: Progress | None = None, check: bool = True) -> Path:
    """A stand-in of a size ("7B") or shape with `tokenizer_from`'s tokenizer, from the cache (CASCADE_CACHE or
    ~/.cache/cascade, stand-ins/) where a complete one is there; else built (and checked to decode) first."""
    found = size(size_or_shape) if isinstance(size_or_shape, str) else size_or_shape
    shape = found.shape if isinstance(found, Size) else found
    folder = Path(cache_dir) if cache_dir else cache_folder("stand-ins")
    path = folder / cache_name(shape, tokenizer_from)
    if not rebuild and path.is_file() and path.stat().st_size == prepare(shape, tokenizer_from)[2]:
        return path
    build_stand_in(shape, path, tokenizer_from, progress=progress)
    if check:
        try:
            check_finite(path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    return path
