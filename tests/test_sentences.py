"""A run in sentences: the summary, a stopped run, and the comparison with the big model alone.

What a visitor reads is one snapshot, tests/snapshots/sentences.txt (`test_the_sentences_read_as_kept`);
the other tests check what each sentence holds: its numbers, and when it is said at all."""

from __future__ import annotations

import html
import re

import pytest

from cascade.engine.events import BudgetAccount, ModelStats, Quality, Work
from cascade.ui import diff, sentences

from .helpers import assert_snapshot
from .recorded import CASCADE, summary

# ---- every sentence, as a visitor reads it: one snapshot ---------------------------------------------

SHARED = dict(wall=6.4, rule="margin",
              budget=BudgetAccount(share=0.1, threshold=0.0612, source="the shipped calibration of this draft (toy)"))
NOTHING_JUDGED = dict(n=3, by_target=0, rule="margin", budget=BudgetAccount(share=0.1, threshold=None, source=""))
TIMED = dict(wall=6.4, first_token_s=0.62,
             work=Work(draft=ModelStats(seconds=2.1), target=ModelStats(calls=12, seconds=3.9)))
SCORED = dict(wall=6.4, quality=Quality(text_ppl_by_target=4.23, target_agreement=0.71, scoring_s=3.86))
ALONE_SCORED = dict(policy="target", by_target=80, quality=Quality(text_ppl_by_target=2, target_agreement=1.0))


def curve(rule, shares, agreements):
    from cascade.routing.curves import Curve

    return Curve(rule, tuple(shares), tuple(agreements), (None,) * len(shares))


CURVES = {"perplexity": curve("perplexity", (0, 0.31, 1), (0.5, 0.95, 1)),
          "entropy": curve("entropy", (0, 0.2, 1), (0.5, 0.9, 0.94)),
          "learned": curve("learned", (0, 0.18, 1), (0.5, 0.96, 1))}
ALONE = summary(text="a <cat> lay", policy="target", by_target=80, wall=4.0)


def surface() -> list[tuple[str, object]]:
    """Every sentence the page writes about a run, over recorded runs, labelled by case."""
    return [
        ("summary", sentences.summary_sentence(summary(wall=6.4))),
        ("summary, tokens copied", sentences.summary_sentence(summary(wall=6.4, n_lookup_tokens=10))),
        ("summary, nothing written", sentences.summary_sentence(summary(n=0, by_target=0, wall=0.31))),
        ("summary, a share", sentences.summary_sentence(summary(**SHARED))),
        ("summary lines, a share", "\n".join(sentences.summary_lines(summary(**SHARED)))),
        ("summary, a share and nothing judged",
         sentences.summary_sentence(summary(**NOTHING_JUDGED))),
        ("summary, the small model alone", sentences.summary_sentence(summary(by_target=0, wall=4.0))),
        ("summary, speculative kept all", sentences.summary_sentence(
            summary(policy="speculative", by_target=0, work=Work(target=ModelStats(calls=9, seconds=1.0))))),
        ("summary, the big model alone", sentences.summary_sentence(summary(policy="target", by_target=80, wall=9.0),
                                                                   9.5)),
        ("summary, the big model estimated", sentences.summary_sentence(summary(wall=6.4), 9.1)),
        ("summary, the big model measured", sentences.summary_sentence(summary(wall=6.4), 10.24, measured=True,
                                                                      alone_tokens=80)),
        ("summary, the big model measured at another length",
         sentences.summary_sentence(summary(wall=6.4), 10.24, measured=True, alone_tokens=131)),
        ("timing", sentences.timing_sentence(summary(**TIMED))),
        ("speed", sentences.speed_sentence(summary(**TIMED))),
        ("details", sentences.summary_details(summary(**TIMED))),
        *[(f"details, {rule}", sentences.summary_details(summary(rule=rule)))
          for rule in ("perplexity", "entropy", "margin", "learned")],
        ("details, speculative", sentences.summary_details(summary(policy="speculative"))),
        ("scoring", sentences.scoring_sentence(summary(**SCORED))),
        ("scoring, the big model alone",
         sentences.scoring_sentence(summary(**ALONE_SCORED))),
        ("stopped", sentences.stopped_sentence(CASCADE)),
        ("stopped before the first token", sentences.stopped_sentence([])),
        ("comparison, code", sentences.compare_html(summary(text=CODE[0]),
                                                    summary(text=CODE[1], policy="target", by_target=80))),
        ("comparison, faster", sentences.compare_html(summary(text="a <cat> sat", wall=2.0), ALONE)),
        ("comparison, slower", sentences.compare_html(summary(wall=8.0), ALONE)),
        ("comparison, identical", sentences.compare_html(summary(text="same"), summary(text="same", policy="target"))),
        ("comparison, lengths differ", sentences.compare_html(
            summary(n=14, wall=2.0, first_token_s=0.7),
            summary(n=111, policy="target", by_target=111, wall=23.0, first_token_s=1.0))),
        ("rules", sentences.rules_sentence(CURVES, 0.06)),
        ("rules, no break-even", sentences.rules_sentence(CURVES, None)),
        ("rules, sharing pays at any share", sentences.rules_sentence(CURVES, 1.0)),
        ("rules, sharing never pays", sentences.rules_sentence(CURVES, 0.0)),
        ("rules, no curve", sentences.rules_sentence({}, 0.1)),
        ("break-even, under", sentences.break_even_sentence(summary(), 0.25)),
        ("break-even, over", sentences.break_even_sentence(summary(), 0.06)),
    ]


