"""A follow-up question: it fills the request's controls (the question, the hidden history field), and
the chained generation answers it; the conversation is redrawn when that field changes."""

from __future__ import annotations

from typing import Any

import gradio as gr

from . import conversation
from .run import Run


def followup_request(question: Any, run: Run | None) -> tuple[str, str]:
    """The follow-up's prompt and history JSON; ValueError without a finished chat answer or a question."""
    if run is None:
        raise ValueError("generate an answer first, then ask a follow-up about it")
    if run.running:
        raise ValueError("let the answer finish (or stop it) before asking a follow-up")
    if not run.config.chat:
        raise ValueError("follow-up questions need chat mode: this run continued a text in raw mode")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("type a follow-up question first")
    return question, conversation.history_json(conversation.conversation_of(run))


def ask_followup(question: Any, run: Run | None) -> tuple:
    """"Ask a follow-up": prompt, history, no answer start, the box emptied; gr.Error (no generation) if not."""
    try:
        prompt, history = followup_request(question, run)
    except ValueError as e:
        raise gr.Error(f"Cannot ask a follow-up: {e}.") from e
    return prompt, history, "", ""


def followup_box(run: Run | None) -> Any:
    """The follow-up box is offered under a finished (or stopped) chat answer."""
    return gr.update(visible=run is not None and not run.running and run.config.chat)


def conversation_line(history: Any, shown: Run | None = None) -> tuple:
    """The history field changed: the conversation's row, its line, the earlier turns' panel (`shown` colours it)."""
    try:
        turns = conversation.parse_history(history)
    except ValueError as e:
        words = f"**The conversation cannot be read:** {e}. Start a new conversation."
        return gr.update(visible=True), words, gr.update(value="", visible=False)
    panel = conversation.conversation_panel(conversation.turns_of(turns, shown if isinstance(shown, Run) else None))
    words = conversation.conversation_words(turns)
    return gr.update(visible=bool(words)), words, gr.update(value=panel, visible=bool(panel))
