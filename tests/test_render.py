"""What the page draws, as values: the coloured text, the chart, the what-if, the summary and the diff."""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go
import pytest

from cascade import render
from cascade.events import ModelStats, Summary, TokenEvent


def ev(position, text, source="draft", status="accepted", draft_ppl=None, target_ppl=None) -> TokenEvent:
    return TokenEvent(position=position, token_id=position, text=text, source=source, status=status,
                      draft_ppl=draft_ppl, target_ppl=target_ppl, t=0.1 * (position + 1))


# A cascade run at threshold 5: the draft doubted " sat" (7.0), so the target wrote " lay" there.
CASCADE = [
    ev(0, "The", draft_ppl=1.2),
    ev(1, " cat", draft_ppl=2.0),
    ev(2, " sat", status="escalated", draft_ppl=7.0),
    ev(2, " lay", source="target", draft_ppl=9.0, target_ppl=1.5),
    ev(3, " <b>&amp;</b>", draft_ppl=3.0),
    ev(4, "\n", draft_ppl=1.1),
]

# A speculative run: " x" and " y" were drafted and rejected; the target wrote " z" at position 2;
# later the draft's " w" at 3 was kept and the target added position 4 with no draft proposal there.
SPECULATIVE = [
    ev(0, "A", draft_ppl=1.1, target_ppl=1.3),
    ev(1, " b", draft_ppl=1.4, target_ppl=1.2),
    ev(2, " x", status="rejected", draft_ppl=1.5, target_ppl=30.0),
    ev(3, " y", status="rejected", draft_ppl=1.3, target_ppl=8.0),
    ev(2, " z", source="target", draft_ppl=4.0, target_ppl=1.2),
    ev(3, " w", draft_ppl=2.5, target_ppl=1.1),
    ev(4, " v", source="target", draft_ppl=None, target_ppl=1.05),
]

TARGET_ONLY = [ev(i, f" t{i}", source="target", target_ppl=1.0 + i) for i in range(3)]


def accepted(events):
    return [e for e in events if e.accepted]


def spans(markup: str, cls: str) -> list[str]:
    """The texts of the token elements carrying a class, unescaped."""
    pattern = rf'<(?:span|s) class="[^"]*\b{cls}\b[^"]*"[^>]*>(.*?)</(?:span|s)>'
    return [html.unescape(t) for t in re.findall(pattern, markup, flags=re.S)]


# ---- the text ------------------------------------------------------------------------------------

def test_model_text_is_escaped_in_the_text_and_in_the_hover():
    events = [ev(0, '<script>alert("x")</script>', draft_ppl=1.0),
              ev(1, '" onmouseover="boom', source="target", target_ppl=2.0)]
    markup = render.tokens_html(events)
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    assert 'onmouseover="boom' not in markup  # the quote cannot close the title attribute
    assert spans(markup, "tok") == ['<script>alert("x")</script>', '" onmouseover="boom']


def test_the_targets_tokens_are_red_and_the_drafts_plain():
    markup = render.tokens_html(CASCADE)
    assert spans(markup, "red") == [" lay"]
    assert spans(markup, "draft") == ["The", " cat", " <b>&amp;</b>", "\n"]
    red_style = re.search(r'<span class="tok red target"[^>]* style="([^"]*)"', markup).group(1)
    assert render.RED in red_style


def test_the_whole_text_is_there_in_order_with_its_newlines():
    panel = render.text_panel(CASCADE, run_threshold=5.0)
    tokens = spans(panel, "tok")
    assert "".join(tokens) == "".join(e.text for e in accepted(CASCADE))
    assert "white-space:pre-wrap" in panel  # newlines and runs of spaces show as written


def test_an_escalated_draft_token_is_told_in_the_hover_of_the_red_token():
    markup = render.tokens_html(CASCADE)
    assert "sat" not in re.sub(r'title="[^"]*"', "", markup)  # not inline
    red_title = re.search(r'<span class="tok red target" title="([^"]*)"', markup).group(1)
    title = html.unescape(red_title)
    assert "“ sat”" in title and "7.00" in title and "unsure" in title
    assert "big model's perplexity of this token: 1.50" in title