def test_the_sentences_read_as_kept():
    assert_snapshot("sentences", "".join(f"## {label}\n{text}\n\n" for label, text in surface()))


# ---- what each sentence holds ----------------------------------------------------------------------

def test_the_first_line_counts_the_big_models_tokens_and_the_time():
    plain = sentences.summary_sentence(summary(wall=6.4))
    assert "12 of 80" in plain and "6.4 s" in plain
    assert "10" in sentences.summary_sentence(summary(wall=6.4, n_lookup_tokens=10)).replace(plain, "")
    assert "0.31 s" in sentences.summary_sentence(summary(n=0, by_target=0, wall=0.31))


def test_a_share_is_told_beside_what_was_delivered_and_the_threshold_it_meant_comes_next():
    shared = summary(**SHARED)
    assert "15%" in sentences.summary_sentence(shared) and "10%" in sentences.summary_sentence(shared)
    lines = sentences.summary_lines(shared)
    assert "0.061" in lines[0] and "the shipped calibration of this draft (toy)" in lines[-1]
    assert sentences.budget_sentence(shared) is not None
    # No position judged (nothing the share could set a threshold for): the share asked, no threshold said.
    none = summary(**NOTHING_JUDGED)
    assert "10%" in sentences.summary_sentence(none) and sentences.budget_sentence(none) is None
    assert sentences.budget_sentence(summary(rule="margin")) is None


def test_the_first_line_gives_the_big_model_alones_time_estimated_or_measured_or_nothing():
    run = summary(wall=6.4)
    assert "9.1 s" in sentences.summary_sentence(run, 9.1)
    assert "10.2 s" in sentences.summary_sentence(run, 10.24, measured=True, alone_tokens=80)
    assert "131" in sentences.summary_sentence(run, 10.24, measured=True, alone_tokens=131)
    assert sentences.summary_sentence(run) == sentences.summary_sentence(run, None)  # nothing measured: nothing guessed
    assert len(sentences.summary_sentence(run)) < len(sentences.summary_sentence(run, 9.1))


