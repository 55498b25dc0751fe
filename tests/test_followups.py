"""Follow-up questions (`cascade.ui.conversation`, the handlers' follow-up and branches): the earlier turns
as the models read them, as the page shows them, and in a link, a run file and the command line; a
conversation past the context is refused by name, and the page goes on."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cascade.engine.prompt import PromptError, encode_prompt, parse_history, render_chat
from cascade.ui import conversation
from cascade.ui.conversation import LINK_LIMIT, Turn, conversation_of, history_json, turns_of
from cascade.ui.branches import MAX_BRANCHES, REQUEST_CONTROLS, record_branch, show_branch, turn_branch
from cascade.ui.followups import conversation_line, followup_box, followup_request
from cascade.ui.generate import compare_updates, generate_updates, request_config
from cascade.ui.run import KEEP, Run, Update, more_markdown
from cascade.ui.link import copy_link_js, read_link
from cascade.ui.runfile import read_run, run_html

from .helpers import PAGE_DEFAULTS, cascade, engine_for, json_lines

QUESTION, FOLLOW_UP = "Name a colour.", "And another one?"


@pytest.fixture(scope="module")
def engine(toy):
    return engine_for(toy.small, toy.related)


def settings(**changes) -> dict:
    values = {k: v for k, v in PAGE_DEFAULTS.items() if k not in ("prompt", "mode")}
    return {**values, "max_tokens": 12, **changes}


class NoProgress:
    def __call__(self, *args, **kwargs):
        pass


def page_run(engine, prompt: str, shown: Run | None = None, **changes) -> tuple[list[Update], Run]:
    """The page's generate handler on `prompt` in chat mode: its updates, and the run it ends with."""
    updates = [u for u in generate_updates(lambda progress: engine, prompt, "chat", settings(**changes), NoProgress(),
                                           shown) if u.text_html is not KEEP]  # the first step lets Gradio cancel
    return updates, updates[-1].run


def two_turns(engine) -> tuple[Run, str, Run]:
    """A question, and the follow-up asked under its answer: (the first run, the conversation's JSON, the
    follow-up's run)."""
    _, first = page_run(engine, QUESTION)
    _, history = followup_request(FOLLOW_UP, first)
    _, second = page_run(engine, FOLLOW_UP, first, history=history)
    return first, history, second


# ---- what the models read ---------------------------------------------------------------------------

def test_a_follow_ups_prompt_is_the_chat_template_applied_to_the_whole_conversation(engine):
    _, first = page_run(engine, QUESTION)
    prompt, history = followup_request(FOLLOW_UP, first)
    turns = parse_history(history)
    assert prompt == FOLLOW_UP and turns == (("user", QUESTION), ("assistant", first.answer))
    llm = engine.pair.target.llm
    whole = render_chat(llm, FOLLOW_UP, history=turns)  # the template over every message, as one text
    assert QUESTION in whole and first.answer in whole and whole.rstrip().endswith("assistant")
    expected = llm.tokenize(whole.encode(), add_bos=False, special=True)
    assert engine.encode(FOLLOW_UP, True, history=turns) == expected
    _, second = page_run(engine, prompt, first, history=history)
    assert second.summary.prompt_tokens == len(expected)
    assert second.config.history == turns and second.earlier == (Turn(QUESTION, first.answer, first),)


def test_the_answers_given_start_is_part_of_the_conversation_and_a_follow_up_starts_afresh(engine):
    _, first = page_run(engine, QUESTION, answer_prefix="Red, or")
    _, history = followup_request(FOLLOW_UP, first)
    assert parse_history(history)[-1] == ("assistant", "Red, or" + first.text)


# ---- what is refused, in words ----------------------------------------------------------------------