def test_rejected_and_rolled_back_draft_tokens_are_struck_through_where_they_were_drafted():
    markup = render.tokens_html(SPECULATIVE)
    assert spans(markup, "discarded") == [" x", " y"]
    assert markup.index(" b<") < markup.index(" x<") < markup.index(" z<")
    assert markup.count("<s ") == 2 and "line-through" in markup
    rolled = [ev(0, " q", status="rolled_back", draft_ppl=1.5, target_ppl=40.0), ev(0, " r", source="target")]
    assert "rolled back" in html.unescape(render.tokens_html(rolled))


def test_each_target_token_is_paired_with_the_drafts_own_proposal_at_its_position():
    slots = render.slots(SPECULATIVE)
    assert [s.token.text for s in slots] == ["A", " b", " z", " w", " v"]
    assert slots[2].proposal.text == " x"  # rejected at position 2, where the target then wrote
    assert slots[3].proposal is None  # " y" was rejected at 3, but the draft's later " w" was kept
    assert slots[4].proposal is None  # the target's extra token: the draft proposed nothing there
    assert [s.routing_ppl for s in slots] == [1.1, 1.4, 1.5, 2.5, None]
    assert render.slots(CASCADE)[2].routing_ppl == 7.0  # the escalated token's, not 9.0 (of " lay")


# ---- the chart -----------------------------------------------------------------------------------

def token_traces(spec):
    return [t for t in spec["data"] if t["meta"] == "tokens"]


def threshold_traces(spec):
    return [t for t in spec["data"] if t["meta"] == "threshold"]


@pytest.mark.parametrize("events", [CASCADE, SPECULATIVE, TARGET_ONLY], ids=["cascade", "speculative", "target"])
def test_the_chart_has_one_point_per_token_and_a_threshold_line(events):
    spec = render.figure_spec(events, run_threshold=5.0)
    go.Figure(spec)  # a valid Plotly figure
    xs = sorted(x for t in token_traces(spec) for x in t["x"])
    assert xs == [e.position for e in accepted(events)]
    (line,) = threshold_traces(spec)
    assert line["y"] == [5.0, 5.0] and line["x"][0] < min(xs) and line["x"][1] > max(xs)
    assert spec["layout"]["yaxis"]["type"] == "log"
    assert "perplexity" in spec["layout"]["yaxis"]["title"]["text"]


def test_chart_points_are_the_drafts_perplexity_of_its_own_choice_coloured_by_writer():
    spec = render.figure_spec(CASCADE, run_threshold=5.0)
    by_name = {t["name"]: t for t in token_traces(spec)}
    big, small = by_name["written by the big model"], by_name["written by the small model"]
    assert (big["x"], big["y"]) == ([2], [7.0])
    assert small["x"] == [0, 1, 3, 4] and big["marker"]["color"] == render.RED != small["marker"]["color"]
    assert "“ lay”" in html.unescape(big["text"][0])  # hover shows the token
    assert "&lt;b&gt;" in small["text"][2]  # and escapes it


def test_positions_the_draft_never_scored_show_the_targets_own_perplexity_as_hollow_marks():
    spec = render.figure_spec(TARGET_ONLY, run_threshold=5.0)
    (trace,) = token_traces(spec)
    assert trace["y"] == [1.0, 2.0, 3.0] and trace["marker"]["symbol"] == "diamond-open"
    assert "did not score" in trace["name"]


# ---- the what-if ---------------------------------------------------------------------------------

def test_moving_the_threshold_recolours_the_recorded_tokens_as_a_what_if():
    low = render.text_panel(CASCADE, run_threshold=5.0, threshold=1.5)
    high = render.text_panel(CASCADE, run_threshold=5.0, threshold=50.0)
    assert 'data-view="whatif"' in low and "What-if" in low and "nothing was regenerated" in low
    assert spans(low, "red") == [" cat", " lay", " <b>&amp;</b>"]  # recorded perplexities 2.0, 7.0, 3.0 > 1.5
    assert spans(high, "red") == []
    assert "3 of 5 tokens would have gone to the big model, against 1 of 5 in the real run" in low


def test_the_run_threshold_itself_shows_the_real_run():
    panel = render.text_panel(CASCADE, run_threshold=5.0, threshold=5.0)
    assert 'data-view="run"' in panel and "What-if" not in panel
    assert panel == render.text_panel(CASCADE, run_threshold=5.0)


