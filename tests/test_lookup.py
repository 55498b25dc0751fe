"""Prompt lookup: the n-gram search on values, then the `lookup` and `lookup+draft` policies on toy models.

The toy models are f32, so greedy lookup must give the target's own text exactly, as speculative
decoding does. Their random weights do not copy a prompt as real models do, but they fall into loops
("ithithith…" makes the related target write "kilkilkil…"), which lookup then copies; the prompts below
are chosen so that lookup's proposals are both kept and rejected.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

from cascade.engine import sampling as S
from cascade.engine.analysis import Routing, RunView
from cascade.cli.generate import MAGENTA, _render
from cascade.engine.events import ModelStats, TokenEvent
from cascade.engine.lookup import MIN_NGRAM, continuation
from cascade.ui import chart, sentences, tokens
from cascade.ui.generate import SETTINGS, request_config
from cascade.ui.runfile import read_run, run_html
from cascade.ui.style import PURPLE

from .helpers import PAGE_DEFAULTS, accepted_ids, cascade, json_lines, run
from .recorded import AT_5

# Raw prompts whose texts repeat: each gives the toy targets some lookup proposals they keep.
REPEATING = ["ithithithith", "The dog. The dog. The dog. The dog.",
             "My name is A. My name is A. My name is A. My name is"]
KINDS = ["partly", "rarely"]  # two different targets (lookup never calls the draft)


# ---- the n-gram search, on values ----------------------------------------------------------------

@pytest.mark.parametrize("tokens, max_n, min_n, k, expected", [
    ([1, 2, 3, 4], 3, 1, 4, []),  # no token occurs twice: no match
    ([], 3, 1, 4, []),
    ([7], 3, 1, 4, []),
    ([1, 2, 3], 3, 1, 4, []),  # the text's own end is no earlier occurrence
    ([1, 2, 3, 9, 6, 1, 2, 3], 3, 1, 2, [9, 6]),  # the longest suffix, k tokens of what followed it
    # A 2-gram match ([1, 2] at the start) wins over a more recent 1-gram one ([2] before 8).
    ([5, 1, 2, 9, 7, 2, 8, 1, 2], 3, 1, 4, [9, 7, 2, 8]),
    # Of equal matches, the most recent; its copy reads on into itself past the text's end.
    ([1, 2, 7, 1, 2, 8, 1, 2], 3, 1, 4, [8, 1, 2, 8]),
    # max_n bounds the suffix: with 3, [1, 2, 3] is found; with 2, the more recent [2, 3].
    ([1, 2, 3, 8, 0, 2, 3, 9, 1, 2, 3], 3, 1, 1, [8]),
    ([1, 2, 3, 8, 0, 2, 3, 9, 1, 2, 3], 2, 1, 1, [9]),
    # Overlapping matches: a run of one token, a period-2 text.
    ([5, 5, 5, 5], 3, 1, 3, [5, 5, 5]),
    ([1, 2, 1, 2, 1], 3, 1, 4, [2, 1, 2, 1]),
    # A match at the very end: the occurrence right before the last token, whose copy is all overlap.
    ([9, 7, 7], 3, 1, 3, [7, 7, 7]),
    ([3, 4, 3], 3, 1, 3, [4, 3, 4]),
    # min_n: a single shared token proposes only when 1-grams may match.
    ([1, 9, 2, 1], 3, 1, 4, [9, 2, 1, 9]),
    ([1, 9, 2, 1], 3, 2, 4, []),
    ([1, 2, 9, 4, 1, 2], 3, 2, 1, [9]),
    ([1, 2, 9], 3, 1, 0, []),  # k = 0 proposes nothing
])
def test_continuation_follows_the_most_recent_longest_match(tokens, max_n, min_n, k, expected):
    assert continuation(tokens, max_n, min_n, k) == expected


def test_continuation_accepts_any_sequence_of_ints():
    assert continuation(np.array([4, 5, 4]), 3, 1, 2) == [5, 4]
    assert all(type(t) is int for t in continuation(np.array([4, 5, 4]), 3, 1, 2))


# ---- greedy: exactly the target's text -----------------------------------------------------------

@pytest.fixture(scope="module")
def target_greedy(pair_engines):
    return {(kind, prompt): accepted_ids(run(pair_engines[kind], prompt, policy="target", max_tokens=40,
                                             chat=False)[0])
            for kind in KINDS for prompt in REPEATING}


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_lookup_writes_exactly_the_targets_text(pair_engines, target_greedy, kind):
    engine = pair_engines[kind]
    kept = rejected = 0
    for prompt in REPEATING:
        events, s = run(engine, prompt, policy="lookup", k=4, max_tokens=40, chat=False)
        assert accepted_ids(events) == target_greedy[(kind, prompt)], prompt
        lookup_events = [e for e in events if e.source == "lookup"]
        assert {e.status for e in lookup_events} <= {"accepted", "rejected"}
        assert all(e.draft_ppl is None and e.target_ppl is not None for e in lookup_events)
        # The summary counts what the events say.
        accepted = [e for e in events if e.accepted]
        c = s.counts
        assert c.n_tokens == len(accepted) == c.n_draft_tokens + c.n_target_tokens + c.n_lookup_tokens
        assert c.n_draft_tokens == c.n_drafted == 0
        assert c.n_lookup_tokens == sum(e.accepted for e in lookup_events)
        assert c.n_lookup_proposed == len(lookup_events) and c.n_rejected == sum(not e.accepted for e in lookup_events)
        assert c.acceptance_rate == pytest.approx(c.n_lookup_tokens / c.n_lookup_proposed)
        kept, rejected = kept + c.n_lookup_tokens, rejected + c.n_rejected
    assert kept + rejected > 0, "lookup must propose something for this test to mean anything"
    if kind == "partly":  # the toy target that falls into loops: there lookup's proposals are kept and rejected
        assert kept > 0 and rejected > 0, "lookup's proposals must be both kept and rejected for this test to mean anything"


@pytest.mark.parametrize("lookup_ngram, k", [(1, 2), (6, 8)])
def test_greedy_lookup_at_other_settings_is_still_the_target(pair_engines, target_greedy, lookup_ngram, k):
    events, _ = run(pair_engines["partly"], REPEATING[0], policy="lookup", k=k, lookup_ngram=lookup_ngram,
                    max_tokens=40, chat=False)
    assert accepted_ids(events) == target_greedy[("partly", REPEATING[0])]


def test_greedy_lookup_then_draft_is_the_target_and_uses_both(pair_engines, target_greedy):
    engine = pair_engines["partly"]
    for prompt in REPEATING[:2]:
        events, s = run(engine, prompt, policy="lookup+draft", k=3, threshold=1e6, max_tokens=40, chat=False)
        assert accepted_ids(events) == target_greedy[("partly", prompt)], prompt
        c = s.counts
        assert c.n_lookup_tokens > 0 and c.n_draft_tokens > 0 and s.work.draft.tokens_evaluated > 0
        assert c.n_tokens == c.n_draft_tokens + c.n_target_tokens + c.n_lookup_tokens
        assert c.acceptance_rate == pytest.approx((c.n_draft_tokens + c.n_lookup_tokens)
                                                  / (c.n_drafted + c.n_lookup_proposed))


# ---- what the models read --------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_lookup_never_calls_the_draft_and_reads_no_token_twice(pair_engines, temperature):
    engine = pair_engines["partly"]
    for prompt in REPEATING:
        draft_before = engine.pair.draft.stats
        events, s = run(engine, prompt, policy="lookup", k=4, max_tokens=40, chat=False, temperature=temperature,
                        seed=3)
        assert engine.pair.draft.stats == draft_before and engine.pair.draft.tokens == []
        assert s.work.draft == ModelStats() and "draft" not in {m for m, sizes in s.work.call_sizes.items() if sizes}
        t = s.work.target
        assert t.tokens_discarded <= s.counts.n_rejected
        assert t.tokens_evaluated <= s.prompt_tokens + s.counts.n_tokens + t.tokens_discarded
        # The cache holds only the text afterwards: no rejected proposal stays in it.
        text = engine.encode(prompt, False) + accepted_ids(events)
        assert engine.pair.target.tokens == text[:len(engine.pair.target.tokens)]


def test_lookup_then_draft_reads_no_token_twice(pair_engines):
    engine = pair_engines["partly"]
    for temperature in (0.0, 0.8):
        _, s = run(engine, REPEATING[1], policy="lookup+draft", k=3, max_tokens=40, chat=False,
                   temperature=temperature, seed=5)
        for stats in (s.work.draft, s.work.target):
            assert stats.tokens_discarded <= s.counts.n_rejected + s.counts.n_escalated
            assert stats.tokens_evaluated <= s.prompt_tokens + s.counts.n_tokens + stats.tokens_discarded


# ---- no match: the target writes alone -------------------------------------------------------------

def test_without_a_repeated_token_the_target_writes_alone(pair_engines):
    engine = pair_engines["partly"]
    prompt = "My name is A"
    prompt_tokens = engine.encode(prompt, chat=False)
    assert len(set(prompt_tokens)) == len(prompt_tokens) and continuation(prompt_tokens, 3, MIN_NGRAM, 4) == []
    events, s = run(engine, prompt, policy="lookup", max_tokens=1, chat=False)
    assert [(e.source, e.status) for e in events] == [("target", "accepted")]
    assert s.counts.n_lookup_proposed == 0 and s.work.target.tokens_evaluated == len(prompt_tokens)
    assert s.work.call_sizes["target"] == {len(prompt_tokens): 1}
    # Over a longer text lookup joins in once the text repeats itself, and the text is still the target's.
    target_events, _ = run(engine, prompt, policy="target", max_tokens=30, chat=False)
    events, s = run(engine, prompt, policy="lookup", max_tokens=30, chat=False)
    assert accepted_ids(events) == accepted_ids(target_events)
    assert events[0].source == "target" and events[0].accepted  # the first round found nothing to copy


# ---- sampling: the target's distribution, exactly ----------------------------------------------------

@pytest.mark.parametrize("k", [1, 3])
def test_lookup_sampling_draws_each_token_by_the_rejection_rule(pair_engines, k):
    """Lookup's proposal x is certain (q is its one-hot), so the rejection rule keeps it with probability
    p(x) and otherwise draws from p without x. For each seed, the engine's first token is the one the rule
    gives by hand from the target's distribution and the engine's random streams (target, accept)."""
    engine = pair_engines["partly"]
    sampling = S.Sampling(temperature=1.0, top_k=6)
    prompt = " and thenou it was and then"  # ends as it began: lookup proposes what followed " and then"
    prompt_tokens = engine.encode(prompt, chat=False)
    x = continuation(prompt_tokens, 3, MIN_NGRAM, 1)[0]
    with engine.pair.lock:
        p = S.distribution(engine.pair.target.advance(prompt_tokens, 1)[0], sampling)
    assert 0.2 < p[x] < 0.8, "the target must be unsure of lookup's proposal for this test to mean anything"
    outcomes = set()
    for seed in range(40):
        _, target_rng, accept_rng = (np.random.default_rng([seed, i]) for i in range(3))
        accepted = S.accept_draft(p[x], 1.0, accept_rng.random())
        expected = x if accepted else S.draw(S.residual(p, S.one_hot(x, len(p))), target_rng)
        events, _ = run(engine, prompt, policy="lookup", temperature=1.0, top_k=6, k=k, max_tokens=k, seed=seed,
                        chat=False)
        assert events[0].source == "lookup" and events[0].token_id == x
        assert accepted_ids(events)[0] == expected, f"seed {seed}"
        assert accepted or expected != x  # the residual never draws the rejected token again
        outcomes.add(accepted)
    assert outcomes == {True, False}, "both the acceptance and the residual draw must be exercised"


# ---- what the page, the run file and the terminal show -------------------------------------------

@pytest.fixture(scope="module")
def lookup_run(pair_engines):
    events, s = run(pair_engines["partly"], REPEATING[0], policy="lookup", max_tokens=40, chat=False)
    assert s.counts.n_lookup_tokens > 0 and s.counts.n_rejected > 0 and s.counts.n_target_tokens > 0
    return events, s


def test_the_text_shows_copied_tokens_in_their_own_colour_with_a_legend(lookup_run):
    events, s = lookup_run
    panel = tokens.text_panel(Routing(events), RunView(AT_5))
    copied = re.findall(r'<span class="tok lookup" title="([^"]*)"', panel)
    assert len(copied) == sum(e.accepted and e.source == "lookup" and e.text != "" for e in events)
    assert "copied from earlier in the text (prompt lookup), checked by the big model" in html.unescape(copied[0])
    assert PURPLE in panel and 'class="legend-lookup"' in panel
    legend = re.search(r'<div class="legend".*?</div>', panel).group(0)
    assert "copied from earlier in the text (prompt lookup)" in legend
    struck = re.findall(r'<s class="tok discarded" title="([^"]*)"', panel)
    assert any("proposed by prompt lookup" in html.unescape(t) for t in struck)
    # A cascade run's legend says nothing of lookup.
    without = Routing([e for e in events if e.source != "lookup"])
    assert "legend-lookup" not in tokens.text_panel(without, RunView(AT_5))


def test_the_chart_plots_copied_tokens_apart_and_the_sentences_count_them(lookup_run):
    events, s = lookup_run
    spec = chart.figure_spec(Routing(events), RunView(AT_5))
    points = [t for t in spec["data"] if t["meta"] == "tokens"]
    assert sum(len(t["x"]) for t in points) == s.counts.n_tokens
    (copied,) = [t for t in points if "prompt lookup" in t["name"]]
    assert len(copied["x"]) == s.counts.n_lookup_tokens and copied["marker"]["color"] == PURPLE
    assert "copied from earlier in the text" in html.unescape(copied["text"][0])
    sentence = sentences.summary_sentence(s)
    assert f"{s.counts.n_target_tokens} of {s.counts.n_tokens} tokens" in sentence
    assert f"and {s.counts.n_lookup_tokens} were copied from the text (purple)" in sentence
    assert f"Prompt lookup proposed {s.counts.n_lookup_proposed} tokens" in sentences.summary_details(s)
    assert f"{s.counts.n_lookup_tokens} were copied from the text" in sentences.stopped_sentence(events)


def test_a_run_file_keeps_a_lookup_run(lookup_run):
    from cascade import GenerationConfig

    events, s = lookup_run
    config = GenerationConfig(policy="lookup", max_tokens=40, chat=False)
    document = run_html(REPEATING[0], config, events, s, models={"draft": "d", "target": "t"}, created="now")
    assert "lookupcolour" in document and "Prompt lookup&#x27;s proposals kept" in document
    assert "Longest n-gram looked up" in document
    record = read_run(document)
    assert record["summary"]["n_lookup_tokens"] == s.counts.n_lookup_tokens
    assert sum(e["source"] == "lookup" for e in record["events"]) == s.counts.n_lookup_proposed


def test_the_page_takes_the_lookup_policies_and_their_setting():
    assert SETTINGS.index("lookup_ngram") > SETTINGS.index("k") and "lookup_ngram" in PAGE_DEFAULTS
    settings = {name: PAGE_DEFAULTS[name] for name in SETTINGS}
    for policy in ("lookup", "lookup+draft"):
        config = request_config("raw", {**settings, "policy": policy, "lookup_ngram": "2"})
        assert (config.policy, config.lookup_ngram) == (policy, 2)
    with pytest.raises(ValueError, match="lookup_ngram must be between 1 and 16, got 0"):
        request_config("raw", {**settings, "policy": "lookup", "lookup_ngram": 0})


def test_the_terminal_paints_copied_tokens_in_their_own_colour(toy):
    token = TokenEvent(0, 1, "kil", "lookup", "accepted", None, 1.2, 0.1)
    assert _render(token, color=True, show_discarded=False) == f"{MAGENTA}kil\033[0m"
    assert _render(token, color=False, show_discarded=False) == "kil"
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--policy", "lookup",
                "--max-tokens", "24", "--raw", "--json", REPEATING[0])
    assert r.returncode == 0, r.stderr
    events, summary = json_lines(r.stdout)
    assert summary["policy"] == "lookup" and summary["draft"]["tokens_evaluated"] == 0
    assert summary["n_lookup_tokens"] == sum(e["source"] == "lookup" and e["status"] == "accepted" for e in events) > 0
