"""The benchmark, fast, on toy models: it must keep running so its numbers can be trusted."""

from __future__ import annotations

import json

import pytest

from cascade.bench.costs import Costs, bounds
from cascade.bench.run import Case, with_draft_variants
from cascade.engine.config import GenerationConfig
from cascade.routing.rules import RULE_TABLE

from .helpers import cascade, lab


ENTROPY, MARGIN = RULE_TABLE["entropy"].default, RULE_TABLE["margin"].default


def test_bench_reports_every_policy_against_the_target(toy, tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"name": "name", "prompt": "My name is A", "chat": False},
                                   {"name": "cat", "prompt": "The cat sat on the mat.", "chat": True}]))
    out, html = tmp_path / "bench.json", tmp_path / "bench.html"
    r = cascade("bench", "--draft", str(toy.small), "--target", str(toy.related), "--prompts", str(prompts),
                "--max-tokens", "16", "--thresholds", "3", "10", "--ks", "2", "--no-llama-cpp",
                "--router", "none", "--json", str(out), "--html", str(html), timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    labels = [row["label"] for row in result["rows"]]
    assert labels == ["target", "draft", "cascade 3", "cascade 10", f"cascade · entropy {ENTROPY:g}", f"cascade · margin {MARGIN:g}",
                      "bild 5 / 20", "speculative k=2", "lookup k=4",
                      "lookup+draft k=4", "auto", "seed (threshold 5)"]
    rows = {row["label"]: row for row in result["rows"]}
    assert rows["target"]["speedup"] == 1.0 and rows["target"]["agreement"] == 1.0
    # greedy speculative writes the target's text: full agreement, by construction
    assert rows["speculative k=2"]["agreement"] == 1.0 and rows["speculative k=2"]["same_text"] == 2
    for label in ("lookup k=4", "lookup+draft k=4"):  # so does prompt lookup, with or without the draft
        assert rows[label]["agreement"] == 1.0 and rows[label]["same_text"] == 2
    assert rows["lookup k=4"]["draft_tokens"] == rows["lookup k=4"]["drafted"] == 0
    for row in result["rows"]:
        assert row["n_tokens"] > 0 and row["tokens_per_s"] > 0 and 0 <= row["overhead"] < 1
        # Quality in every row: the target's perplexity of the texts (the seed's included, re-tokenized).
        assert row["text_ppl_by_target"] >= 1.0 and 0 <= row["target_agreement"] <= 1, row["label"]
    assert rows["target"]["target_agreement"] == 1.0
    assert rows[f"cascade · margin {MARGIN:g}"]["rule"] == "margin"
    assert set(result["costs"]["target_batch_s"]) == {"1", "2", "4", "8", "16", "32", "64"}
    for row in result["rows"]:  # every row but the seed's loop is set against the bound of its own calls
        if row["policy"] != "seed":
            assert 0 < row["efficiency"] and row["bound_s"] > 0, row["label"]
    assert rows["auto"]["modes"] and "vs bound" in r.stdout
    assert set(result["costs"]["extra_row_s"]) == {"draft", "target"}
    assert "cascade_at_share" in result["bounds"]
    assert "| speculative k=2 |" in r.stdout and "tokens in one call" in r.stdout
    assert "<html>" in html.read_text() and "plotly" in html.read_text().lower()


def test_the_at_once_bench_compares_slots_taking_turns_batched_and_engines_with_one_at_a_time(toy, tmp_path):
    out = tmp_path / "at-once.json"
    r = lab("at-once", "--draft", str(toy.small), "--target", str(toy.related), "--max-tokens", "8", "-n", "2",
            "--rounds", "1", "--n-ctx", "512", "--threads", "1", "--json", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {row["arrangement"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"one at a time", "2 slots, taking turns", "2 slots, batched", "2 engines"}
    assert all(row["requests"] == 2 and row["same_text"] == 2 for row in rows.values())  # toy models: no near ties
    assert rows["2 slots, taking turns"]["same_run"] == 2  # to the last digit of every score
    assert "| 2 slots, taking turns |" in r.stdout and "1.00×" in r.stdout


SYNTHETIC = Costs(draft_step_s=0.02, target_step_s=0.05,
                  target_batch_s={1: 0.05, 2: 0.06, 4: 0.08, 8: 0.12, 16: 0.20},
                  draft_batch_s={1: 0.02, 2: 0.025, 4: 0.03, 8: 0.04, 16: 0.06}, extra_row_s={"target": 0.004})


def test_a_runs_bound_is_the_cost_of_its_own_calls_at_the_measured_prices():
    # 10 single draft steps, one 16-token prompt read and 3 checks of 5 tokens by the target (5 rows each,
    # so 12 rows beyond one a call), one read of 40.
    calls = {"draft": {1: 10, 16: 1}, "target": {5: 3, 40: 1}}
    by_hand = 10 * 0.02 + 0.06 + 3 * (0.08 + (0.12 - 0.08) / 4) + 0.20 * 40 / 16
    assert SYNTHETIC.calls_s(calls) == pytest.approx(by_hand)
    assert SYNTHETIC.calls_s(calls, {"target": 12}) == pytest.approx(by_hand + 12 * 0.004)


def test_the_bounds_of_each_policy_against_a_hand_computation():
    b = bounds(SYNTHETIC, horizon=100, measured_acceptance={2: 0.5})
    # speculative, every draft kept, k=2: (2 d + t(3)) / 3 tokens; t(3) interpolated = 0.07
    assert b.speculative_best_case[2] == pytest.approx(0.05 / ((2 * 0.02 + 0.07) / 3))
    # at acceptance 0.5: (1 - 0.5^3) / 0.5 = 1.75 tokens a round
    assert b.speculative_at_measured_acceptance[2] == pytest.approx(0.05 / ((2 * 0.02 + 0.07) / 1.75))
    # cascade that never escalates runs at the draft's own speed
    assert b.cascade_at_share[0.0] == pytest.approx(0.05 / 0.02)


def test_draft_variants_repeat_every_case_but_the_seeds_loop():
    cases = [Case("cascade 5", GenerationConfig(policy="cascade")), Case("seed", GenerationConfig(policy="seed"))]
    out = with_draft_variants(cases, ["q4_0"])
    assert [(c.label, c.draft) for c in out] == [("cascade 5", ""), ("seed", ""), ("cascade 5 · q4_0", "q4_0")]


def test_a_draft_variant_runs_beside_the_main_draft_in_one_bench(toy, tmp_path):
    out = tmp_path / "bench.json"
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"name": "name", "prompt": "My name is A", "chat": False}]))
    r = cascade("bench", "--draft", str(toy.small), "--target", str(toy.related), "--prompts", str(prompts),
                "--max-tokens", "8", "--only", "cascade", "--thresholds", "3", "--rules", "--no-seed", "--no-llama-cpp",
                "--draft-variant", f"large={toy.large}", "--json", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert [(row["label"], row["draft"]) for row in result["rows"]] == [
        ("target", ""), ("cascade 3", ""), ("cascade 3 · large", "large")]
    assert set(result["variant_costs"]) == {"large"} and "draft · large" in r.stdout


def test_the_at_once_bench_names_a_bad_number_of_requests():
    r = lab("at-once", "--draft", "d.gguf", "--target", "t.gguf", "-n", "0")
    assert r.returncode == 2 and "--requests must be between 1 and" in r.stderr and "Traceback" not in r.stderr