def test_a_follow_up_is_refused_without_a_finished_chat_answer_or_a_question(engine):
    _, first = page_run(engine, QUESTION)
    for run, question, words in [
        (None, FOLLOW_UP, "generate an answer first"),
        (replace(first, running=True), FOLLOW_UP, "let the answer finish (or stop it)"),
        (replace(first, config=first.config.replace(chat=False)), FOLLOW_UP, "need chat mode"),
        (first, "   ", "type a follow-up question first"),
        (first, None, "type a follow-up question first"),
    ]:
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            followup_request(question, run)
    assert followup_box(first)["visible"] is True
    assert followup_box(replace(first, running=True))["visible"] is False
    assert followup_box(replace(first, config=first.config.replace(chat=False)))["visible"] is False
    assert followup_box(None)["visible"] is False


@pytest.mark.parametrize("history, words", [
    ("[[", "not readable (not JSON"),
    ('{"user": "hi"}', "must be a list of [role, text] pairs"),
    ('[["user"]]', "message 1 is not a [role, text] pair"),
    ('[["assistant", "hi"], ["user", "hello"]]', "message 1 must be the user's"),
    ('[["user", "hi"]]', "ends with a question that has no answer"),
    ('[["user", "hi"], ["system", "x"]]', "message 2 must be the assistant's"),
])
def test_a_malformed_conversation_is_refused_by_what_is_wrong(history, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("(", r"\(")):
        parse_history(history)


def test_a_conversation_in_raw_mode_is_refused_in_words():
    with pytest.raises(ValueError, match="needs chat mode"):
        request_config("raw", settings(history=history_json([("user", "a"), ("assistant", "b")])))


def test_a_conversation_past_the_context_is_refused_naming_the_limit_and_the_page_goes_on(engine):
    n_ctx = engine.pair.config.n_ctx
    long_answer = " ".join(["blue"] * (n_ctx + 100))
    history = history_json([("user", QUESTION), ("assistant", long_answer)])
    with pytest.raises(PromptError, match=f"the context holds {n_ctx}"):
        engine.encode_request(FOLLOW_UP, True, history=parse_history(history))
    updates, refused = page_run(engine, FOLLOW_UP, history=history)
    message = updates[-1].summary
    assert refused is None and "The conversation is" in message and f"the context holds {n_ctx}" in message
    assert "start a new conversation" in message and "2 earlier messages" in message
    # Nothing was cut short without a word, and the next request is answered as if nothing happened.
    _, fine = page_run(engine, QUESTION)
    assert fine.summary is not None and fine.summary.counts.n_tokens > 0


def test_an_answer_the_context_cuts_short_says_so(engine):
    n_ctx = engine.pair.config.n_ctx

    def room(words: int) -> int:
        turns = (("user", QUESTION), ("assistant", " green" * words))
        return n_ctx - len(encode_prompt(engine.pair.target.llm, FOLLOW_UP, True, history=turns).tokens)

    # A conversation that leaves room for a few tokens only: the answer stops there, and says why.
    words = 1
    while room(words * 2) > 40:
        words *= 2
    while room(words + 1) > 20:
        words += 1
    history = history_json([("user", QUESTION), ("assistant", " green" * words)])
    assert 0 < room(words) < 64
    updates, run = page_run(engine, FOLLOW_UP, history=history, max_tokens=64)
    assert run.summary.stop_reason == "context_full" and run.summary.counts.n_tokens == room(words)
    assert "the context was full" in more_markdown(run)  # in the fold under the summary's first line


# ---- what the page shows ----------------------------------------------------------------------------

