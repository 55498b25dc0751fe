"""A run in sentences: the summary, a stopped run, and the comparison with the big model alone."""

from __future__ import annotations

import pytest

from cascade.ui import sentences

from .recorded import CASCADE, summary


def test_the_summary_sentence_reads_like_a_sentence():
    assert sentences.summary_sentence(summary()) == "12 of 80 tokens (15%) needed the big model · 18.3 tokens/s"
    assert sentences.summary_sentence(summary(policy="target", by_target=80)).startswith("The big model wrote all 80")
    details = sentences.summary_details(summary())
    assert "measured" in details and "12 it was unsure of" in details


def test_a_stopped_run_is_summarised_from_what_was_streamed():
    assert sentences.stopped_sentence(CASCADE).startswith("Stopped after 5 tokens · 1 of 5 (20%) needed the big "
                                                          "model")
    assert sentences.stopped_sentence([]) == "Stopped before the first token."


def test_word_diff_gives_both_texts_back():
    a, b = "The cat sat on the mat.\nIt slept.", "The cat lay on the  mat.\nIt slept well."
    pieces = sentences.word_diff(a, b)
    assert "".join(t for op, t in pieces if op != "insert") == a
    assert "".join(t for op, t in pieces if op != "delete") == b
    assert ("delete", "sat") in pieces and ("insert", "lay") in pieces
    assert sentences.word_diff(a, a) == [("equal", a)]


def test_the_comparison_shows_both_measured_speeds_and_the_differences():
    run, alone = summary(text="a <cat> sat", wall=2.0), summary(text="a <cat> lay", policy="target", by_target=80,
                                                                wall=4.0)
    out = sentences.compare_html(run, alone)
    assert "40.0 tokens/s" in out and "20.0 tokens/s" in out and "2.00× as fast" in out
    assert "&lt;cat&gt;" in out and "<cat>" not in out
    assert '<del class="diff-delete"' in out and '<ins class="diff-insert"' in out
    slower = sentences.compare_html(summary(wall=8.0), alone)
    assert "slower than the big model alone" in slower
    assert "identical" in sentences.compare_html(summary(text="same"), summary(text="same", policy="target"))


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
    assert "writing speed (after the first token)" in out and "10.0 tokens/s" in out and "5.0 tokens/s" in out
    assert "7.0 tokens/s" in out and "4.8 tokens/s" in out  # and the speeds from pressing Generate
    assert "differ in length (14 and 111 tokens)" in out
    assert "writing speeds compare more fairly" in out
    unknown = sentences.compare_html(summary(), summary(policy="target", by_target=80))
    assert "differ in length" not in unknown and "–" in unknown  # no first-token time, no writing speed shown


# ---- the rule, the big model's view of the text, which rule decides best ------------------------------

def test_the_summary_names_a_rule_other_than_the_seeds_and_how_the_big_model_reads_the_text():
    plain = sentences.summary_sentence(summary(rule="perplexity", text_ppl_by_target=3.14, target_agreement=0.9))
    assert plain == ("12 of 80 tokens (15%) needed the big model · 18.3 tokens/s · the big model would have "
                     "written 90% of these tokens itself · the big model's perplexity of this text: 3.1")
    assert "judged by the entropy rule" in sentences.summary_sentence(summary(rule="entropy"))
    assert "judged by the learned router" in sentences.summary_sentence(summary(rule="learned"))
    # Absent or cancelled: nothing said.
    assert sentences.summary_sentence(summary()) == "12 of 80 tokens (15%) needed the big model · 18.3 tokens/s"
    cancelled = summary(stop_reason="cancelled", text_ppl_by_target=3.1, target_agreement=0.9)
    assert "perplexity of this text" not in sentences.summary_sentence(cancelled)
    assert "would have written" not in sentences.summary_sentence(cancelled)


def curve(rule, shares, agreements):
    from cascade.routing.curves import Curve

    return Curve(rule, tuple(shares), tuple(agreements), (None,) * len(shares))


def test_the_rules_sentence_says_what_each_rule_needs_to_match_the_big_model():
    curves = {"perplexity": curve("perplexity", (0, 0.31, 1), (0.5, 0.95, 1)),
              "entropy": curve("entropy", (0, 0.2, 1), (0.5, 0.9, 0.94)),
              "learned": curve("learned", (0, 0.18, 1), (0.5, 0.96, 1))}
    assert sentences.rules_sentence(curves, 0.06) == (
        "To match the big model on 95% of tokens, the seed's rule needs it for 31% of them, the entropy rule "
        "never reaches 95% here, the learned router for 18%; on this machine sharing pays only below 6%.")
    assert sentences.rules_sentence(curves, None).endswith("the learned router for 18%.")
    assert "sharing pays at any share" in sentences.rules_sentence(curves, 1.0)
    assert "sharing never pays" in sentences.rules_sentence(curves, 0.0)
    assert "no curve" in sentences.rules_sentence({}, 0.1)


def test_after_a_comparison_the_summary_says_whether_the_share_was_under_the_break_even():
    under = sentences.break_even_sentence(summary(), 0.25)  # 12 of 80 by the big model: 15%
    assert "15% of the tokens, under the break-even for this machine (25%)" in under
    over = sentences.break_even_sentence(summary(), 0.06)
    assert "not under the break-even for this machine (6%)" in over and "as fast or faster" in over
    assert sentences.break_even_sentence(summary(), None) is None
    assert sentences.break_even_sentence(summary(policy="speculative"), 0.25) is None  # another kind of share