def test_under_the_first_line_the_first_token_each_models_time_and_what_the_speed_counts():
    run = summary(**TIMED)
    timing = sentences.timing_sentence(run)
    assert all(figure in timing for figure in ("0.62 s", "6.4 s", "2.1 s", "3.9 s", "0.40 s"))
    assert "12.5 tokens/s" in sentences.speed_sentence(run)
    assert sentences.timing_sentence(summary()) == ""  # nothing measured: nothing said
    assert sentences.summary_details(run).startswith(timing)


def test_the_scoring_gives_its_figures_and_its_own_time_once_scored():
    scored = sentences.scoring_sentence(summary(**SCORED))
    assert all(figure in scored for figure in ("3.9 s", "6.4 s", "71%", "4.2"))
    # The big model alone agrees with itself: no agreement said.
    assert "%" not in sentences.scoring_sentence(summary(**ALONE_SCORED))
    assert sentences.scoring_sentence(summary()) is None  # not scored (yet)
    assert sentences.scoring_sentence(summary(stop_reason="cancelled", **SCORED)) is None


def test_a_stopped_run_is_summarised_from_what_was_streamed():
    stopped = sentences.stopped_sentence(CASCADE)
    assert "5 tokens" in stopped and "1 of 5" in stopped and "tokens/s" in stopped
    assert sentences.stopped_sentence([]) != stopped


# ---- the comparison's diff (`diff.py`): code by line, prose by word --------------------------------

PROSE = ("The cat sat on the mat.\nIt slept.", "The cat lay on the  mat.\nIt slept well.")
CODE = ("```python\ndef is_palindrome(word):\n    if word == word[::-1]:\n        return True\n    return False\n```",
        "```python\ndef is_palindrome(word):\n    word = word.lower()\n    return word == word[::-1]\n```")
MIXED = ("Here it is:\n```python\nx = 1\nif x:\n    print(x)\n```\nThis prints one.",
         "Here you go:\n```python\nx = 1\nelif x:\n    print(x)\n```\nThis prints 1.")


def seen(markup: str) -> str:
    """The diff's text as a reader sees it: tags gone, and the space an inserted word keeps from the
    deleted one before it (a margin, not text) drawn as a space."""
    spaced = re.sub(r'<ins [^>]*margin-left:[^>]*>', " ", markup)
    return html.unescape(re.sub(r"<[^>]+>", "", spaced))


@pytest.mark.parametrize("a, b", [PROSE, CODE, MIXED], ids=["prose", "code", "mixed"])
def test_the_diff_gives_both_texts_back(a, b):
    pieces = diff.pieces(a, b)
    assert "".join(t for op, _, t in pieces if op != "insert") == a
    assert "".join(t for op, _, t in pieces if op != "delete") == b
    assert diff.pieces(a, a) == [("equal", kind, t) for _, kind, t in diff.pieces(a, a)]
    # The HTML too (what the page's test reads): without the insertions it is `a`, without the deletions `b`.
    markup = diff.diff_html(a, b)
    assert html.unescape(re.sub(r"<ins[^>]*>.*?</ins>|<[^>]+>", "", markup, flags=re.DOTALL)) == a
    assert html.unescape(re.sub(r"<del[^>]*>.*?</del>|<[^>]+>", "", markup, flags=re.DOTALL)) == b


def test_prose_is_compared_by_word():
    pieces = diff.pieces(*PROSE)
    assert ("delete", "prose", "sat") in pieces and ("insert", "prose", "lay") in pieces
    assert ("delete", "prose", "slept.") in pieces and ("insert", "prose", "slept well.") in pieces
    assert {kind for _, kind, _ in pieces} == {"prose"}
    assert diff.changed(*PROSE) == "3 words changed"  # sat→lay, slept.→slept well.: each change its longer side


