"""What a pair of models needs in memory (weights, KV cache, working buffers) against what this machine can give."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from .catalog import Shape
from .gguf import read_header

SKIP_ENV = "CASCADE_SKIP_MEMORY_CHECK"  # set to 1: load whatever the estimate says
GB = 1e9  # the Hub's unit
KV_BYTES = 2  # f16 keys and values
# Working memory: a batch's logits (n_batch x n_vocab floats, twice that with several slots, whose contexts also
# keep an output buffer), plus this much for the activations.
WORKING_SPARE = 128 * 2 ** 20
FALLBACK_VOCAB = 152_064  # Qwen2.5's larger vocabulary, for a model whose header is not at hand

FreeMemory = Callable[[], "int | None"]


@dataclass(frozen=True)
class KvShape:
    """What a model's KV cache and logits cost per token: from its GGUF header or its catalog shape."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int | None = None

    @classmethod
    def of(cls, shape: Shape) -> "KvShape":
        return cls(shape.layers, shape.kv_heads, shape.head_dim, shape.vocab)


@dataclass(frozen=True)
class Need:
    """One model's share of the memory, in bytes."""

    weights: int
    kv: int
    working: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.working

    def __add__(self, other: "Need") -> "Need":
        return Need(self.weights + other.weights, self.kv + other.kv, self.working + other.working)


def need(weights: int, shape: KvShape | None, n_ctx: int, slots: int, n_batch: int) -> Need:
    """A model's need: its file bytes, its KV cache for `slots` x `n_ctx` tokens, and a batch's working buffers."""
    kv = 0 if shape is None else n_ctx * slots * shape.layers * 2 * shape.kv_heads * shape.head_dim * KV_BYTES
    vocab = (shape.vocab if shape is not None else None) or FALLBACK_VOCAB
    working = n_batch * vocab * 4 * (2 if slots > 1 else 1) + WORKING_SPARE
    return Need(weights, kv, working)


def gb(n: float) -> str:
    """Bytes as GB with one decimal ("5.5")."""
    return f"{n / GB:.1f}"


# ---- free memory ----------------------------------------------------------------------------------

def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _number(text: str | None, key: str) -> int | None:
    """The number after `key` on the line of `text` that starts with it ("MemAvailable: 8000 kB"); None if none."""
    return next((int(line.split()[1]) for line in (text or "").splitlines() if line.split()[:1] == [key]), None)


def _cgroup_room(root: Path) -> int | None:
    """The cgroup's (v2, else v1) limit less what it uses and cannot give back; None without a limit."""
    for base, limit_name, usage_name in ((root, "memory.max", "memory.current"),
                                         (root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes")):
        limit, usage = _read(base / limit_name), _read(base / usage_name)
        if limit is None or usage is None:
            continue
        limit = limit.strip()
        if limit == "max" or int(limit) >= 2 ** 60:  # v1 writes "no limit" as a page-rounded 2^63
            return None
        reclaimable = _number(_read(base / "memory.stat"), "inactive_file") or 0
        return max(0, int(limit) - (int(usage.strip()) - reclaimable))
    return None


def free_memory(meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes this process can still use: MemAvailable, or the cgroup's room if smaller; None if neither is read."""
    available_kb = _number(_read(meminfo), "MemAvailable:")
    known = [v for v in (available_kb and available_kb * 1024, _cgroup_room(cgroup)) if v is not None]
    return min(known) if known else None


def skip_requested(env: Mapping[str, str] = os.environ) -> bool:
    """Whether whoever runs the models asked not to check memory (CASCADE_SKIP_MEMORY_CHECK=1)."""
    return env.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# ---- the GGUF header ------------------------------------------------------------------------------

def read_kv_shape(path: Path) -> KvShape | None:
    """A GGUF file's KV shape and vocabulary size from its header; None where it is not one or lacks them."""
    try:
        header = read_header(path)
    except (OSError, ValueError):
        return None
    arch = header.value("general.architecture")
    sizes = [header.value(f"{arch}.{k}") for k in ("block_count", "attention.head_count_kv", "embedding_length",
                                                    "attention.head_count")]
    if not arch or None in sizes:
        return None
    layers, kv_heads, width, heads = sizes
    head_dim = header.value(f"{arch}.attention.key_length") or width // max(heads, 1)
    return KvShape(int(layers), int(kv_heads), int(head_dim), header.value("tokenizer.ggml.tokens"))
