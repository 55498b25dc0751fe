"""The perplexity chart as a value: one point per token, coloured by who wrote it, and the threshold."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import pytest

from cascade.analysis import Routing
from cascade.ui import chart
from cascade.ui.style import RED

from .recorded import CASCADE, SPECULATIVE, TARGET_ONLY, accepted


def token_traces(spec):
    return [t for t in spec["data"] if t["meta"] == "tokens"]


def threshold_traces(spec):
    return [t for t in spec["data"] if t["meta"] == "threshold"]


@pytest.mark.parametrize("events", [CASCADE, SPECULATIVE, TARGET_ONLY], ids=["cascade", "speculative", "target"])
def test_the_chart_has_one_point_per_token_and_a_threshold_line(events):
    spec = chart.figure_spec(Routing(events), run_threshold=5.0)
    go.Figure(spec)  # a valid Plotly figure
    xs = sorted(x for t in token_traces(spec) for x in t["x"])
    assert xs == [e.position for e in accepted(events)]
    (line,) = threshold_traces(spec)
    assert line["y"] == [5.0, 5.0] and line["x"][0] < min(xs) and line["x"][1] > max(xs)
    assert spec["layout"]["yaxis"]["type"] == "log"
    assert "perplexity" in spec["layout"]["yaxis"]["title"]["text"]


def test_chart_points_are_the_drafts_perplexity_of_its_own_choice_coloured_by_writer():
    spec = chart.figure_spec(Routing(CASCADE), run_threshold=5.0)
    by_name = {t["name"]: t for t in token_traces(spec)}
    big, small = by_name["written by the big model"], by_name["written by the small model"]
    assert (big["x"], big["y"]) == ([2], [7.0])
    assert small["x"] == [0, 1, 3, 4] and big["marker"]["color"] == RED != small["marker"]["color"]
    assert "“ lay”" in html.unescape(big["text"][0])  # hover shows the token
    assert "&lt;b&gt;" in small["text"][2]  # and escapes it


def test_positions_the_draft_never_scored_show_the_targets_own_perplexity_as_hollow_marks():
    spec = chart.figure_spec(Routing(TARGET_ONLY), run_threshold=5.0)
    (trace,) = token_traces(spec)
    assert trace["y"] == [1.0, 2.0, 3.0] and trace["marker"]["symbol"] == "diamond-open"
    assert "did not score" in trace["name"]


def test_the_what_if_chart_recolours_points_and_draws_both_thresholds():
    spec = chart.figure_spec(Routing(CASCADE), run_threshold=5.0, threshold=2.5)
    by_name = {t["name"]: t for t in token_traces(spec)}
    assert sorted(by_name["what-if: would go to the big model"]["x"]) == [2, 3]
    assert sorted(by_name["what-if: would stay with the small model"]["x"]) == [0, 1, 4]
    assert sorted(t["y"][0] for t in threshold_traces(spec)) == [2.5, 5.0]


def test_at_the_run_threshold_or_without_a_draft_score_the_chart_shows_the_run():
    assert chart.figure_spec(Routing(CASCADE), 5.0, threshold=5.0) == chart.figure_spec(Routing(CASCADE), 5.0)
    assert chart.figure_spec(Routing(TARGET_ONLY), 5.0, threshold=2.5) == chart.figure_spec(Routing(TARGET_ONLY), 5.0)


def test_the_page_gets_the_chart_as_a_plotly_figure():
    figure = chart.perplexity_figure(Routing(SPECULATIVE), 5.0, 1.2)
    assert isinstance(figure, go.Figure)
    assert {t.name for t in figure.data} >= {"what-if: would go to the big model",
                                             "no what-if (not scored by the small model)"}
