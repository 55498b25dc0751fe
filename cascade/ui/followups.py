"""What the page does for a follow-up question: ask it, offer its box, show the conversation so far.

"Ask a follow-up" fills the request's controls with the question and the conversation so far (the
hidden history field, `conversation.py`), and the chained generation answers it like any request.
When that field changes, the row by the prompt and the panel of earlier turns are drawn again.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from . import conversation
from .run import Run


def followup_request(question: Any, run: Run | None) -> tuple[str, str]:
    """"Ask a follow-up": the next request's prompt and its earlier turns (the hidden field's JSON), the
    conversation of `run` so far. ValueError says why not: no finished chat answer, or no question."""
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
    """The follow-up's request in the controls: prompt, earlier turns, no answer start (the earlier
    answer's start was its own), and the follow-up box emptied. A gr.Error says why not (the chained
    generation then does not run)."""
    try:
        prompt, history = followup_request(question, run)
    except ValueError as e:
        raise gr.Error(f"Cannot ask a follow-up: {e}.") from e
    return prompt, history, "", ""


def followup_box(run: Run | None) -> Any:
    """The follow-up box is offered under a finished (or stopped) chat answer."""
    return gr.update(visible=run is not None and not run.running and run.config.chat)


def conversation_line(history: Any, shown: Run | None = None) -> tuple:
    """When the request's conversation changes (a follow-up asked, a branch shown, a link, "New
    conversation"): the row by the prompt (its line, and "New conversation"), shown while the request
    continues a conversation, and the earlier turns' panel above the answer, with the colours of the
    runs that wrote them where `shown` (the run on the page) has them."""
    try:
        turns = conversation.parse_history(history)
    except ValueError as e:
        words = f"**The conversation cannot be read:** {e}. Start a new conversation."
        return gr.update(visible=True), words, gr.update(value="", visible=False)
    panel = conversation.conversation_panel(conversation.turns_of(turns, shown if isinstance(shown, Run) else None))
    words = conversation.conversation_words(turns)
    return gr.update(visible=bool(words)), words, gr.update(value=panel, visible=bool(panel))
