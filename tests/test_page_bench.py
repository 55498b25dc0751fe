"""`python -m lab page-bench` on the toy pair: the page and the engine side by side, and what the
alternatives cost (the numbers themselves are the real pair's, in the README)."""

from __future__ import annotations

from lab.page_speed import alternatives_cost, measure_page

from .helpers import engine_for


def test_the_page_bench_runs_both_ways_and_reports_its_figures(toy):
    engine = engine_for(toy.small, toy.related)
    lines: list[str] = []
    result = measure_page(engine, "The cat sat on the mat", mode="raw", max_tokens=8, rounds=2, log=lines.append)
    assert len(result.rounds) == 2 and len(lines) == 2
    assert result.ratio > 0 and 0 <= result.page_cpu_share < 1
    assert all(r.engine_tokens_per_s > 0 and r.page_s > 0 for r in result.rounds)
    record = result.to_dict()
    assert record["alternatives"] == 5 and len(record["rounds"]) == 2 and record["ratio"] == result.ratio


def test_the_alternatives_cost_is_measured_with_none_and_with_five(toy):
    engine = engine_for(toy.small, toy.related)
    costs = alternatives_cost(engine, "The cat sat on the mat", max_tokens=8, rounds=1)
    assert [c.alternatives for c in costs] == [0, 5]
    assert all(c.routing_s > 0 and c.wall_s > 0 and c.n_events >= 8 for c in costs)
