"""Models by name and errors in words a visitor may read: no path of the serving machine, only file names."""

from __future__ import annotations

import re
from pathlib import Path

from ..engine.models import ModelError, parse_model_spec

HOW_TO_POINT_AT_LOCAL_FILES = (
    "To use model files already on this machine, whoever runs the page can set CASCADE_DRAFT and "
    "CASCADE_TARGET to two .gguf files (or pass --draft and --target to app.py) and restart it."
)


def model_name(spec: str) -> str:
    """A Hub file as repo_id/filename, a local file by its name only."""
    where = parse_model_spec(spec)
    return where.name if isinstance(where, Path) else f"{where.repo_id}/{where.filename}"


# A path (/a/b, ~/a/b, ./a/b), but not the `//host/...` of a URL nor a Hub repo id (owner/repo/file).
_PATH = re.compile(r"(?<![\w.:/~-])(?:~/|\.{1,2}/|/)(?:[^\s/'\"]+/)*([^\s/'\"]+)")


def hide_paths(message: str) -> str:
    """The message with every absolute path replaced by its last part, the file name."""
    return _PATH.sub(lambda m: m.group(1), message)


SERVER_TROUBLE = "Something went wrong on the server; whoever runs the page can find the details in its log."


def public_message(error: ModelError) -> str:
    """What a visitor is told when the models cannot be used: what went wrong, and what to do."""
    return f"The models could not be loaded: {hide_paths(str(error)).rstrip('.')}. {HOW_TO_POINT_AT_LOCAL_FILES}"
