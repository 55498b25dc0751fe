"""The Qwen2.5 Instruct family by size: each Q4_K_M GGUF's place on the Hub, its parts, bytes and shape."""

from __future__ import annotations

import re
from dataclasses import dataclass

@dataclass(frozen=True)
class Shape:
    """What a model's cost depends on: its config.json's sizes."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool  # the file has no output matrix of its own: the token embedding serves

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        """Parameters, counting the embedding once and the output matrix again when it is its own."""
        kv = self.kv_heads * self.head_dim
        attention = self.hidden * (self.hidden + 2 * kv) + (self.hidden + 2 * kv) + self.hidden * self.hidden
        layer = attention + 3 * self.hidden * self.ffn + 2 * self.hidden
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


@dataclass(frozen=True)
class Size:
    """One size of the family, as Q4_K_M GGUF on the Hub (`parts` files when the Hub splits it)."""

    name: str  # "7B"
    params_b: float  # as the model card says
    repo_id: str
    stem: str  # the file name without "-0000k-of-0000n" and ".gguf"
    parts: int
    file_bytes: int  # all parts together
    shape: Shape

    @property
    def filename(self) -> str:
        """The file to ask for: the only one, or the first of the parts (llama.cpp loads the rest beside it)."""
        return f"{self.stem}.gguf" if self.parts == 1 else f"{self.stem}-00001-of-{self.parts:05d}.gguf"

    @property
    def spec(self) -> str:
        """The model as `--target` takes it: `repo_id/filename`."""
        return f"{self.repo_id}/{self.filename}"


def _qwen(name: str, params_b: float, parts: int, file_bytes: int, shape: Shape) -> Size:
    low = name.lower()
    return Size(name, params_b, f"Qwen/Qwen2.5-{name}-Instruct-GGUF", f"qwen2.5-{low}-instruct-q4_k_m", parts,
                file_bytes, shape)


# config.json ties 0.5B-3B's output to the embedding, but Qwen's GGUF files carry it as its own Q6_K matrix (their
# sizes match only so): the shapes here are the files'.
SMALL = _qwen("0.5B", 0.49, 1, 491_400_032, Shape(24, 896, 4864, 14, 2, 151_936, tied=False))
SIZES: dict[str, Size] = {s.name: s for s in (
    _qwen("1.5B", 1.54, 1, 1_117_320_736, Shape(28, 1536, 8960, 12, 2, 151_936, tied=False)),
    _qwen("3B", 3.09, 1, 2_104_932_768, Shape(36, 2048, 11008, 16, 2, 151_936, tied=False)),
    _qwen("7B", 7.61, 2, 4_683_073_632, Shape(28, 3584, 18944, 28, 4, 152_064, tied=False)),
    _qwen("14B", 14.7, 3, 8_988_110_496, Shape(48, 5120, 13824, 40, 8, 152_064, tied=False)),
)}

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<parts>\d{5})\.gguf$")


def size(name: str) -> Size:
    """A size by its name ("7B", "7b"), or a ValueError naming the sizes there are."""
    for key, value in SIZES.items():
        if key.lower() == name.strip().lower():
            return value
    raise ValueError(f"unknown size {name!r}; choose one of {', '.join(SIZES)}")


def split_parts(filename: str) -> list[str]:
    """Every part's file name of a split GGUF given any one of them; a file that is not split is its own list."""
    folder, slash, name = filename.rpartition("/")
    match = _SPLIT.match(name)
    if not match:
        return [filename]
    n = int(match["parts"])
    return [f"{folder}{slash}{match['stem']}-{k:05d}-of-{n:05d}.gguf" for k in range(1, n + 1)]
