"""A session's runs as branches, and forks from a token.

Every run of a session (a generation, a fork, a follow-up) is kept as a `Branch`, listed by the answer
so a visitor can show any of them again, with its request back in the controls. A fork starts from a
token of a finished run: a token chosen in a token's pinned table (`hover.py`) becomes the end of the
next run's given start (`fork_prefix`), and that run is a branch of its own that says where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import gradio as gr

from . import conversation, sentences
from .run import BRANCH_OUTPUTS, Run, Update, run_update
from .style import visible

# Runs a session keeps as branches (each with its events and both models' alternatives); past it, the
# oldest is let go, and the list says so.
MAX_BRANCHES = 30


@dataclass(frozen=True)
class Fork:
    """Where the next run starts from: a position of branch `parent`, and the token chosen there."""

    parent: int
    position: int
    was: str  # the token the parent had there
    chosen: str


@dataclass(frozen=True)
class Branch:
    number: int  # 1, 2, … in the order of the session
    run: Run
    fork: Fork | None = None  # None: a run of its own (Generate), not a fork
    after: int | None = None  # a follow-up: the branch whose answer it follows (None: not one, or let go)

    @property
    def label(self) -> str:
        f = self.fork
        if f is not None:
            return f"{self.number} · from {f.parent} at token {f.position}: {visible(f.was)} → {visible(f.chosen)}"
        words = " ".join(self.run.prompt.split())
        words = words[:48] + "…" if len(words) > 48 else words
        if self.run.earlier:
            return f"{self.number} · follow-up to {self.after}: {words}" if self.after else \
                f"{self.number} · follow-up {len(self.run.earlier) + 1}: {words}"
        return f"{self.number} · {words}"


# ---- forks -------------------------------------------------------------------------------------------

def fork_prefix(run: Run | None, current: int | None, position: Any, chosen: Any) -> tuple[str, Fork]:
    """A fork from token `position` of `run` with the token `chosen` there: the new run's answer prefix
    (the run's answer before that token, then the chosen token) and where it forked from. ValueError
    for a run still writing or a position it has no token at."""
    if run is None or run.running:
        raise ValueError("let the run finish (or stop it) before writing on from one of its tokens")
    if not isinstance(position, int) or isinstance(position, bool) or not isinstance(chosen, str) or not chosen:
        raise ValueError("choose a token from the list to write on from it")
    kept = [e for e in run.events if e.accepted]
    at = [e for e in run.events if e.position == position and e.status != "escalated"]
    if not at:
        raise ValueError(f"the run has no token at position {position}")
    before = "".join(e.text for e in kept if e.position < position)
    was = next((e.text for e in at if e.accepted), at[0].text)
    return run.config.answer_prefix + before + chosen, Fork(current or 0, position, was, chosen)


def fork_start(run: Any, current: Any, evt: gr.SelectData) -> tuple:
    """A token chosen in a token's table: the answer's start for the fork, and where it forked from."""
    try:
        prefix, chosen = fork_prefix(run, current, evt.index, evt.value)
    except ValueError as e:
        raise gr.Error(f"Cannot fork: {e}.") from e
    return gr.update(value=prefix), chosen


# ---- the session's branches --------------------------------------------------------------------------

def record_branch(run: Run | None, branches: Sequence[Branch] | None, fork: Fork | None) -> tuple:
    """After a run (or its Stop, or its comparison): the session's branches with it, as a new branch or
    in place of its earlier self; (branches, the list's update, the current branch's number, the pending
    fork cleared)."""
    branches = list(branches or [])
    if run is None:
        return branches, gr.skip(), gr.skip(), fork
    mine = next((i for i, b in enumerate(branches) if b.run.id == run.id), None)
    if mine is not None:
        branches[mine] = replace(branches[mine], run=run)
        return branches, gr.skip(), branches[mine].number, fork
    number = branches[-1].number + 1 if branches else 1
    before = run.earlier[-1].run if run.earlier else None
    after = next((b.number for b in branches if before is not None and b.run.id == before.id), None)
    branches = (branches + [Branch(number, run, fork, after)])[-MAX_BRANCHES:]
    return branches, branches_update(branches, number), number, None


def branches_update(branches: Sequence[Branch], current: int) -> Any:
    labels = [b.label for b in branches]
    gone = branches[0].number - 1 if branches else 0
    info = ("Each run of this session; a fork says which run it came from, at which token, with which "
            "token instead, and a follow-up which answer it follows. Choose one to show it again."
            + (f" (The first {gone} are no longer kept.)" if gone else ""))
    value = next((b.label for b in branches if b.number == current), None)
    return gr.update(choices=labels, value=value, visible=len(branches) > 1, info=info)


# The controls that say what a run asked, which showing a branch sets back to its request: Generate then
# asks that again, a fork or a follow-up starts from it, and "Copy link" links to it.
REQUEST_CONTROLS = ("prompt", "mode", "system", "answer_prefix", "history")


def request_values(run: Run) -> tuple:
    """The values of REQUEST_CONTROLS for `run`'s request."""
    config = run.config
    return (run.prompt, "chat" if config.chat else "raw", config.system, config.answer_prefix,
            conversation.history_json(config.history))


def show_branch(label: Any, branches: Sequence[Branch] | None) -> tuple:
    """A branch chosen in the list: its text, chart and numbers again, with no generation; then the
    current branch's number, and its request in the controls (REQUEST_CONTROLS)."""
    branch = next((b for b in branches or [] if b.label == label), None)
    if branch is None:
        return Update().values(BRANCH_OUTPUTS) + (gr.skip(),) * (1 + len(REQUEST_CONTROLS))
    run = branch.run
    compared = sentences.compare_html(run.summary, run.comparison) if run.comparison and run.summary else ""
    numbers = ({"this_run": run.summary.to_dict(), "big_model_alone": run.comparison.to_dict()}
               if run.comparison and run.summary else None)
    update = replace(run_update(run), compare_html=compared, numbers=numbers)
    return update.values(BRANCH_OUTPUTS) + (branch.number,) + request_values(run)


# ---- an earlier turn's branch --------------------------------------------------------------------------

def turn_branch(run: Run | None, number: Any, branches: Sequence[Branch] | None) -> Branch:
    """The branch of the earlier turn `number` (1, 2, …) of the conversation `run` follows. ValueError
    where there is none: a turn a link gave (its text alone), or one the branch list has let go."""
    if run is None or not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= len(run.earlier):
        raise ValueError("the answer shown has no such earlier turn")
    turn = run.earlier[number - 1].run
    if turn is None:
        raise ValueError("this turn came with a link, which keeps its text alone, not its run")
    branch = next((b for b in branches or [] if b.run.id == turn.id), None)
    if branch is None:
        raise ValueError(f"this turn is no longer kept (the list keeps the latest {MAX_BRANCHES} branches)")
    return branch


def show_turn(run: Any, branches: Any, evt: gr.SelectData) -> tuple:
    """An earlier turn's "show its chart": its branch shown (`show_branch`), and chosen in the list."""
    try:
        branch = turn_branch(run, evt.index, branches)
    except ValueError as e:
        raise gr.Error(f"Cannot show that turn: {e}.") from e
    return show_branch(branch.label, branches) + (branches_update(branches, branch.number),)
