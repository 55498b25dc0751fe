"""The perplexity chart as a value: one point per token, coloured by who wrote it, and the threshold."""

from __future__ import annotations

import html
import json

import plotly.graph_objects as go
import pytest

from cascade.engine.analysis import Decision, Routing, RunView
from cascade.engine.events import TokenEvent
from cascade.ui import chart
from cascade.ui.style import BLUE, GREY, RED

from .helpers import assert_snapshot
from .recorded import AT_5, BY_SHARE, CASCADE, SPECULATIVE, TARGET_ONLY, accepted


def token_traces(spec):
    return [t for t in spec["data"] if t["meta"] == "tokens"]


def threshold_traces(spec):
    return [t for t in spec["data"] if t["meta"] == "threshold"]


def by_colour(spec) -> dict:
    """The token traces by colour: RED (to the big model), BLUE (to the small one), GREY (no what-if)."""
    return {t["marker"]["color"]: t for t in token_traces(spec)}


@pytest.mark.parametrize("events", [CASCADE, SPECULATIVE, TARGET_ONLY], ids=["cascade", "speculative", "target"])
def test_the_chart_has_one_point_per_token_and_a_threshold_line(events):
    spec = chart.figure_spec(Routing(events), RunView(AT_5))
    go.Figure(spec)  # a valid Plotly figure
    xs = sorted(x for t in token_traces(spec) for x in t["x"])
    assert xs == [e.position for e in accepted(events)]
    (line,) = threshold_traces(spec)
    assert line["y"] == [5.0, 5.0] and line["x"][0] < min(xs) and line["x"][1] > max(xs)
    assert spec["layout"]["yaxis"]["type"] == "log"
    assert "perplexity" in spec["layout"]["yaxis"]["title"]["text"]


def test_chart_points_are_the_drafts_perplexity_of_its_own_choice_coloured_by_writer():
    spec = chart.figure_spec(Routing(CASCADE), RunView(AT_5))
    by_name = {t["name"]: t for t in token_traces(spec)}
    big, small = by_name["written by the big model"], by_name["written by the small model"]
    assert (big["x"], big["y"]) == ([2], [7.0])
    assert small["x"] == [0, 1, 3, 4] and big["marker"]["color"] == RED != small["marker"]["color"]
    assert "“ lay”" in html.unescape(big["text"][0])  # hover shows the token
    assert "&lt;b&gt;" in small["text"][2]  # and escapes it


def test_positions_the_draft_never_scored_show_the_targets_own_perplexity_as_hollow_marks():
    spec = chart.figure_spec(Routing(TARGET_ONLY), RunView(AT_5))
    (trace,) = token_traces(spec)
    assert trace["y"] == [1.0, 2.0, 3.0] and trace["marker"]["symbol"] == "diamond-open"
    assert "did not score" in trace["name"]


def test_the_what_if_chart_recolours_points_and_draws_both_thresholds():
    spec = chart.figure_spec(Routing(CASCADE), RunView(AT_5, threshold=2.5))
    assert sorted(by_colour(spec)[RED]["x"]) == [2, 3]
    assert sorted(by_colour(spec)[BLUE]["x"]) == [0, 1, 4]
    assert sorted(t["y"][0] for t in threshold_traces(spec)) == [2.5, 5.0]


def test_at_the_run_threshold_or_without_a_draft_score_the_chart_shows_the_run():
    for events, threshold in ((CASCADE, 5.0), (TARGET_ONLY, 2.5)):
        routing = Routing(events)
        assert chart.figure_spec(routing, RunView(AT_5, threshold=threshold)) == chart.figure_spec(routing, RunView(AT_5))


def test_the_page_gets_the_chart_as_a_plotly_figure():
    figure = chart.perplexity_figure(Routing(SPECULATIVE), RunView(AT_5, threshold=1.2))
    assert isinstance(figure, go.Figure)
    assert {t.marker.color for t in figure.data if t.meta == "tokens"} == {RED, BLUE, GREY}


