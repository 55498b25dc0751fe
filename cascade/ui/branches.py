"""A session's runs as branches, each labelled by what it changed (`what_differs`), and forks: a token
chosen in the hover's table ends the next run's given start (`fork_prefix`), with the parent's settings."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import gradio as gr

from ..engine.config import GenerationConfig
from ..engine.policies import POLICY_TABLE
from . import conversation, rulewords, sentences
from .generate import GENERATE_INPUTS, SETTINGS
from .run import BRANCH_OUTPUTS, Run, Update, run_update
from .style import fmt_threshold, visible

MAX_BRANCHES = 30  # runs a session keeps; past it the oldest is let go, and the list says so


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
    change: str = ""  # what it asked differently from the branch before it (`what_differs`)

    @property
    def label(self) -> str:
        f = self.fork
        if f is not None:
            return f"{self.number} · fork of {f.parent} at token {f.position}: {visible(f.was)} → " \
                f"{visible(f.chosen)}"
        if self.run.earlier:
            question = shortened(self.run.prompt, LABEL_WORDS)
            after = f"to {self.after}" if self.after else str(len(self.run.earlier) + 1)
            return f"{self.number} · follow-up {after}: {question}"
        return f"{self.number} · {self.change or quoted(self.run.prompt)}"


LABEL_WORDS = 40  # characters of a prompt or a question a label keeps

# a setting's name in a label, by field (the rule and its threshold are said together, `rule_words`)
SETTING_WORDS = {"k": "k", "rollback_threshold": "rollback threshold", "bild_window": "most unchecked tokens",
                 "lookup_ngram": "longest n-gram", "max_tokens": "most tokens", "temperature": "temperature",
                 "top_p": "top-p", "top_k": "top-k", "seed": "seed"}


def shortened(text: str, most: int) -> str:
    """`text` on one line, cut after a whole word to at most `most` characters (and "…")."""
    words = " ".join(text.split())
    if len(words) <= most:
        return words
    cut = words[:most + 1].rsplit(" ", 1)[0] if " " in words[most // 2:most + 1] else words[:most]
    return cut.rstrip() + "…"


def quoted(text: str) -> str:
    return f"“{shortened(text, LABEL_WORDS)}”"


def _number(value: Any) -> str:
    return fmt_threshold(value) if isinstance(value, float) else str(value)


def rule_words(config: GenerationConfig) -> str:
    """The rule and its threshold, or its share, as a label says them: "margin 0.1", "margin, 10% share"."""
    if config.budget is not None:
        return f"{config.rule}, {rulewords.share(config.budget)} share"
    return f"{config.rule} {fmt_threshold(config.threshold)}"


def _deciding(config: GenerationConfig) -> tuple:
    """What chose the big model's positions: the rule and its share, or, without one, its threshold."""
    return (config.rule, config.budget) if config.budget is not None else (config.rule, None, config.threshold)


def what_differs(before: Run | None, run: Run) -> str:
    """`run`'s label: the prompt if changed, then each changed setting ("margin 0.2", "k 2"); first run: its prompt."""
    if before is None:
        return quoted(run.prompt)
    old, new = before.config, run.config
    changes = [quoted(run.prompt)] if run.prompt != before.prompt else []
    if new.chat != old.chat:
        changes.append("chat" if new.chat else "raw")
    if new.policy != old.policy:
        changes.append(new.policy)
    uses_rule = new.policy in POLICY_TABLE and POLICY_TABLE[new.policy].uses_rule
    if uses_rule and _deciding(new) != _deciding(old):
        changes.append(rule_words(new))
    changes += [f"{words} {_number(getattr(new, name))}" for name, words in SETTING_WORDS.items()
                if getattr(new, name) != getattr(old, name)]
    if new.system != old.system:
        changes.append(f"system message {quoted(new.system)}" if new.system else "no system message")
    if new.answer_prefix != old.answer_prefix:
        changes.append(f"starts with {quoted(new.answer_prefix)}" if new.answer_prefix else "no given start")
    return ", ".join(changes) or "the same request again"


