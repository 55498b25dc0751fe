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


def encode_prompt(llm: llama_cpp.Llama, prompt: str, chat: bool) -> list[int]:
    if not prompt.strip():
        raise PromptError("the prompt is empty; type something for the models to answer or continue")
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model)))
    if chat:
        # The template's control tokens (<|im_start|> ...) must be read as special tokens; the
        # user's own text is already inside the rendered string, as the template intends.
        text = render_chat(llm, prompt)
        return llm.tokenize(text.encode("utf-8", errors="replace"), add_bos=add_bos, special=True)
    return llm.tokenize(prompt.encode("utf-8", errors="replace"), add_bos=add_bos, special=False)
