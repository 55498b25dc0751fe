"""where-it-pays: the prediction on recorded costs, the map's rows and sentence, and the command on toy models
(a run end to end, and its bad input: unknown size, no memory, Ctrl-C, a full disk)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascade.bench import where
from cascade.bench.costs import Costs
from cascade.cli import main
from cascade.engine.catalog import size
from cascade.engine.events import Counts, Summary, Timings, Work
from cascade.ui.paysmap import map_figure_spec, map_words

from .helpers import TOY_THREADS

# Recorded prices of a pair: a draft step 0.05 s; the big model 0.1 s a step, 0.02 s each further token.
PRICES = Costs(draft_step_s=0.05, target_step_s=0.1, target_batch_s={1: 0.1, 2: 0.12, 4: 0.16, 8: 0.24, 64: 1.36},
               draft_batch_s={1: 0.05, 2: 0.06, 4: 0.08, 8: 0.12, 64: 0.68})
# A big model twice as dear; its small model the same.
DEARER = Costs(draft_step_s=0.05, target_step_s=0.2, target_batch_s={n: 2 * s for n, s in PRICES.target_batch_s.items()},
               draft_batch_s=PRICES.draft_batch_s)


def _run(calls: dict[str, dict[int, int]], tokens: int, costs: Costs = PRICES, by_target: int = 0) -> where.Run:
    wall = costs.calls_s(calls)  # a run exactly as dear as its calls
    return where.Run(Summary(text="", policy="x", stop_reason="length", prompt_tokens=8,
                             counts=Counts(n_tokens=tokens, n_draft_tokens=tokens - by_target, n_target_tokens=by_target),
                             timings=Timings(wall_s=wall), work=Work(call_sizes=calls)))


# The big model alone: a prompt read of 8 tokens, then 10 steps. Cascade at 10%: the prompt read by both, 10
# draft steps, one escalation that catches up 8 tokens.
ALONE = {"target": {8: 1, 1: 10}}
SHARED = {"draft": {8: 1, 1: 10}, "target": {8: 2}}


def _pattern(costs: Costs = PRICES) -> where.SizeResult:
    model = where.BigModel(size("1.5B"), Path("x.gguf"), stand_in=False)
    result = where.SizeResult(model, costs)
    result.alone.append(_run(ALONE, 10, costs))
    result.shared[0.1] = [_run(SHARED, 10, costs, by_target=1)]
    return result


def test_the_prediction_gives_the_measured_ratio_on_recorded_costs():
    pattern = _pattern()
    measured = pattern.measured_vs_target(0.1)
    assert where.predicted_vs_target(pattern.shared[0.1], pattern.alone, PRICES) == pytest.approx(measured)
    # by hand: alone 0.24 + 10 × 0.1 = 1.24 s; shared 0.12 + 10 × 0.05 + 2 × 0.24 = 1.10 s; same tokens
    assert measured == pytest.approx(1.24 / 1.10)


def test_a_dearer_big_model_makes_the_small_ones_help_worth_more():
    pattern = _pattern()
    dearer = where.predicted_vs_target(pattern.shared[0.1], pattern.alone, DEARER)
    # alone 0.48 + 10 × 0.2 = 2.48 s; shared 0.12 + 0.5 + 2 × 0.48 = 1.58 s
    assert dearer == pytest.approx(2.48 / 1.58)
    assert dearer > where.predicted_vs_target(pattern.shared[0.1], pattern.alone, PRICES)


def test_speculative_is_predicted_from_the_pattern_pairs_own_rounds():
    pattern = _pattern()
    # k = 4: 2 rounds of 4 draft steps and a 5-token check, each round keeping 5 tokens
    pattern.speculative.append(_run({"draft": {8: 1, 1: 8}, "target": {8: 1, 5: 2}}, 10))
    checks = 0.12 + 8 * 0.05 + 0.24 + 2 * PRICES.call_s("target", 5)
    assert where.predicted_vs_target(pattern.speculative, pattern.alone, PRICES) == pytest.approx(1.24 / checks)


def test_rows_carry_every_key_the_map_file_promises():
    pattern = _pattern()
    pattern.speculative.append(_run({"draft": {1: 8}, "target": {5: 2}}, 10))
    rows = where.rows_for(pattern, pattern)
    keys = {"target", "params_b", "stand_in", "policy", "budget", "measured_vs_target", "predicted_vs_target",
            "target_tok_s", "draft_cost_ratio", "catchup_cost_ratio"}
    assert all(keys <= set(r.to_dict()) for r in rows)
    assert [r.policy for r in rows] == ["cascade", "speculative k=4"]
    assert rows[0].draft_cost_ratio == pytest.approx(0.5)


def _row(name: str, params: float, measured: float | None, predicted: float, stand_in: bool = True) -> where.MapRow:
    return where.MapRow(name, params, stand_in, "cascade", 0.1, measured, predicted, 10.0, 0.5, 0.5)


def test_the_sentence_names_the_first_size_that_pays():
    rows = [_row("1.5B", 1.5, 0.85, 0.86, stand_in=False), _row("3B", 3.1, 1.12, 1.1), _row("7B", 7.6, 1.4, 1.45)]
    sentence = where.break_even_sentence(rows)
    assert "3B or more" in sentence and "1.40× with 7B" in sentence
    none = where.break_even_sentence(rows[:1])
    assert "does not save time" in none and "0.85×" in none


def test_the_map_marks_measured_predicted_and_stand_ins_apart():
    rows = [r.to_dict() for r in (_row("1.5B", 1.5, 0.85, 0.86, stand_in=False), _row("7B", 7.6, 1.4, 1.45))]
    spec = map_figure_spec(rows, own=(1.54, 0.9, "this page's pair"))
    names = [t["name"] for t in spec["data"]]
    assert names == ["measured (real weights)", "measured (stand-in)", "predicted (cost model)",
                     "as fast as the big model alone", "this page's pair"]
    line = spec["data"][3]
    assert line["y"] == [1, 1]
    words = map_words({"rows": rows, "machine": {"cpu": "a CPU", "threads": 2}, "date": "2026-12-03",
                       "sentence": "S."})
    assert "stand-in" in words and "random weights" in words and words.endswith("S.")


# ---- the command, on toy models ------------------------------------------------------------------------

def _args(toy, tmp_path, *extra: str) -> list[str]:
    return ["where-it-pays", "--draft", str(toy.small), "--real", f"1.5B={toy.large}",
            "--real", f"3B={toy.related}", "--sizes", "1.5B", "3B", "--prompts", "Code",
            "--budgets", "0.1", "0.3", "--max-tokens", "12", "--threads", str(TOY_THREADS),
            "--json", str(tmp_path / "map.json"), "--html", str(tmp_path / "map.html"), *extra]


def test_the_command_measures_each_size_and_writes_the_map(toy, tmp_path, capsys):
    assert main(_args(toy, tmp_path)) == 0
    data = json.loads((tmp_path / "map.json").read_text())
    assert data["interrupted"] is False and data["pattern"] == "1.5B"
    cascade_rows = [r for r in data["rows"] if r["policy"] == "cascade"]
    assert [(r["target"], r["budget"]) for r in cascade_rows] == [("1.5B", 0.1), ("1.5B", 0.3), ("3B", 0.1), ("3B", 0.3)]
    assert all(r["measured_vs_target"] > 0 and r["predicted_vs_target"] > 0 and not r["stand_in"] for r in cascade_rows)
    # speculative runs on the first (real) pair only, and is predicted for every size
    spec = [r for r in data["rows"] if r["policy"].startswith("speculative")]
    assert [r["measured_vs_target"] is not None for r in spec] == [True, False]
    # every answer runs to its max_tokens: no model may end it early (a stand-in's nonsense would)
    lengths = {run["tokens"] for size in data["runs"].values() for runs in size.values() for run in runs}
    assert lengths == {12}
    assert "plotly" in (tmp_path / "map.html").read_text()
    out = capsys.readouterr().out
    assert "| 3B | real |" in out and data["sentence"] in out


def test_an_unknown_size_is_refused_in_one_line(toy, tmp_path, capsys):
    assert main(_args(toy, tmp_path, "--sizes", "5B")) == 2
    err = capsys.readouterr().err
    assert "unknown size '5B'" in err and "Traceback" not in err
    assert not (tmp_path / "map.json").exists()


def test_ctrl_c_keeps_the_sizes_finished(toy, tmp_path, monkeypatch):
    measure = where.measure_size
    calls = []

    def stopped_on_the_second(model, *args, **kwargs):
        calls.append(model.size.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(model, *args, **kwargs)

    monkeypatch.setattr(where, "measure_size", stopped_on_the_second)
    assert main(_args(toy, tmp_path)) == 130
    data = json.loads((tmp_path / "map.json").read_text())
    assert data["interrupted"] is True
    assert {r["target"] for r in data["rows"]} == {"1.5B"}


def test_a_size_this_machine_cannot_hold_is_refused_before_anything_is_built(toy, tmp_path, monkeypatch, capsys):
    from cascade.bench import standin
    from cascade.engine import memory

    monkeypatch.setattr(memory, "free_memory", lambda: 3_100_000_000)
    monkeypatch.delenv(memory.SKIP_ENV, raising=False)
    built = []
    monkeypatch.setattr(standin, "stand_in", lambda *a, **k: built.append(a))
    assert main(["where-it-pays", "--draft", str(toy.small), "--sizes", "1.5B", "7B", "--json",
                 str(tmp_path / "map.json")]) == 2
    err = capsys.readouterr().err
    assert "the 7B target needs about" in err and "3.1 GB free" in err and "Traceback" not in err
    assert built == [] and not (tmp_path / "map.json").exists()


def test_a_full_disk_while_building_a_stand_in_keeps_what_was_measured(toy, tmp_path, monkeypatch, capsys):
    from cascade.bench import standin

    def full(*args, **kwargs):
        raise standin.StandInError("the disk filled up while building the stand-in; the partial file was removed")

    monkeypatch.setattr(standin, "stand_in", full)
    args = _args(toy, tmp_path)
    args[args.index(f"3B={toy.related}")] = f"1.5B={toy.large}"  # 3B has no file: a stand-in is built
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "error: the disk filled up" in err and "Traceback" not in err
    data = json.loads((tmp_path / "map.json").read_text())
    assert data["interrupted"] is True and {r["target"] for r in data["rows"]} == {"1.5B"}


def test_the_page_places_its_own_pair_from_the_costs_it_measured(pair_engines):
    from cascade.ui.paysmap import map_update, pair_point

    engine = next(iter(pair_engines.values()))
    engine.calibrate()
    point = pair_point(engine)
    assert point is not None and point[0] > 0 and point[1] > 0
    rows = [_row("1.5B", 1.5, 0.85, 0.86, stand_in=False).to_dict()]
    figure = map_update(point, {"rows": rows})
    star = figure.data[-1]
    assert star.marker.symbol == "star" and star.y[0] == pytest.approx(point[1])
    assert pair_point(object()) is None


def test_benchmarks_map_shows_what_the_shipped_map_says():
    """BENCHMARKS.md's where-it-pays table: every cell the shipped results file's measured and predicted speed."""
    import re

    from cascade.ui.paysmap import SHIPPED

    data = json.loads(SHIPPED.read_text())
    text = (Path(__file__).resolve().parent.parent / "BENCHMARKS.md").read_text(encoding="utf-8")
    x = lambda v: "–" if v is None else f"{v:.2f}×"  # noqa: E731
    for name in {r["target"] for r in data["rows"]}:
        rows = [r for r in data["rows"] if r["target"] == name]
        cells = [f"{x(r['measured_vs_target'])} ({x(r['predicted_vs_target'])})" for r in rows]
        line = next(line for line in text.splitlines() if line.startswith(f"| {name} | "))
        assert re.findall(r"\| ([^|]+\([^|]+\)) ", line + " ") == cells, name
        assert f"{rows[0]['target_tok_s']:.1f} tok/s" in line


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """Rows equal key by key, their floats to 1e-9."""
    def same(x, y):
        return x == y or (isinstance(x, float) and isinstance(y, float) and x == pytest.approx(y, rel=1e-9))
    return len(a) == len(b) and all(r.keys() == q.keys() and all(same(r[k], q[k]) for k in r) for r, q in zip(a, b))


def test_replay_recomputes_a_files_rows_from_its_own_runs(toy, tmp_path):
    assert main(_args(toy, tmp_path)) == 0
    measured = json.loads((tmp_path / "map.json").read_text())
    assert main(["where-it-pays", "--replay", str(tmp_path / "map.json"), "--json", str(tmp_path / "again.json"),
                 "--html", str(tmp_path / "again.html")]) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert same_rows(again["rows"], measured["rows"]) and again["sentence"] == measured["sentence"]
    assert again["runs"] == measured["runs"]


def test_the_shipped_map_is_what_its_runs_give_today():
    """The shipped map's predictions are today's cost model on its recorded runs (`--replay`)."""
    from cascade.ui.paysmap import SHIPPED

    data = json.loads(SHIPPED.read_text())
    stand_in = {r["target"]: r["stand_in"] for r in data["rows"]}
    results = [where.SizeResult.from_dicts(where.BigModel(size(n), Path(n), stand_in[n]), data["costs"][n], runs)
               for n, runs in data["runs"].items()]
    rows = [row.to_dict() for r in results for row in where.rows_for(r, results[0])]
    assert same_rows(rows, data["rows"])
