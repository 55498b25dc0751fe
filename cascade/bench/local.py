"""The folder the bench's caches live in (the tasks' answers), so a second run reuses them."""

from __future__ import annotations

import os
from pathlib import Path


def cache_folder(name: str) -> Path:
    """One of the bench's caches: `name` under CASCADE_CACHE, or under ~/.cache/cascade."""
    return Path(os.environ.get("CASCADE_CACHE", Path.home() / ".cache" / "cascade")) / name
