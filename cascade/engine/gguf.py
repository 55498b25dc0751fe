"""A GGUF file's header, read without loading the model: its keys' types and raw values, its tensors' shapes."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

STRING, ARRAY = 8, 9  # GGUF value types; the fixed-size scalars are SCALAR's
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


@dataclass(frozen=True)
class Header:
    """A GGUF's metadata, in order: key -> (value type, the value's raw bytes); tensors as (name, dims, type id)."""

    kv: dict[str, tuple[int, bytes]]
    tensors: list[tuple[str, tuple[int, ...], int]]

    def value(self, key: str, default=None):
        """A scalar or string value (an array: its length), or `default` where the key is absent."""
        if key not in self.kv:
            return default
        vtype, raw = self.kv[key]
        if vtype == STRING:
            return raw[8:].decode(errors="replace")
        if vtype == ARRAY:
            return struct.unpack_from("<Q", raw, 4)[0]
        return struct.unpack("<" + SCALAR[vtype], raw)[0]


def _string(m, pos: int) -> tuple[str, int]:
    n = struct.unpack_from("<Q", m, pos)[0]
    if pos + 8 + n > len(m):
        raise ValueError("the header ends early")
    return bytes(m[pos + 8:pos + 8 + n]).decode(errors="replace"), pos + 8 + n


def _skip(m, pos: int, vtype: int) -> int:
    """The end of a value of type `vtype` that starts at `pos`."""
    if vtype in SCALAR:
        return pos + struct.calcsize(SCALAR[vtype])
    if vtype == STRING:
        return pos + 8 + struct.unpack_from("<Q", m, pos)[0]
    if vtype != ARRAY:
        raise ValueError(f"unknown value type {vtype}")
    itype, count = struct.unpack_from("<IQ", m, pos)
    pos += 12
    if itype in SCALAR:
        return pos + count * struct.calcsize(SCALAR[itype])
    for _ in range(count):
        pos = _skip(m, pos, itype)
    return pos


def read_header(path: str | Path) -> Header:
    """The header of a GGUF file (any part of a split one holds its own); ValueError if it is not one."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise ValueError("not a GGUF file")
        try:
            n_tensors, n_kv = struct.unpack_from("<QQ", m, 8)
            pos, kv, tensors = 24, {}, []
            for _ in range(n_kv):
                key, pos = _string(m, pos)
                vtype = struct.unpack_from("<I", m, pos)[0]
                end = _skip(m, pos + 4, vtype)
                if end > len(m):
                    raise ValueError("the header ends early")
                kv[key], pos = (vtype, bytes(m[pos + 4:end])), end
            for _ in range(n_tensors):
                name, pos = _string(m, pos)
                nd = struct.unpack_from("<I", m, pos)[0]
                *dims, type_id = struct.unpack_from(f"<{nd}QI", m, pos + 4)
                tensors.append((name, tuple(dims), type_id))
                pos += 4 + 8 * nd + 12
        except struct.error as e:
            raise ValueError(f"the header ends early ({e})") from e
    return Header(kv, tensors)
