"""The example prompts shipped in examples/prompts.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

EXAMPLES_FILE = Path(__file__).resolve().parents[2] / "examples" / "prompts.json"


@dataclass(frozen=True)
class Example:
    name: str
    prompt: str
    chat: bool
    copy: bool = False  # the answer copies long spans of the prompt (where prompt lookup pays)
    first: bool = False  # the page starts with this prompt, and lists it first
    page_only: bool = False  # offered on the page only, never run by the benchmark


def load_examples(path: Path = EXAMPLES_FILE, page: bool = False) -> list[Example]:
    """The examples in the file's order: the benchmark's, or with `page` the page's (the first at the head)."""
    examples = [Example(**item) for item in json.loads(path.read_text(encoding="utf-8"))]
    if not page:
        return [e for e in examples if not e.page_only]
    return sorted(examples, key=lambda e: not e.first)  # (a stable sort: the others keep their order)
