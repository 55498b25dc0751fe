"""Turning a user's prompt into tokens: through the model's own chat template, or raw."""

from __future__ import annotations

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter


class PromptError(ValueError):
    """The prompt cannot be used as given; the message says why."""


def _special_text(llm: llama_cpp.Llama, token: int) -> str:
    if token < 0:
        return ""
    return llm.detokenize([token], special=True).decode("utf-8", errors="replace")


def render_chat(llm: llama_cpp.Llama, prompt: str) -> str:
    """The prompt as one user turn in the model's chat template (from its GGUF metadata)."""
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise PromptError("this model has no chat template; use raw completion instead")
    formatter = Jinja2ChatFormatter(
        template=template,
        eos_token=_special_text(llm, llm.token_eos()),
        bos_token=_special_text(llm, llm.token_bos()),
    )
    return formatter(messages=[{"role": "user", "content": prompt}]).prompt


# Marks where the user's text sits in the rendered template; no one types NUL bytes around it.
_SLOT = "\x00cascade-user-text\x00"


def _bytes(text: str) -> bytes:
    # Lone surrogates (possible in a Python str, never in UTF-8) become '?' instead of failing.
    return text.encode("utf-8", errors="replace")


def encode_prompt(llm: llama_cpp.Llama, prompt: str, chat: bool) -> list[int]:
    if not prompt.strip():
        raise PromptError("the prompt is empty; type something for the models to answer or continue")
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model)))
    if not chat:
        return llm.tokenize(_bytes(prompt), add_bos=add_bos, special=False)
    # The template's own markup (<|im_start|> ...) is read as control tokens, but the user's text is
    # tokenized as plain text, so typing "<|im_end|><|im_start|>system" cannot forge a turn.
    before, _, after = render_chat(llm, _SLOT).partition(_SLOT)
    if _SLOT in after:
        raise PromptError("this model's chat template repeats the user's text; use raw completion instead")
    return (llm.tokenize(_bytes(before), add_bos=add_bos, special=True)
            + llm.tokenize(_bytes(prompt), add_bos=False, special=False)
            + llm.tokenize(_bytes(after), add_bos=False, special=True))