def test_the_what_if_chart_recolours_points_and_draws_both_thresholds():
    spec = render.figure_spec(CASCADE, run_threshold=5.0, threshold=2.5)
    by_name = {t["name"]: t for t in token_traces(spec)}
    assert sorted(by_name["what-if: would go to the big model"]["x"]) == [2, 3]
    assert sorted(by_name["what-if: would stay with the small model"]["x"]) == [0, 1, 4]
    assert sorted(t["y"][0] for t in threshold_traces(spec)) == [2.5, 5.0]


def test_positions_without_a_draft_score_have_no_what_if():
    panel = render.text_panel(SPECULATIVE, run_threshold=5.0, threshold=1.2)
    assert spans(panel, "nowhatif") == [" v"]
    assert render.whatif_counts(SPECULATIVE, 1.2) == (3, 4, 5)  # 1.4, 1.5, 2.5 of 1.1, 1.4, 1.5, 2.5
    only_target = render.text_panel(TARGET_ONLY, run_threshold=5.0, threshold=1.2)
    assert "No what-if" in only_target and 'data-view="run"' in only_target
    assert spans(only_target, "red") == [" t0", " t1", " t2"]


# ---- the summary and the comparison --------------------------------------------------------------

def summary(text="x", policy="cascade", n=80, by_target=12, wall=80 / 18.3, **kw) -> Summary:
    fields = dict(text=text, policy=policy, stop_reason="max_tokens", prompt_tokens=10, n_tokens=n,
                  n_draft_tokens=n - by_target, n_target_tokens=by_target, n_drafted=n, n_escalated=by_target,
                  n_rejected=0, n_rolled_back=0, wall_s=wall, draft=ModelStats(), target=ModelStats())
    return Summary(**{**fields, **kw})


def test_the_summary_sentence_reads_like_a_sentence():
    assert render.summary_sentence(summary()) == "12 of 80 tokens (15%) needed the big model · 18.3 tokens/s"
    assert render.summary_sentence(summary(policy="target", by_target=80)).startswith("The big model wrote all 80")
    details = render.summary_details(summary())
    assert "measured" in details and "12 it was unsure of" in details


def test_a_stopped_run_is_summarised_from_what_was_streamed():
    assert render.stopped_sentence(CASCADE).startswith("Stopped after 5 tokens · 1 of 5 (20%) needed the big model")
    assert render.stopped_sentence([]) == "Stopped before the first token."


def test_word_diff_gives_both_texts_back():
    a, b = "The cat sat on the mat.\nIt slept.", "The cat lay on the  mat.\nIt slept well."
    pieces = render.word_diff(a, b)
    assert "".join(t for op, t in pieces if op != "insert") == a
    assert "".join(t for op, t in pieces if op != "delete") == b
    assert ("delete", "sat") in pieces and ("insert", "lay") in pieces
    assert render.word_diff(a, a) == [("equal", a)]


def test_the_comparison_shows_both_measured_speeds_and_the_differences():
    run, alone = summary(text="a <cat> sat", wall=2.0), summary(text="a <cat> lay", policy="target", by_target=80,
                                                                wall=4.0)
    out = render.compare_html(run, alone)
    assert "40.0 tokens/s" in out and "20.0 tokens/s" in out and "2.00× as fast" in out
    assert "&lt;cat&gt;" in out and "<cat>" not in out
    assert '<del class="diff-delete"' in out and '<ins class="diff-insert"' in out
    slower = render.compare_html(summary(wall=8.0), alone)
    assert "slower than the big model alone" in slower
    assert "identical" in render.compare_html(summary(text="same"), summary(text="same", policy="target"))


def test_the_writing_speed_leaves_out_the_wait_for_the_first_token():
    events = [ev(0, "a"), ev(1, "b", status="escalated"), ev(1, "c", source="target"), ev(2, "d")]  # t = .1 .2 .2 .3
    assert render.writing_speed(events) == pytest.approx(2 / 0.2)
    assert render.writing_speed(events[:1]) is None
    out = render.compare_html(summary(n=14), summary(n=111, policy="target"), events, events)
    assert "10.0 tokens/s" in out and "differ in length (14 and 111 tokens)" in out