def test_code_is_compared_by_line_and_shows_which_lines_changed():
    pieces = diff.pieces(*CODE)
    assert ("delete", "code", "    if word == word[::-1]:\n        return True\n    return False\n") in pieces
    assert ("insert", "code", "    word = word.lower()\n    return word == word[::-1]\n") in pieces
    assert ("equal", "code", "```python\ndef is_palindrome(word):\n") in pieces
    assert diff.changed(*CODE) == "3 lines changed"
    markup = diff.diff_html(*CODE)
    # Changed lines are whole bands in a monospace font, struck through (this run's) or underlined (the big
    # model's); unchanged lines stay in the same font.
    deleted = re.search(r'<del class="diff-delete diff-lines" style="([^"]*)">', markup).group(1)
    assert "display:block" in deleted and "monospace" in deleted and "line-through" in deleted
    assert "white-space:pre" in deleted
    assert '<ins class="diff-insert diff-lines"' in markup and '<span class="diff-code"' in markup


def test_the_fenced_parts_are_compared_by_line_and_the_rest_by_word():
    pieces = diff.pieces(*MIXED)
    assert ("delete", "code", "if x:\n") in pieces and ("insert", "code", "elif x:\n") in pieces
    assert ("delete", "prose", "it is:") in pieces and ("insert", "prose", "you go:") in pieces
    assert ("delete", "prose", "one.") in pieces and ("insert", "prose", "1.") in pieces
    assert diff.changed(*MIXED) == "1 line and 3 words changed"


@pytest.mark.parametrize("a, b, reads", [
    ("if x", "elif x", "if elif x"),
    ("Quantum physics and relativity unify as a theory.", "Quantum physics and relativity are a theory.",
     "relativity unify as are a theory."),
    ("The cat sat on it", "A dog lay on it", "The cat sat A dog lay on it"),  # one change, not three glued pairs
    ("It ends with cat", "It ends with dog", "with cat dog"),
])
def test_a_deleted_word_and_an_inserted_one_are_never_glued_together(a, b, reads):
    markup = diff.diff_html(a, b)
    assert reads in seen(markup)
    assert len(re.findall("<del", markup)) == len(re.findall("<ins", markup)) == 1


def test_the_diff_escapes_both_texts():
    a = 'Say <b>hi</b> & "bye"\n```html\n<script>alert(1)</script>\n```'
    b = 'Say <i>hi</i> & "bye"\n```html\n<script>alert(2)</script>\n```'
    markup = diff.diff_html(a, b)
    assert "<script>" not in markup and "<b>" not in markup and "<i>" not in markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markup and "&lt;i&gt;hi&lt;/i&gt;" in markup


def test_the_comparison_says_how_many_lines_of_code_changed():
    out = sentences.compare_html(summary(text=CODE[0]), summary(text=CODE[1], policy="target", by_target=80))
    assert "(3 lines changed)" in out and 'class="cascade-diff"' in out
    assert "</div>" not in out.split('class="cascade-diff"')[1][:-len("</div></div>")]  # one box, no box inside


def test_a_fence_is_found_where_a_line_starts_and_runs_on_until_it_closes():
    text = "Use ```x``` inline.\n````py\na = 1\n```\n~~~~\nstill code\n  `````\nprose\n~~~\ntilde"
    kinds = [(kind, text[s:e]) for kind, s, e in diff.parts(text)]
    # Only a fence of the same character, at least as long, closes one; one not closed yet runs to the end.
    assert kinds == [("prose", "Use ```x``` inline.\n"), ("open", "````py\n"),
                     ("code", "a = 1\n```\n~~~~\nstill code\n"), ("close", "  `````\n"), ("prose", "prose\n"),
                     ("open", "~~~\n"), ("code", "tilde")]
    assert [k for k, _, _ in diff.parts("```python")] == ["open"]  # an answer that has just opened its fence
    assert diff.parts("") == []