def test_the_page_plot_is_exactly_the_json_the_figure_would_send():
    # The page sends the spec without building a Figure (its validation is the slow part): the same
    # points, the same look (the template included), for every rule and for a what-if.
    for routing, threshold, whatif, rule in ((Routing(SPECULATIVE), 5.0, 1.2, "perplexity"),
                                             (Routing(CASCADE), 5.0, None, "perplexity"),
                                             (Routing(CASCADE), 2.0, 1.0, "entropy")):
        plot = chart.perplexity_plot(routing, RunView(Decision(rule, threshold), threshold=whatif))
        figure = chart.perplexity_figure(routing, RunView(Decision(rule, threshold), threshold=whatif))
        assert plot.type == "plotly"
        assert json.loads(plot.plot) == json.loads(figure.to_json())


# ---- by another rule --------------------------------------------------------------------------------

def read(position, text, top1, top2, entropy, source="draft", status="accepted", score=None, draft_ppl=None):
    """An event carrying the draft's whole reading (top-1/top-2 probabilities, entropy, router score)."""
    return TokenEvent(position=position, token_id=position, text=text, source=source, status=status,
                      draft_ppl=draft_ppl if draft_ppl is not None else 1 / top1, target_ppl=1.2,
                      t=0.1 * (position + 1), draft_top1=top1, draft_top2=top2, draft_entropy=entropy,
                      draft_score=score)


# A cascade run by the margin rule at 0.4: position 2's margin (0.05) is below it, so the target wrote there.
MARGIN_RUN = [
    read(0, "The", 0.9, 0.05, 0.4),
    read(1, " cat", 0.6, 0.3, 1.1),
    read(2, " sat", 0.4, 0.35, 1.9, status="escalated"),
    TokenEvent(position=2, token_id=9, text=" lay", source="target", status="accepted", draft_ppl=None,
               target_ppl=1.5, t=0.35),
    read(3, " on", 0.8, 0.1, 0.7),
]


@pytest.mark.parametrize("rule", ["entropy", "margin"])
def test_the_points_are_the_chosen_rules_scores_on_a_linear_axis(rule):
    routing = Routing(MARGIN_RUN)
    spec = chart.figure_spec(routing, RunView(Decision(rule, 0.4)))
    go.Figure(spec)
    plotted = {x: y for t in token_traces(spec) for x, y in zip(t["x"], t["y"])}
    assert plotted == {s.token.position: s.score(rule) for s in routing.slots}
    assert plotted[2] == (pytest.approx(0.05) if rule == "margin" else 1.9)  # the proposal the target overruled
    assert spec["layout"]["yaxis"]["type"] == "linear" and rule in spec["layout"]["yaxis"]["title"]["text"]
    (line,) = threshold_traces(spec)
    assert line["y"] == [0.4, 0.4]


def test_margin_says_below_the_line_goes_to_the_big_model():
    spec = chart.figure_spec(Routing(MARGIN_RUN), RunView(Decision("margin", 0.4)))
    (line,) = threshold_traces(spec)
    assert "below" in line["name"]
    assert "below the line" in spec["layout"]["yaxis"]["title"]["text"]
    assert spec["layout"]["yaxis"]["range"] == [-0.03, 1.03]
    hovers = html.unescape(" ".join(t for trace in token_traces(spec) for t in trace["text"]))
    assert "below the threshold" in hovers
    # A what-if by margin: below the new line goes red.
    whatif = chart.figure_spec(Routing(MARGIN_RUN), RunView(Decision("margin", 0.4), threshold=0.32))
    assert sorted(by_colour(whatif)[RED]["x"]) == [1, 2]  # margins 0.3 and 0.05
    assert sorted(t["y"][0] for t in threshold_traces(whatif)) == [0.32, 0.4]


