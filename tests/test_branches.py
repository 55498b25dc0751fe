"""Forks from a token and the session's branches (`cascade.ui.branches`): the answer's start a fork
gives the engine, what the list says of each branch, and a branch shown again without generating."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest

import gradio as gr

from cascade import GenerationConfig
from cascade.ui.controls import PAGE_START
from cascade.ui import branches as branches_module
from cascade.ui.branches import (MAX_BRANCHES, Branch, Fork, fork_prefix, fork_request, fork_start, record_branch,
                                 show_branch, what_differs)
from cascade.ui.conversation import Turn
from cascade.ui.generate import GENERATE_INPUTS
from cascade.ui.link import page_defaults
from cascade.ui.run import BRANCH_OUTPUTS, Run

from .helpers import assert_snapshot, engine_for

PROMPT = "The cat sat on the mat"


@pytest.fixture(scope="module")
def engine(toy):
    return engine_for(toy.small, toy.related)


def finished(engine, **settings) -> Run:
    config = GenerationConfig(**{"chat": False, "max_tokens": 24, **settings})
    *events, summary = engine.generate(PROMPT, config)
    return Run(PROMPT, config, tuple(events), summary, running=False)


def test_a_fork_starts_from_the_answer_before_the_token_and_the_chosen_one(engine):
    run = finished(engine, answer_prefix="Once")
    kept = [e for e in run.events if e.accepted]
    at = kept[5]
    prefix, fork = fork_prefix(run, 1, at.position, " dog")
    assert prefix == "Once" + "".join(e.text for e in kept[:5]) + " dog"
    assert fork == Fork(parent=1, position=at.position, was=at.text, chosen=" dog")


def test_a_fork_is_refused_in_words_for_a_run_still_writing_or_a_position_it_lacks(engine):
    run = finished(engine)
    with pytest.raises(ValueError, match="finish"):
        fork_prefix(Run(PROMPT, run.config, run.events), 1, 0, "x")
    with pytest.raises(ValueError, match="no token at position 999"):
        fork_prefix(run, 1, 999, "x")
    for position, chosen in ((None, "x"), ("3", "x"), (True, "x"), (0, ""), (0, None)):
        with pytest.raises(ValueError, match="choose a token"):
            fork_prefix(run, 1, position, chosen)
    with pytest.raises(ValueError):
        fork_prefix(None, 1, 0, "x")


def test_a_greedy_fork_with_the_runs_own_token_writes_the_runs_text(engine):
    run = finished(engine, policy="cascade", threshold=5.0)
    kept = [e for e in run.events if e.accepted]
    for i in (1, 4, 9):
        prefix, _ = fork_prefix(run, 1, kept[i].position, kept[i].text)
        again = finished(engine, policy="cascade", threshold=5.0, answer_prefix=prefix,
                         max_tokens=24 - (i + 1))
        assert prefix + again.summary.text == run.summary.text


def test_a_fork_with_another_token_writes_on_from_that_text_as_given(engine):
    run = finished(engine, policy="target")
    kept = [e for e in run.events if e.accepted]
    alternative = next(text for text, _ in kept[3].target_top if text != kept[3].text)
    prefix, _ = fork_prefix(run, 1, kept[3].position, alternative)
    forked = finished(engine, policy="target", answer_prefix=prefix, max_tokens=8)
    # The big model's own greedy continuation of the prompt and that text, read as context: the given
    # start is read, never written.
    context = engine.encode(PROMPT, chat=False, answer_prefix=prefix)
    written = []
    with engine.pair.lock:
        engine.pair.target.clear()
        for _ in range(8):
            written.append(int(np.argmax(engine.pair.target.advance(context + written, 1)[0])))
            if engine.pair.is_end_of_generation(written[-1]):
                break
    assert [e.token_id for e in forked.events if e.accepted] == written
    assert forked.summary.answer_prefix == prefix


def test_branches_are_numbered_say_where_they_forked_and_update_in_place(engine):
    first = finished(engine)
    branches, radio, current, fork = record_branch(first, [], None)
    assert [b.number for b in branches] == [1] and current == 1 and radio["visible"] is False
    pending = Fork(parent=1, position=4, was=" sat", chosen=" lay")
    second = finished(engine, answer_prefix=" lay")
    branches, radio, current, fork = record_branch(second, branches, pending)
    assert current == 2 and fork is None and radio["visible"] is True
    assert radio["choices"][1] == "2 · fork of 1 at token 4: “ sat” → “ lay”"
    assert radio["value"] == radio["choices"][1]
    # The same run again (stopped, or compared): in its place, not a new branch.
    compared = Run(second.prompt, second.config, second.events, second.summary, running=False,
                   comparison=first.summary, id=second.id)
    branches, _, current, _ = record_branch(compared, branches, None)
    assert len(branches) == 2 and branches[1].run.comparison is first.summary and current == 2
    # A failed run (no run) leaves the list as it was.
    assert record_branch(None, branches, None)[0] == branches


def test_the_list_keeps_the_latest_branches_and_says_how_many_it_let_go(engine):
    run = finished(engine)
    branches: list[Branch] = []
    for i in range(MAX_BRANCHES + 3):
        branches, radio, current, _ = record_branch(Run(PROMPT, run.config, run.events, run.summary, running=False),
                                                    branches, None)
    assert len(branches) == MAX_BRANCHES and branches[0].number == 4 and current == MAX_BRANCHES + 3
    assert "3" in radio["info"]  # how many were let go (its words: tests/snapshots/forks.txt)


def test_showing_a_branch_brings_back_its_text_chart_and_numbers_without_generating(engine):
    first, second = finished(engine), finished(engine, answer_prefix=" lay")
    branches = record_branch(first, [], None)[0]
    branches = record_branch(second, branches, Fork(1, 2, "a", "b"))[0]
    values = show_branch(branches[0].label, branches)
    shown = dict(zip(BRANCH_OUTPUTS + ("current",), values))
    assert shown["run"] is first and shown["current"] == 1
    assert shown["plain_text"] == first.answer
    assert json.loads(shown["chart"].plot)["data"]
    assert show_branch("no such branch", branches)[-1] is not None  # left as it is (a skip)


def test_twenty_long_branches_keep_the_page_quick(engine):
    # 20 branches of 500 tokens each (with both models' alternatives): recording each and showing each again
    # is the page's work only. A speed bound stays here because a visitor waits on it: 0.4 s for all of it
    # on an idle 2-core machine, so 5 s holds on a busy one and still catches work that grows with the branches.
    base = finished(engine, max_tokens=50)
    events = tuple(dataclasses.replace(e, position=e.position + 50 * i) for i in range(10) for e in base.events)
    branches: list[Branch] = []
    started = time.perf_counter()
    for i in range(20):
        run = Run(PROMPT, base.config, events, base.summary, running=False)
        branches, *_ = record_branch(run, branches, Fork(i, 3, "a", "b") if i else None)
    for branch in branches:
        show_branch(branch.label, branches)
    took = time.perf_counter() - started
    assert took < 5.0, f"recording and showing 20 branches took {took:.2f} s"


# ---- what a branch's label says ----------------------------------------------------------------------

def asked(prompt: str = PROMPT, **settings) -> Run:
    """A run as the list sees it: what it asked (no events needed)."""
    return Run(prompt, PAGE_START.replace(**settings), running=False)


@pytest.mark.parametrize("before, run, words", [
    (None, asked(), f"“{PROMPT}”"),
    (asked(), asked(), "the same request again"),
    (asked(), asked(budget=0.2), "perplexity, 20% share"),  # the page's start: a share
    (asked(), asked(rule="margin"), "margin, 10% share"),
    (asked(), asked(budget=None, threshold=3.0), "perplexity 3"),  # "Set a threshold instead"
    (asked(), asked(budget=None, threshold=5.0), "perplexity 5"),
    (asked(budget=None), asked(budget=None, rule="margin", threshold=0.1), "margin 0.1"),
    (asked(budget=None), asked(budget=None, threshold=5.0), "the same request again"),
    (asked(), asked(threshold=0.2), "the same request again"),  # a share's run never reads its threshold
    (asked(), asked(policy="speculative", k=2), "speculative, k 2"),
    (asked(), asked(policy="target", threshold=0.3), "target"),  # the big model alone reads no rule
    (asked(), asked("Write a haiku", max_tokens=64), "“Write a haiku”, most tokens 64"),
    (asked(), asked(chat=False, temperature=0.7, seed=3), "raw, temperature 0.7, seed 3"),
    (asked(), asked(system="Be brief.", answer_prefix="```python"), "system message “Be brief.”, starts with “```python”"),
    (asked(), asked("words " * 30), "“" + " ".join(["words"] * 6) + "…”"),  # cut after a whole word
])
def test_a_branch_is_labelled_by_what_it_asked_differently_from_the_one_before(before, run, words):
    assert what_differs(before, run) == words


def test_the_list_labels_each_branch_by_its_change_a_fork_by_its_token_a_follow_up_by_its_question():
    first, other = asked(), asked(budget=None, threshold=3.0)
    branches = record_branch(first, [], None)[0]
    branches = record_branch(other, branches, None)[0]
    forked = asked(budget=None, threshold=3.0, answer_prefix="The cat lay")
    branches = record_branch(forked, branches, Fork(2, 3, " sat", " lay"))[0]
    followup = Run("And then?", first.config.replace(history=(("user", PROMPT), ("assistant", "x"))), running=False,
                   earlier=(Turn(PROMPT, "x", run=other),))
    branches, radio, _, _ = record_branch(followup, branches, None)
    assert radio["choices"] == [f"1 · “{PROMPT}”", "2 · perplexity 3", "3 · fork of 2 at token 3: “ sat” → “ lay”",
                                "4 · follow-up to 2: And then?"]
    assert PROMPT not in " ".join(radio["choices"][1:])  # the prompt is not repeated


# ---- a fork writes with its run's own settings -------------------------------------------------------------

def shown_controls(run: Run, **moved) -> dict:
    """The controls as a visitor left them after `run`: its request, with the controls in `moved` changed."""
    config = run.config
    shown = {**page_defaults(), "prompt": run.prompt, "mode": "chat" if config.chat else "raw",
             **{name: getattr(config, name) for name in ("policy", "rule", "threshold", "budget", "k", "max_tokens",
                                                          "temperature", "seed")}}
    return {**shown, **moved}


def test_a_fork_uses_its_runs_settings_and_names_the_controls_that_showed_others(engine):
    run = finished(engine, rule="perplexity", threshold=5.0)
    at = [e for e in run.events if e.accepted][4]
    values, fork, note = fork_request(run, 1, at.position, " dog", shown_controls(run, threshold=20.0))
    assert values["threshold"] == 5.0 and values["rule"] == "perplexity" and values["mode"] == "raw"
    assert values["prompt"] == PROMPT and values["answer_prefix"].endswith(" dog") and fork.chosen == " dog"
    assert "5" in note and "20" in note  # the run's threshold, and the one the slider showed
    # Nothing moved: nothing said.
    assert fork_request(run, 1, at.position, " dog", shown_controls(run))[2] is None
    # Another rule chosen for a what-if, a new prompt typed, more tokens asked: each named, the run's first.
    _, _, note = fork_request(run, 1, at.position, " dog", shown_controls(
        run, rule="entropy", threshold=1.5, prompt="Something else", max_tokens=64))
    assert note.index("perplexity") < note.index("entropy") and "1.5" in note  # the run's first
    assert "prompt" in note and note.index("24") < note.index("64")
    assert note.count("5, not") == 1  # the threshold told once, with its rule


def test_the_fork_handler_sets_back_the_controls_that_moved_and_says_so(engine, monkeypatch):
    run = finished(engine, rule="perplexity", threshold=5.0)
    at = [e for e in run.events if e.accepted][4]
    said = []
    monkeypatch.setattr(branches_module.gr, "Info", lambda message, **kw: said.append(message))
    shown = shown_controls(run, rule="margin", threshold=0.3)
    values = fork_start(run, 1, gr.SelectData(None, {"index": at.position, "value": " dog"}),
                        *(shown[name] for name in GENERATE_INPUTS))
    updates, fork = dict(zip(GENERATE_INPUTS, values[:-1])), values[-1]
    assert updates["rule"]["value"] == "perplexity"
    # The slider takes back the run's rule's units and the run's threshold.
    assert updates["threshold"]["value"] == 5.0 and updates["threshold"]["label"] == "Threshold (perplexity)"
    assert updates["answer_prefix"]["value"].endswith(" dog") and fork == Fork(1, at.position, at.text, " dog")
    assert updates["k"] == gr.skip()  # unmoved controls are left alone (no what-if redrawn for them)
    assert len(said) == 1 and said[0].index("perplexity") < said[0].index("margin") and "0.3" in said[0]


def test_a_fork_writes_with_its_runs_share_or_threshold_and_names_the_one_the_controls_showed(engine):
    run = finished(engine, rule="margin", budget=0.2)
    at = [e for e in run.events if e.accepted][4]
    values, _, note = fork_request(run, 1, at.position, " dog", shown_controls(run, budget=0.5, threshold=0.3))
    assert values["budget"] == 0.2
    assert note.index("20%") < note.index("50%")
    assert "threshold" not in note  # a share's run never read its threshold
    _, _, note = fork_request(run, 1, at.position, " dog", shown_controls(run, budget=None))
    assert "20%" in note and "threshold" in note
    by_threshold = finished(engine, rule="perplexity", threshold=5.0)
    values, _, note = fork_request(by_threshold, 1, at.position, " dog", shown_controls(by_threshold, budget=0.1))
    assert values["budget"] is None and note.index("5") < note.index("10%")


# ---- the words of forks and of the list: one snapshot ----------------------------------------------------

def test_the_fork_notes_and_the_lists_words_read_as_kept(engine):
    run = finished(engine, rule="perplexity", threshold=5.0)
    shared = finished(engine, rule="margin", budget=0.2)
    at = [e for e in run.events if e.accepted][4].position
    branches: list[Branch] = []
    for _ in range(MAX_BRANCHES + 3):
        branches, radio, _, _ = record_branch(Run(PROMPT, run.config, run.events, run.summary, running=False),
                                              branches, None)
    cases = [
        ("the slider moved", fork_request(run, 1, at, " dog", shown_controls(run, threshold=20.0))[2]),
        ("another rule, a new prompt, more tokens", fork_request(run, 1, at, " dog", shown_controls(
            run, rule="entropy", threshold=1.5, prompt="Something else", max_tokens=64))[2]),
        ("a share's run, another share shown", fork_request(shared, 1, at, " dog",
                                                            shown_controls(shared, budget=0.5, threshold=0.3))[2]),
        ("a share's run, a threshold shown", fork_request(shared, 1, at, " dog", shown_controls(shared, budget=None))[2]),
        ("a threshold's run, a share shown", fork_request(run, 1, at, " dog", shown_controls(run, budget=0.1))[2]),
        ("the list, three let go", radio["info"]),
    ]
    assert_snapshot("forks", "".join(f"## {label}\n{words}\n\n" for label, words in cases))
