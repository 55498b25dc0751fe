"""The example prompts shipped in examples/prompts.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

EXAMPLES_FILE = Path(__file__).resolve().parent.parent / "examples" / "prompts.json"


@dataclass(frozen=True)
class Example:
    name: str
    prompt: str
    chat: bool
    copy: bool = False  # the answer copies long spans of the prompt (where prompt lookup pays)


def load_examples(path: Path = EXAMPLES_FILE) -> list[Example]:
    return [Example(**item) for item in json.loads(path.read_text(encoding="utf-8"))]