def test_perplexity_keeps_its_log_axis():
    assert chart.figure_spec(Routing(MARGIN_RUN), RunView(AT_5))["layout"]["yaxis"]["type"] == "log"


def test_a_what_if_by_another_rule_plots_that_rules_scores_and_only_its_threshold():
    spec = chart.figure_spec(Routing(MARGIN_RUN), RunView(AT_5, threshold=1.0, rule="entropy"))
    red = by_colour(spec)[RED]
    assert dict(zip(red["x"], red["y"])) == {1: 1.1, 2: 1.9}  # entropies 1.1 and 1.9
    assert [t["y"][0] for t in threshold_traces(spec)] == [1.0]  # the run's perplexity line has no place here
    assert "entropy" in spec["layout"]["title"]["text"] and spec["layout"]["yaxis"]["type"] == "linear"


def test_positions_without_the_rules_number_lie_along_the_bottom():
    # The learned rule, for a run without a router: no position has its number.
    spec = chart.figure_spec(Routing(MARGIN_RUN), RunView(Decision("learned", 0.5)))
    traces = token_traces(spec)
    assert sum(len(t["x"]) for t in traces) == 4 and all(t.get("yaxis") == "y2" for t in traces)
    assert spec["layout"]["yaxis2"]["visible"] is False
    assert "router" in html.unescape(traces[0]["text"][0])


# ---- which rule decides best ------------------------------------------------------------------------

def test_the_rules_figure_has_a_curve_per_rule_the_run_and_the_break_even():
    from cascade.routing.curves import Curve

    curves = {"perplexity": Curve("perplexity", (0.0, 0.5, 1.0), (0.6, 0.9, 1.0), (5.0, 2.0, None)),
              "margin": Curve("margin", (0.0, 0.25, 1.0), (0.6, 0.95, 1.0), (0.0, 0.3, None))}
    spec = chart.rules_figure_spec(curves, run_point=(0.2, 0.8), break_even=0.06, run_name="this run (cascade)")
    go.Figure(spec)
    lines = [t for t in spec["data"] if t["meta"] == "curve"]
    assert [t["name"] for t in lines] == ["the perplexity rule", "the margin rule"]
    assert lines[1]["x"] == [0, 25, 100] and lines[1]["y"] == [60, 95, 100]
    assert "threshold 0.3" in lines[1]["text"][1]
    (run,) = [t for t in spec["data"] if t["meta"] == "run"]
    assert (run["x"], run["y"]) == ([20], [80])
    (line,) = [t for t in spec["data"] if t["meta"] == "break_even"]
    assert line["x"] == [6, 6] and line["name"] == chart.BREAK_EVEN_NAME
    assert "%" in spec["layout"]["xaxis"]["ticksuffix"] and "big model" in spec["layout"]["xaxis"]["title"]["text"]
    without = chart.rules_figure_spec(curves)
    assert {t["meta"] for t in without["data"]} == {"curve"}  # no run point, no break-even measured: none drawn


def test_the_break_even_label_stays_on_the_side_of_its_line_with_room():
    """The line's label is short (the legend has the sentence) and sits right of a line in the left half,
    left of one in the right half: on a phone the sentence reached past the screen, and the break-even is
    measured, so the line can be anywhere."""
    from cascade.routing.curves import Curve

    curves = {"margin": Curve("margin", (0.0, 1.0), (0.6, 1.0), (0.0, None))}
    for break_even, side in ((0.0, "left"), (0.3, "left"), (0.5, "right"), (0.9, "right"), (1.0, "right")):
        (label,) = chart.rules_figure_spec(curves, break_even=break_even)["layout"]["annotations"]
        assert (label["x"], label["xanchor"], label["text"]) == (100 * break_even, side, "break-even")


