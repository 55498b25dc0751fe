"""A conversation's earlier turns: as the engine reads them (`GenerationConfig.history`, JSON in a hidden field
a link can carry) and as the page shows them (`Turn`, in its run's colours where the page has it)."""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

from ..engine.analysis import Routing
from ..engine.prompt import History, history_json, parse_history  # noqa: F401 (the page's hidden field holds this JSON)
from ..routing.rules import RULE_TABLE
from . import tokens
from .style import GREY, TEXT_STYLE

LINK_LIMIT = 8000  # the longest link offered: servers and proxies commonly refuse a request line past 8 KB
HISTORY_LINK_LIMIT = 6000  # of which the conversation's JSON may take this much
TOO_LONG_FOR_A_LINK = "download the run instead: its file keeps the whole conversation"


def conversation_of(run: Any) -> History:
    """The history a follow-up to `run` continues: its earlier turns, its question, its answer."""
    return tuple(run.config.history) + (("user", run.prompt), ("assistant", run.answer))


@dataclass(frozen=True)
class Turn:
    """One earlier question and its answer; `run`, when the page has it, keeps its colours."""

    question: str
    answer: str
    run: Any = None  # the page's `Run` (`ui/run.py`)

    @cached_property
    def answer_html(self) -> str:
        """The answer as its run drew it, or its text alone; cached, since an earlier turn never changes."""
        run = self.run
        if run is None or not run.events:
            return html.escape(self.answer)
        rule = run.config.rule if run.config.rule in RULE_TABLE else "perplexity"
        return tokens.tokens_html(Routing(run.events), run_rule=rule, given=run.config.answer_prefix)


def turns_of(history: History, previous: Any = None) -> tuple[Turn, ...]:
    """The turns of `history`, each with its run where `previous` (the run shown) or its turns wrote it; a run
    still writing (a follow-up just asked) lends the turns it continues."""
    known: list[Turn] = []
    if previous is not None:
        known = list(previous.earlier)
        if not previous.running:
            known.append(Turn(previous.prompt, previous.answer, previous))
    pairs = [(history[i][1], history[i + 1][1]) for i in range(0, len(history) - 1, 2)]
    turns: list[Turn] = []
    following = True  # every turn so far is the known one
    for i, (question, answer) in enumerate(pairs):
        following = following and i < len(known) and (known[i].question, known[i].answer) == (question, answer)
        turns.append(known[i] if following else Turn(question, answer))
    return tuple(turns)


_QUESTION_STYLE = ("margin:10px 0 4px;padding:6px 10px;border-radius:8px;background:rgba(63,111,181,.08);"
                   "white-space:pre-wrap;word-break:break-word")
_EARLIER_STYLE = TEXT_STYLE + ";min-height:0;opacity:.92"
_SHOW_STYLE = (f"float:right;margin-left:10px;font-size:.85em;color:{GREY};cursor:pointer;"
               "text-decoration:underline dotted")


def _question(number: int, text: str, selectable: bool = False) -> str:
    show = (f'<span class="cascade-show-turn" role="button" tabindex="0" style="{_SHOW_STYLE}" '
            f'title="Show this answer again: its chart, numbers and what-if, and ask or fork from it">'
            f"show its chart</span>" if selectable else "")
    return (f'<div class="cascade-question" style="{_QUESTION_STYLE}">{show}<b>Question {number}</b> '
            f'<span style="color:{GREY}">·</span> {html.escape(text)}</div>')


def latest_html(number: int, question: str, panel: str) -> str:
    """The latest answer's box: its question ("Question 3 · …") over its text `panel`; turn 1, the panel alone."""
    if number <= 1:
        return panel
    return (f'<div class="cascade-turn cascade-latest" data-turn="{number}">{_question(number, question)}'
            f"{panel}</div>")


def conversation_panel(earlier: Sequence[Turn]) -> str:
    """The earlier turns above the latest answer, drawn when the conversation changes (their HTML is large)."""
    return f'<div class="cascade-conversation">{earlier_html(earlier, selectable=True)}</div>' if earlier else ""


def earlier_html(earlier: Sequence[Turn], selectable: bool = False) -> str:
    """The earlier turns, oldest first; `selectable`: a turn whose run the page has offers "show its chart"."""
    parts = []
    for number, turn in enumerate(earlier, 1):
        note = "" if turn.run is not None else (f'<div class="cascade-turn-note" style="color:{GREY};font-size:.85em">'
                                                f"as the link gave it: its text alone, not its colours</div>")
        question = _question(number, turn.question, selectable and turn.run is not None)
        parts.append(f'<div class="cascade-turn cascade-earlier" data-turn="{number}">{question}'
                     f'<div class="cascade-earlier-text" style="{_EARLIER_STYLE}">{turn.answer_html}</div>{note}</div>')
    return "".join(parts)


def turn_record(turn: Turn) -> dict[str, Any]:
    """An earlier turn as a run file keeps it: question, answer, and its run's settings and events or null."""
    run = turn.run
    return {"question": turn.question, "answer": turn.answer,
            "settings": dataclasses.asdict(run.config) if run is not None else None,
            "events": [e.to_dict() for e in run.events] if run is not None else None}


def waiting_html(number: int, question: str) -> str:
    """A conversation opened from a link, before its latest answer is written."""
    latest = tokens.message_panel("Press Generate to write the answer to this question, with the conversation "
                                  "above as its earlier turns.", "info")
    return latest_html(number, question, latest)


# the panel's script after the hover's: "show its chart" sends `select` with the turn's number
SHOW_TURN_JS = """
const showTurn = (e) => {
  const button = e.target.closest && e.target.closest(".cascade-show-turn");
  if (!button || !element.contains(button) || !trigger) return;
  e.stopPropagation();
  trigger("select", {index: Number(button.closest(".cascade-turn").dataset.turn), value: "turn"});
};
element.addEventListener("click", showTurn);
element.addEventListener("keydown", (e) => { if (e.key === "Enter") showTurn(e); });
"""


def conversation_words(history: History) -> str:
    """The line beside the prompt while the next request continues a conversation ("" when it does not)."""
    if not history:
        return ""
    n = len(history) // 2
    turns = "1 earlier question and its answer" if n == 1 else f"{n} earlier questions and their answers"
    return (f"**Continuing a conversation:** the prompt is a follow-up, and the models read {turns} first "
            f"(shown above the answer). Generate asks it again; start a new conversation to ask afresh.")