def test_earlier_turns_keep_their_colours_above_the_latest_answer_and_the_chart_is_the_latest(engine):
    _, first = page_run(engine, QUESTION, rule="perplexity", threshold=5.0)
    _, history = followup_request(FOLLOW_UP, first)
    # Asking sets the conversation: its line by the prompt, and the earlier turns' panel, with their colours.
    row, words, panel = conversation_line(history, first)
    assert row["visible"] and "1 earlier question and its answer" in words and panel["visible"]
    earlier = panel["value"]
    updates, second = page_run(engine, FOLLOW_UP, first, history=history)
    latest = updates[-1].text_html
    assert 'class="cascade-turn cascade-earlier"' in earlier and "Question 1" in earlier and QUESTION in earlier
    assert 'class="cascade-turn cascade-latest"' in latest and "Question 2" in latest and FOLLOW_UP in latest
    first_red = sum(e.source == "target" and e.accepted and bool(e.text) for e in first.events)
    assert earlier.count('class="tok red target"') == first_red
    assert earlier.count("data-alt=") > 0  # the earlier answer's hover lists travel with it
    # The chart's points are the latest answer's alone.
    traces = json.loads(updates[-1].chart.plot)["data"]
    points = sum(len(t["x"]) for t in traces if t.get("meta") == "tokens")
    assert 0 < points <= sum(e.accepted for e in second.events) < len(first.events) + points
    # The answer's pictures carry its own text alone: the earlier turns were drawn once, when asked.
    assert all("Question 2" in u.text_html and "cascade-earlier" not in u.text_html for u in updates)
    assert updates[-1].plain_text == second.answer
    # After it, the same conversation keeps the first run's colours (the run shown follows it); none clears it.
    assert conversation_line(history, second)[2]["value"] == earlier
    row, words, panel = conversation_line("", second)
    assert row["visible"] is False and words == "" and panel["visible"] is False
    assert "cannot be read" in conversation_line("[[", second)[1]


def test_text_in_a_conversation_is_escaped():
    html = (conversation.conversation_panel([Turn("<script>alert(1)</script>", "</div><b>x</b>")])
            + conversation.latest_html(2, "<img src=x onerror=alert(1)>", ""))
    assert "<script>" not in html and "<img" not in html and "</div><b>" not in html
    assert "&lt;script&gt;" in html and "&lt;img" in html and "its text alone" in html


def test_turns_keep_their_runs_only_while_the_conversation_is_theirs(engine):
    _, first = page_run(engine, QUESTION)
    history = conversation_of(first)
    assert turns_of(history, first)[0].run is first
    # The same conversation, asked again from the run that follows it: the turn is still the first run.
    _, second = page_run(engine, FOLLOW_UP, first, history=history_json(history))
    assert turns_of(history, second)[0].run is first
    # ...and while the follow-up is still being written (the page's run is the running one when the history
    # field's change is drawn): the turns it continues keep their runs, so their colours.
    assert turns_of(history, replace(second, running=True))[0].run is first
    # Another answer in the history (edited, or from a link): its text alone.
    edited = (history[0], ("assistant", first.answer + "!"))
    assert turns_of(edited, first) == (Turn(QUESTION, first.answer + "!"),)
    assert turns_of(history, None) == (Turn(QUESTION, first.answer),)


def test_a_follow_up_is_a_branch_that_names_the_answer_it_follows_and_brings_its_request_back(engine):
    first, history, second = two_turns(engine)
    branches, _, current, _ = record_branch(first, [], None)
    branches, listed, current, _ = record_branch(second, branches, None)
    assert current == 2 and branches[1].label == f"2 · follow-up to 1: {FOLLOW_UP}"
    assert listed["choices"][1] == branches[1].label
    shown = show_branch(branches[1].label, branches)
    assert shown[-len(REQUEST_CONTROLS):] == (FOLLOW_UP, "chat", "", "", history)
    assert "Question 2" in shown[0]
    back = show_branch(branches[0].label, branches)
    assert back[-len(REQUEST_CONTROLS):] == (QUESTION, "chat", "", "", "")
    assert "Question" not in back[0]


def test_comparing_a_follow_up_reads_the_big_models_text_after_the_same_conversation(engine):
    first, history, second = two_turns(engine)
    read = []

    class Spy:  # the engine, noting which conversation the rules' curves read the big model's text after
        def __getattr__(self, name):
            return getattr(engine, name)

        def teacher_force(self, *args, **kwargs):
            read.append(kwargs.get("history"))
            return engine.teacher_force(*args, **kwargs)

    updates = list(compare_updates(lambda progress: Spy(), second, NoProgress()))
    assert read == [second.config.history]
    *_, alone = engine.generate(FOLLOW_UP, second.config.replace(policy="target"))
    assert updates[-1].numbers["big_model_alone"]["text"] == alone.text