def test_a_run_at_0_or_100_percent_is_drawn_whole_on_the_rules_figure():
    from cascade.routing.curves import Curve

    curves = {"margin": Curve("margin", (0.0, 1.0), (0.6, 1.0), (0.0, None))}
    layout = chart.rules_figure_spec(curves, run_point=(0.0, 1.0))["layout"]
    # The star sits at (0%, 100%): both axes reach past it, so that none of it is cut off.
    assert layout["xaxis"]["range"][0] < 0 < 100 < layout["xaxis"]["range"][1]
    assert layout["yaxis"]["range"][1] > 100


# ---- by a share of the tokens (a budget) ---------------------------------------------------------------

def test_a_share_draws_the_threshold_it_moved_position_by_position():
    routing = Routing(CASCADE)
    whatif, run_line = threshold_traces(chart.figure_spec(routing, RunView(AT_5, budget=0.4)))
    assert len(whatif["y"]) == 5 and "40%" in whatif["name"] and whatif["line"]["dash"] != run_line["line"]["dash"]
    assert whatif["y"] == [t if t != float("inf") else None for t in
                           routing.whatif(Decision("perplexity", 5.0, 0.4)).thresholds]
    assert run_line["y"] == [5.0, 5.0]  # the run's own, a threshold's
    # A run a share decided draws the threshold it moved; still being written, none (drawn once finished).
    (line,) = threshold_traces(chart.figure_spec(routing, RunView(BY_SHARE)))
    assert len(line["x"]) == 5 and "20%" in line["name"]
    assert threshold_traces(chart.figure_spec(routing, RunView(BY_SHARE), run_line=False)) == []


# ---- the chart's words: one snapshot -----------------------------------------------------------------

def words(spec) -> str:
    """What a visitor reads of a chart: its title and axes, each trace's name, then its hovers."""
    layout = spec["layout"]
    out = [f"title: {layout.get('title', {}).get('text', '')}"]
    out += [f"{axis}: {layout[axis]['title']['text']}" for axis in ("xaxis", "yaxis") if "title" in layout.get(axis, {})]
    for trace in spec["data"]:
        out.append(f"- {trace['name']}")
        out += [f"    {html.unescape(text)}" for text in trace.get("text", [])]
    return "\n".join(out)


def test_the_charts_words_read_as_kept():
    from cascade.routing.curves import Curve

    curves = {"perplexity": Curve("perplexity", (0.0, 0.5, 1.0), (0.6, 0.9, 1.0), (5.0, 2.0, None)),
              "margin": Curve("margin", (0.0, 0.25, 1.0), (0.6, 0.95, 1.0), (0.0, 0.3, None))}
    cases = [
        ("the run", chart.figure_spec(Routing(CASCADE), RunView(AT_5))),
        ("a what-if threshold", chart.figure_spec(Routing(CASCADE), RunView(AT_5, threshold=2.5))),
        ("a what-if, some positions unscored", chart.figure_spec(Routing(SPECULATIVE), RunView(AT_5, threshold=1.2))),
        ("the big model alone", chart.figure_spec(Routing(TARGET_ONLY), RunView(AT_5))),
        ("the margin rule", chart.figure_spec(Routing(MARGIN_RUN), RunView(Decision("margin", 0.4)))),
        ("a what-if by another rule",
         chart.figure_spec(Routing(MARGIN_RUN), RunView(AT_5, threshold=1.0, rule="entropy"))),
        ("the learned rule without a router",
         chart.figure_spec(Routing(MARGIN_RUN), RunView(Decision("learned", 0.5)))),
        ("a what-if share", chart.figure_spec(Routing(CASCADE), RunView(AT_5, budget=0.4))),
        ("a run a share decided", chart.figure_spec(Routing(CASCADE), RunView(BY_SHARE))),
        ("the rules", chart.rules_figure_spec(curves, run_point=(0.2, 0.8), break_even=0.06,
                                              run_name="this run (cascade)")),
    ]
    assert_snapshot("chart", "".join(f"## {label}\n{words(spec)}\n\n" for label, spec in cases))