def fork_prefix(run: Run | None, current: int | None, position: Any, chosen: Any) -> tuple[str, Fork]:
    """(`run`'s answer before `position` + `chosen`, the `Fork`); ValueError if running or no token there."""
    if run is None or run.running:
        raise ValueError("let the run finish (or stop it) before writing on from one of its tokens")
    if not isinstance(position, int) or isinstance(position, bool) or not isinstance(chosen, str) or not chosen:
        raise ValueError("choose a token from the list to write on from it")
    at = [e for e in run.events if e.position == position and e.status != "escalated"]
    if not at:
        raise ValueError(f"the run has no token at position {position}")
    before = "".join(e.text for e in run.events if e.accepted and e.position < position)
    was = next((e.text for e in at if e.accepted), at[0].text)
    return run.config.answer_prefix + before + chosen, Fork(current or 0, position, was, chosen)


def request_controls(prompt: str, config: GenerationConfig) -> dict[str, Any]:
    """The values of every control of a request (GENERATE_INPUTS) that asks `prompt` with `config`."""
    return {"prompt": prompt, "mode": "chat" if config.chat else "raw",
            **{name: getattr(config, name) for name in SETTINGS},
            "history": conversation.history_json(config.history)}


def _same(shown: Any, value: Any) -> bool:
    """Whether a control shows `value` (numbers as numbers: a slider's 5 is the setting 5.0)."""
    if _is_number(value):
        try:
            return math.isclose(float(shown), float(value), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return (shown or "") == (value or "") if isinstance(value, str) else shown == value


def _moved(name: str, shown: Any, value: Any, config: GenerationConfig, controls: dict[str, Any]) -> str | None:
    """One control that shows another value than the run's, in words: the run's value first."""
    if name == "threshold" and (config.budget is not None or _is_number(controls.get("budget"))
                                or not _same(controls.get("rule"), config.rule)):
        return None  # told with the share, or with the rule; a share's run never read its threshold
    if name == "budget":
        return _share_moved(shown, value, config)
    if name == "rule" and config.budget is None and not _is_number(controls.get("budget")):
        return (f"the {value} rule at {fmt_threshold(config.threshold)}, not the {shown} rule at "
                f"{_number(controls.get('threshold'))} the controls show")
    if name == "rule":
        return f"the {value} rule, not the {shown} rule the controls show"
    if name == "threshold":
        return f"threshold {fmt_threshold(value)}, not the {_number(shown)} the slider shows"
    if name in SETTING_WORDS:
        return f"{SETTING_WORDS[name]} {_number(value)}, not {_number(shown)}"
    return {"prompt": "its prompt, not the one in the box", "mode": f"{value} mode, not {shown}",
            "policy": f"who writes: {value}, not {shown}", "system": "its system message",
            "history": "its conversation"}.get(name, name)


def _is_number(value: Any) -> bool:
    """Whether `value` is a number, not a bool (a budget control's share, not none: the threshold decides)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _share_moved(shown: Any, value: Any, config: GenerationConfig) -> str:
    """The share control showing another value than the run's, in words."""
    if value is None:
        return (f"a threshold of {fmt_threshold(config.threshold)}, not the share of "
                f"{rulewords.share(float(shown))} the slider shows")
    if not _is_number(shown):
        return f"a {rulewords.share(value)} share for the big model, not a threshold"
    return (f"a {rulewords.share(value)} share for the big model, not the {rulewords.share(float(shown))} the slider "
            f"shows")


def fork_request(run: Run | None, current: int | None, position: Any, chosen: Any,
                 controls: dict[str, Any]) -> tuple[dict[str, Any], Fork, str | None]:
    """(the fork's GENERATE_INPUTS values, the `Fork`, a note naming `controls` that differed or None)."""
    prefix, fork = fork_prefix(run, current, position, chosen)
    values = {**request_controls(run.prompt, run.config), "answer_prefix": prefix}
    moved = [_moved(name, controls[name], values[name], run.config, controls) for name in GENERATE_INPUTS
             if name != "answer_prefix" and name in controls and not _same(controls[name], values[name])]
    moved = [words for words in moved if words]
    note = (f"This fork writes with the settings of the run it comes from: {'; '.join(moved)}. The controls "
            f"show that run's settings again." if moved else None)
    return values, fork, note


def fork_start(run: Any, current: Any, evt: gr.SelectData, *shown: Any) -> tuple:
    """A token chosen in the hover's table: GENERATE_INPUTS set to the fork's request, then the `Fork`."""
    controls = dict(zip(GENERATE_INPUTS, shown))
    try:
        values, fork, note = fork_request(run, current, evt.index, evt.value, controls)
    except ValueError as e:
        raise gr.Error(f"Cannot fork: {e}.") from e
    if note:
        gr.Info(note, duration=12)
    updates = {name: gr.update(value=values[name]) if name == "answer_prefix" or name not in controls
               or not _same(controls[name], values[name]) else gr.skip() for name in GENERATE_INPUTS}
    if not _same(controls.get("rule"), values["rule"]):  # the slider takes the rule's units back
        updates["threshold"] = gr.update(**{**rulewords.slider_props(values["rule"]), "value": values["threshold"]})
    return tuple(updates[name] for name in GENERATE_INPUTS) + (fork,)


def record_branch(run: Run | None, branches: Sequence[Branch] | None, fork: Fork | None) -> tuple:
    """`run` added or replacing its earlier self: (branches, list update, current number, pending fork or None)."""
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
    change = what_differs(branches[-1].run if branches else None, run)
    branches = (branches + [Branch(number, run, fork, after, change)])[-MAX_BRANCHES:]
    return branches, branches_update(branches, number), number, None


def branches_update(branches: Sequence[Branch], current: int) -> Any:
    labels = [b.label for b in branches]
    gone = branches[0].number - 1 if branches else 0
    info = ("Each run of this session, by what it changed: the prompt or the settings that differ from the run "
            "before, the token a fork chose, a follow-up's question. Choose one to show it again."
            + (f" (The first {gone} are no longer kept.)" if gone else ""))
    value = next((b.label for b in branches if b.number == current), None)
    return gr.update(choices=labels, value=value, visible=len(branches) > 1, info=info)


# the controls a shown branch sets back to its request, so that Generate, a fork or a link start from it
REQUEST_CONTROLS = ("prompt", "mode", "system", "answer_prefix", "history")


def show_branch(label: Any, branches: Sequence[Branch] | None) -> tuple:
    """A branch chosen in the list: its pictures again (BRANCH_OUTPUTS), its number, its REQUEST_CONTROLS."""
    branch = next((b for b in branches or [] if b.label == label), None)
    if branch is None:
        return Update().values(BRANCH_OUTPUTS) + (gr.skip(),) * (1 + len(REQUEST_CONTROLS))
    run = branch.run
    compared = sentences.compare_html(run.summary, run.comparison) if run.comparison and run.summary else ""
    numbers = ({"this_run": run.summary.to_dict(), "big_model_alone": run.comparison.to_dict()}
               if run.comparison and run.summary else None)
    update = replace(run_update(run), compare_html=compared, numbers=numbers)
    request = request_controls(run.prompt, run.config)
    return update.values(BRANCH_OUTPUTS) + (branch.number,) + tuple(request[name] for name in REQUEST_CONTROLS)


def turn_branch(run: Run | None, number: Any, branches: Sequence[Branch] | None) -> Branch:
    """The branch of earlier turn `number` (from 1) of `run`'s conversation; ValueError if none is kept."""
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
