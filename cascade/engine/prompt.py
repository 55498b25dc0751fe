"""A request to tokens: a conversation through the model's chat template, or raw text, then the answer prefix;
only the template's markup becomes control tokens, so no one can forge a turn by typing "<|im_end|>"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter


# A conversation's earlier turns, oldest first: ("user", question) and ("assistant", answer) in turn.
History = tuple[tuple[str, str], ...]


class PromptError(ValueError):
    """The prompt cannot be used as given; the message says why."""


@dataclass(frozen=True)
class EncodedPrompt:
    """What the models read before they write: the rendered request, then the answer prefix's tokens."""

    tokens: list[int]
    n_given: int = 0  # of `tokens`, the last ones: the answer prefix, read as given


def parse_history(value: Any) -> History:
    """Earlier turns from JSON text: "" or null is none, else [role, text] pairs, "user" then "assistant" in
    turn, oldest first; a ValueError says what is wrong."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"the conversation is not readable (not JSON: {e.msg} at character {e.pos})") from None
    if not isinstance(value, (list, tuple)):
        raise ValueError("the conversation must be a list of [role, text] pairs")
    turns: list[tuple[str, str]] = []
    for i, turn in enumerate(value):
        if (not isinstance(turn, (list, tuple)) or len(turn) != 2 or not all(isinstance(x, str) for x in turn)):
            raise ValueError(f"the conversation's message {i + 1} is not a [role, text] pair")
        role = "user" if i % 2 == 0 else "assistant"
        if turn[0] != role:
            raise ValueError(f"the conversation's message {i + 1} must be the {role}'s (a question, then its "
                             f"answer, in turn), got {turn[0]!r}")
        turns.append((turn[0], turn[1]))
    if len(turns) % 2:
        raise ValueError("the conversation ends with a question that has no answer")
    return tuple(turns)


def history_json(history: Sequence[Sequence[str]]) -> str:
    """A conversation's earlier turns as the JSON text `parse_history` reads ("" for none)."""
    return json.dumps([list(t) for t in history], ensure_ascii=False, separators=(",", ":")) if history else ""


def _special_text(llm: llama_cpp.Llama, token: int) -> str:
    return "" if token < 0 else llm.detokenize([token], special=True).decode("utf-8", errors="replace")


def _formatter(llm: llama_cpp.Llama) -> Jinja2ChatFormatter:
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise PromptError("this model has no chat template; use raw completion instead")
    return Jinja2ChatFormatter(template=template, eos_token=_special_text(llm, llm.token_eos()),
                               bos_token=_special_text(llm, llm.token_bos()))


def conversation(prompt: str, system: str = "", history: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """The (role, text) messages of one request: the system message if given, the earlier turns, the user's prompt."""
    return ([("system", system)] if system else []) + list(history) + [("user", prompt)]


def render_chat(llm: llama_cpp.Llama, prompt: str, system: str = "", history: Sequence[tuple[str, str]] = ()) -> str:
    """The request as text in the model's chat template, ending where the assistant's turn begins."""
    return _render(llm, conversation(prompt, system, history))


def _render(llm: llama_cpp.Llama, messages: Sequence[tuple[str, str]]) -> str:
    return _formatter(llm)(messages=[{"role": role, "content": text} for role, text in messages]).prompt


def _slot(i: int) -> str:
    # Marks where message i's text sits in the rendered template; no one types NUL bytes around it.
    return f"\x00cascade-message-{i}\x00"


def _bytes(text: str) -> bytes:
    # Lone surrogates (possible in a Python str, never in UTF-8) become '?' instead of failing.
    return text.encode("utf-8", errors="replace")


def _add_bos(llm: llama_cpp.Llama) -> bool:
    return bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model)))


def encode_chat(llm: llama_cpp.Llama, messages: Sequence[tuple[str, str]]) -> list[int]:
    """The conversation in the model's template up to the assistant's turn: markup as control tokens, text as text."""
    rest = _render(llm, [(role, _slot(i)) for i, (role, _text) in enumerate(messages)])
    tokens: list[int] = []
    for i, (_role, text) in enumerate(messages):
        markup, found, rest = rest.partition(_slot(i))
        if not found or _slot(i) in rest:
            raise PromptError("this model's chat template does not place each message once, in order; "
                              "use raw completion instead")
        tokens += llm.tokenize(_bytes(markup), add_bos=_add_bos(llm) and not tokens, special=True)
        tokens += llm.tokenize(_bytes(text), add_bos=False, special=False)
    return tokens + llm.tokenize(_bytes(rest), add_bos=False, special=True)


def encode_prompt(llm: llama_cpp.Llama, prompt: str, chat: bool, system: str = "",
                  answer_prefix: str = "", history: Sequence[tuple[str, str]] = ()) -> EncodedPrompt:
    """The tokens the models read for a request (chat or raw), then the answer prefix (`n_given` tokens)."""
    if not prompt.strip():
        raise PromptError("the prompt is empty; type something for the models to answer or continue")
    if (system or history) and not chat:
        raise PromptError("a system message or earlier turns need chat mode (the chat template places them)")
    if chat:
        tokens = encode_chat(llm, conversation(prompt, system, history))
    else:
        tokens = llm.tokenize(_bytes(prompt), add_bos=_add_bos(llm), special=False)
    given = llm.tokenize(_bytes(answer_prefix), add_bos=False, special=False) if answer_prefix else []
    return EncodedPrompt(tokens + given, len(given))