def test_an_earlier_turn_shows_its_own_branch_and_says_why_where_there_is_none(engine):
    first, history, second = two_turns(engine)
    branches, _, _, _ = record_branch(first, [], None)
    branches, _, _, _ = record_branch(second, branches, None)
    assert turn_branch(second, 1, branches) is branches[0]
    # The panel offers it for turns the page has the run of, and not for a link's.
    assert 'class="cascade-show-turn"' in conversation_line(history, second)[2]["value"]
    assert "cascade-show-turn" not in conversation_line(history, None)[2]["value"]
    for run, number, words in [(second, 2, "no such earlier turn"), (second, 0, "no such earlier turn"),
                               (second, "1", "no such earlier turn"), (None, 1, "no such earlier turn"),
                               (replace(second, earlier=(Turn(QUESTION, first.answer),)), 1, "came with a link"),
                               (second, 1, f"latest {MAX_BRANCHES} branches")]:
        with pytest.raises(ValueError, match=words):
            turn_branch(run, number, branches if "latest" not in words else branches[1:])


# ---- links, run files, the command line -------------------------------------------------------------

def test_a_link_carries_a_conversation_and_refuses_a_malformed_or_too_long_one():
    history = history_json([("user", QUESTION), ("assistant", "Blue.")])
    link = read_link({"prompt": FOLLOW_UP, "history": history})
    assert link.values["history"] == history and not link.problems
    bad = read_link({"prompt": FOLLOW_UP, "history": "[[1, 2]]"})
    assert "history" not in bad.values and "history: the conversation's message 1 is not" in bad.message()
    long = history_json([("user", QUESTION), ("assistant", "x" * 7000)])
    too_long = read_link({"prompt": FOLLOW_UP, "history": long})
    assert "history" not in too_long.values and "download the run instead" in too_long.message()
    raw = read_link({"prompt": FOLLOW_UP, "mode": "raw", "history": history})
    assert "history" not in raw.values and "chat mode" in raw.message()
    js = copy_link_js()
    assert f"limit = {LINK_LIMIT}" in js and "download the run instead" in js


def test_a_run_file_keeps_the_conversation_with_the_earlier_answers_colours(engine):
    first, history, second = two_turns(engine)
    document = run_html(second.prompt, second.config, second.events, second.summary, models={}, created="now",
                        earlier=second.earlier)
    record = read_run(document)
    assert record["settings"]["history"] == [["user", QUESTION], ["assistant", first.answer]]
    (turn,) = record["earlier"]
    assert turn["question"] == QUESTION and turn["answer"] == first.answer
    assert len(turn["events"]) == len(first.events) and turn["settings"]["threshold"] == first.config.threshold
    assert 'class="cascade-earlier-section"' in document and "The follow-up question" in document
    assert document.count("querySelector('.cascade-earlier-section')") == 1  # its hover, offline
    # Saved with its history alone (the command line's --save): the earlier turns as text.
    text_only = run_html(second.prompt, second.config, second.events, second.summary, models={}, created="now")
    assert read_run(text_only)["earlier"] == [{"question": QUESTION, "answer": first.answer, "settings": None,
                                               "events": None}]
    assert "its text alone" in text_only
    # An older file, with no conversation, still reads.
    plain = read_run(run_html(first.prompt, first.config, first.events, first.summary, models={}, created="now"))
    assert plain["earlier"] == [] and "cascade-earlier-section" not in run_html(
        first.prompt, first.config, first.events, first.summary, models={}, created="now")


def test_the_command_line_asks_a_follow_up_with_history(toy, engine):
    turns = (("user", QUESTION), ("assistant", "Blue."))
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--threads", "1", "--n-ctx", "1024",
                "--max-tokens", "8", "--history", history_json(turns), "--json", FOLLOW_UP)
    assert r.returncode == 0, r.stderr
    _, summary = json_lines(r.stdout)
    assert summary["prompt_tokens"] == len(engine.encode(FOLLOW_UP, True, history=turns))
    bad = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--history", "[[", "Hi")
    assert bad.returncode != 0 and "the conversation is not readable" in bad.stderr
