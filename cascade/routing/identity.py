"""A model file's identity, whatever its name: what shipped calibrations and routers are matched by."""

from __future__ import annotations

import hashlib
from pathlib import Path


def fingerprint(path: Path | str) -> str:
    """A hash of a file's size and its first and last 4 MiB (a GGUF's header and last weights)."""
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(4 << 20))
        if size > 8 << 20:
            f.seek(size - (4 << 20))
            h.update(f.read())
    return h.hexdigest()[:32]
