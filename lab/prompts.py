"""The router's fixed prompt set in examples/router/ (train and test splits), and prompt files of one
JSON object a line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# Trained on (train), judged on (test); a fixed split keeps runs comparable.
PROMPT_SET_DIR = Path(__file__).resolve().parents[1] / "examples" / "router"
SPLITS = ("train", "test")


@dataclass(frozen=True)
class PromptItem:
    prompt: str
    chat: bool  # True: a user turn wrapped in the chat template; False: raw text to continue
    kind: str = ""  # prose, list, dialogue, code, arithmetic, ...
    language: str = ""  # the language the prompt is written in, e.g. "en", "fr"


_PROMPT_KEYS = ("prompt", "chat", "kind", "language")


def load_prompts(path: Path | str) -> list[PromptItem]:
    """A JSON-lines prompt file, one {"prompt": ..., "chat": true|false} a line ("chat" defaults to true);
    a fault is a ValueError naming the file and line."""
    path = Path(path)
    items: list[PromptItem] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected a JSON object such as {{\"prompt\": \"...\", \"chat\": true}}, "
                             f"got {type(item).__name__}")
        unknown = sorted(set(item) - set(_PROMPT_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(map(repr, unknown))} (known: {', '.join(_PROMPT_KEYS)})")
        if "prompt" not in item:
            raise ValueError(f"{where}: no \"prompt\"")
        prompt = item["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where}: \"prompt\" must be non-empty text, got {prompt!r}")
        chat = item.get("chat", True)
        if not isinstance(chat, bool):
            raise ValueError(f"{where}: \"chat\" must be true or false, got {chat!r}")
        for key in ("kind", "language"):
            if not isinstance(item.get(key, ""), str):
                raise ValueError(f"{where}: \"{key}\" must be text, got {item[key]!r}")
        items.append(PromptItem(prompt=prompt, chat=chat, kind=item.get("kind", ""), language=item.get("language", "")))
    if not items:
        raise ValueError(f"{path}: no prompts (expected one JSON object a line)")
    return items


def load_split(split: str) -> list[PromptItem]:
    """The shipped prompt set's train or test split."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: choose {' or '.join(SPLITS)}")
    return load_prompts(PROMPT_SET_DIR / f"{split}.jsonl")