def test_the_comparison_shows_both_measured_speeds_and_the_differences():
    run = summary(text="a <cat> sat", wall=2.0)
    out = sentences.compare_html(run, ALONE)
    assert "40.0 tokens/s" in out and "20.0 tokens/s" in out and "2.00×" in out
    assert "2.0 s" in out and "4.0 s" in out
    assert "&lt;cat&gt;" in out and "<cat>" not in out
    assert '<del class="diff-delete"' in out and '<ins class="diff-insert"' in out
    faster, slower = sentences.compare_html(summary(wall=2.0), ALONE), sentences.compare_html(summary(wall=8.0), ALONE)
    assert "×" in faster and faster != slower
    identical = sentences.compare_html(summary(text="same"), summary(text="same", policy="target"))
    assert "diff-delete" not in identical and "diff-insert" not in identical


def test_the_writing_speed_leaves_out_the_wait_for_the_first_token():
    # 3 tokens: the first came at 0.1 s (reading the prompt), the other two in the 0.2 s after it.
    three = summary(n=3, by_target=1, wall=0.3, first_token_s=0.1)
    assert three.writing_tokens_per_s == pytest.approx(2 / 0.2) and three.tokens_per_s == pytest.approx(10.0)
    assert three.to_dict()["writing_tokens_per_s"] == three.writing_tokens_per_s  # the page's measured numbers
    assert summary(n=1, by_target=0, wall=0.3, first_token_s=0.1).writing_tokens_per_s is None  # one token: no pace
    assert summary(n=3, by_target=1, wall=0.3).writing_tokens_per_s is None  # the first token's time unknown
    assert summary(n=3, by_target=1, wall=0.1, first_token_s=0.1).writing_tokens_per_s is None  # no time after it


def test_the_comparison_shows_the_writing_speeds_and_warns_when_lengths_differ():
    run = summary(n=14, wall=2.0, first_token_s=0.7)  # 13 tokens in 1.3 s after the first
    alone = summary(n=111, policy="target", by_target=111, wall=23.0, first_token_s=1.0)  # 110 in 22 s
    out = sentences.compare_html(run, alone)
    assert "10.0 tokens/s" in out and "5.0 tokens/s" in out  # the writing speeds
    assert "7.0 tokens/s" in out and "4.8 tokens/s" in out  # and the speeds with the prompt's reading
    assert "(14 and 111 tokens)" in out
    unknown = sentences.compare_html(summary(), summary(policy="target", by_target=80))
    assert "(80 and 80 tokens)" not in unknown and "–" in unknown  # no first-token time, no writing speed shown


# ---- the rule, the big model's view of the text, which rule decides best ------------------------------

def test_the_details_name_the_rule_that_decided():
    details = {rule: sentences.summary_details(summary(rule=rule)) for rule in ("perplexity", "entropy", "learned")}
    assert "perplexity" in details["perplexity"] and "entropy" in details["entropy"]
    assert "router" in details["learned"]
    assert len(set(details.values())) == 3
    speculative = sentences.summary_details(summary(policy="speculative"))  # no rule decided
    assert not any(rule in speculative for rule in ("perplexity rule", "entropy rule", "router"))


def test_the_rules_sentence_gives_each_rules_share_and_the_break_even():
    said = sentences.rules_sentence(CURVES, 0.06)
    assert all(share in said for share in ("95%", "31%", "18%", "6%"))
    assert "20%" not in said  # the entropy rule never reaches 95%: no share given for it
    assert "6%" not in sentences.rules_sentence(CURVES, None)
    assert len({sentences.rules_sentence(CURVES, b) for b in (0.06, None, 1.0, 0.0)}) == 4
    assert sentences.rules_sentence({}, 0.1) != sentences.rules_sentence(CURVES, 0.1)


def test_after_a_comparison_the_summary_says_whether_the_share_was_under_the_break_even():
    under = sentences.break_even_sentence(summary(), 0.25)  # 12 of 80 by the big model: 15%
    over = sentences.break_even_sentence(summary(), 0.06)
    assert "15%" in under and "25%" in under and "6%" in over and under.replace("25%", "6%") != over
    assert sentences.break_even_sentence(summary(), None) is None
    assert sentences.break_even_sentence(summary(policy="speculative"), 0.25) is None  # another kind of share
