"""The page's sentence on whether sharing keeps the answers right, from the shipped pass rates."""

from __future__ import annotations

import json

import pytest

from cascade import GenerationConfig
from cascade.ui import quality
from cascade.ui.quality import Report, load_reports, nearest, pair_words, quality_sentence

from .helpers import assert_snapshot

CODER = ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")


def result(policy, passed, n=10, rule=None, threshold=None, k=None, vs_target=None) -> dict:
    return {"policy": policy, "rule": rule, "threshold": threshold, "k": k, "n_tasks": n, "passed": passed,
            "pass_at_1": passed / n, "vs_target": vs_target, "label": policy}


SHARES = [result("target", 7, vs_target=1.0), result("draft", 4, vs_target=2.0),
          {**result("cascade", 6, 10, "perplexity", 5.0, vs_target=1.5), "target_share": 0.05},
          {**result("cascade", 7, 10, "perplexity", 1.5, vs_target=1.1), "target_share": 0.3}]
BUDGETED = {**result("cascade", 6, 10, "perplexity", None, vs_target=0.85), "budget": 0.1, "target_share": 0.104}
BUDGETS = [result("target", 7, vs_target=1.0), result("draft", 4, vs_target=2.0), BUDGETED,
           {**result("cascade", 7, 10, "perplexity", 1.08, vs_target=0.83), "budget": None, "target_share": 0.1},
           {**result("cascade", 5, 10, "perplexity", 5.0, vs_target=1.7), "budget": None, "target_share": 0.0}]


def report(name="humaneval-test.json", n=10, results=None) -> Report:
    results = results or [result("target", 7, n, vs_target=1.0), result("draft", 4, n, vs_target=2.0),
                          result("cascade", 6, n, "perplexity", 5.0, vs_target=1.5),
                          result("cascade", 7, n, "perplexity", 1.5, vs_target=1.1),
                          result("speculative", 7, n, k=4, vs_target=0.7)]
    return Report(name, {"results": results, "tasks": {"n": n, "source": "HumanEval"}, "date": "2026-12-01",
                         "machine": {"threads": 2}, "models": {"draft": CODER[0], "target": CODER[1]}})


def test_the_sentences_read_as_kept():
    only_budget = [result("target", 7, vs_target=1.0), result("draft", 4, vs_target=2.0), BUDGETED]
    page = ("Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_0.gguf",
            "Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf")
    cases = [
        ("a measured threshold", quality_sentence(GenerationConfig(policy="cascade", threshold=5.0), *CODER,
                                                  [report()])),
        ("the nearest measured threshold", quality_sentence(GenerationConfig(policy="cascade", threshold=2.0), *CODER,
                                                            [report()])),
        ("speculative decoding", quality_sentence(GenerationConfig(policy="speculative", k=4), *CODER, [report()])),
        ("a share, by the nearest measured share", quality_sentence(GenerationConfig(policy="cascade", budget=0.25),
                                                                    *CODER, [report(results=SHARES)])),
        ("a measured budget", quality_sentence(GenerationConfig(policy="cascade", budget=0.1), *CODER,
                                               [report(results=BUDGETS)])),
        ("the nearest measured budget", quality_sentence(GenerationConfig(policy="cascade", budget=0.12), *CODER,
                                                         [report(results=BUDGETS)])),
        ("a threshold not measured", quality_sentence(GenerationConfig(policy="cascade", threshold=5.0), *CODER,
                                                      [report(results=only_budget)])),
        ("a rule not measured", quality_sentence(GenerationConfig(policy="cascade", rule="margin"), *CODER,
                                                 [report()])),
        ("another pair", quality_sentence(GenerationConfig(), *page, [report()])),
    ]
    assert_snapshot("quality", "".join(f"## {label}\n{words}\n\n" for label, words in cases))


def test_the_sentence_gives_both_models_and_this_setting_with_its_speed():
    words = quality_sentence(GenerationConfig(policy="cascade", threshold=5.0), *CODER, [report()])
    assert all(figure in words for figure in ("10 coding problems", "2026-12-01", "70%", "40%", "60%", "1.50×",
                                              "Qwen2.5-Coder 0.5B → 1.5B", "humaneval-test.json"))
    assert words.index("70%") < words.index("40%") < words.index("60%")  # the big model, the small one, sharing
    assert "another pair" not in words


def test_an_unmeasured_threshold_takes_the_nearest_measured_and_says_so():
    words = quality_sentence(GenerationConfig(policy="cascade", threshold=2.0), *CODER, [report()])
    assert "threshold 1.5" in words and "nearest yours" in words and "1.10×" in words
    spec = quality_sentence(GenerationConfig(policy="speculative", k=4), *CODER, [report()])
    assert "k=4" in spec and "0.70×" in spec


def test_a_share_takes_the_measured_setting_where_the_big_model_wrote_the_nearest_share():
    words = quality_sentence(GenerationConfig(policy="cascade", budget=0.25), *CODER, [report(results=SHARES)])
    assert all(figure in words for figure in ("threshold 1.5", "30%", "nearest yours", "1.10×"))


def test_a_run_at_a_budget_answers_a_budget_and_never_a_threshold():
    words = quality_sentence(GenerationConfig(policy="cascade", budget=0.1), *CODER, [report(results=BUDGETS)])
    assert all(figure in words for figure in ("10%", "10.4%", "60%", "0.85×")) and "nearest yours" not in words
    near = quality_sentence(GenerationConfig(policy="cascade", budget=0.12), *CODER, [report(results=BUDGETS)])
    assert "10.4%" in near and "nearest yours" in near
    # A threshold is answered by a threshold's run, whatever a budget's run delivered.
    words = quality_sentence(GenerationConfig(policy="cascade", threshold=5.0), *CODER, [report(results=BUDGETS)])
    assert "threshold 5" in words and "50%" in words and "1.70×" in words
    only_budget = [result("target", 7, vs_target=1.0), result("draft", 4, vs_target=2.0), BUDGETED]
    words = quality_sentence(GenerationConfig(policy="cascade", threshold=5.0), *CODER, [report(results=only_budget)])
    assert "×" not in words.split("40%")[1].split("(")[0]  # no sharing figure after the baselines


def test_a_way_not_measured_is_said_to_be_so_and_the_baselines_still_shown():
    words = quality_sentence(GenerationConfig(policy="cascade", rule="margin"), *CODER, [report()])
    assert "70%" in words and "40%" in words and words.count("%") == 2
    assert quality_sentence(GenerationConfig(policy="target"), *CODER, [report()]).count("%") == 2


def test_other_models_than_the_measured_pair_are_named():
    page = ("Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_0.gguf",
            "Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf")
    words = quality_sentence(GenerationConfig(), *page, [report()])
    assert "another pair" in words and "(Qwen2.5 0.5B → 1.5B)" in words
    assert pair_words("small.gguf", "large.gguf") == "small.gguf → large.gguf"


def test_the_report_with_the_most_problems_that_measured_the_setting_answers():
    full = report("full.json", 164, [result("target", 90, 164), result("draft", 70, 164),
                                     result("cascade", 73, 164, "perplexity", 5.0)])
    sweep = report("sweep.json", 41)
    found = nearest(sorted([sweep, full], key=lambda r: -r.n_tasks), GenerationConfig(threshold=5.0))
    assert found[0].name == "full.json"
    found = nearest([full, sweep], GenerationConfig(policy="speculative"))
    assert found[0].name == "sweep.json"  # only the sweep measured speculative decoding
    found = nearest([full, sweep], GenerationConfig(threshold=1.6))
    assert (found[0].name, found[1]["threshold"]) == ("sweep.json", 1.5)  # nearer than the full run's 5


def test_no_results_no_sentence_and_bad_files_are_skipped(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"something": 1}))
    assert load_reports(tmp_path) == ()
    assert quality_sentence(GenerationConfig(), *CODER, []) is None


def test_the_shipped_results_come_from_the_tasks_command_and_name_the_measured_pair():
    reports = load_reports(quality.RESULTS)
    assert reports, "the project ships its measured pass rates in cascade/results/"
    biggest = reports[0]
    assert biggest.n_tasks == 164 and biggest.data["command"][:4] == ["python", "-m", "cascade", "tasks"]
    assert (biggest.data["models"]["draft"], biggest.data["models"]["target"]) == CODER
    for r in reports:
        for row in r.data["results"]:
            assert row["pass_at_1"] == pytest.approx(row["passed"] / row["n_tasks"])
    words = quality_sentence(GenerationConfig(), *CODER)
    source, _ = nearest(reports, GenerationConfig())  # the report that measured the default setting
    big = source.result("target")
    assert source.n_tasks == 164 and source.name in words
    assert f"{100 * big['pass_at_1']:.0f}%" in words
    budget = quality_sentence(GenerationConfig(budget=0.1), *CODER)
    assert "with a budget of 10%" in budget and "humaneval-budgets.json" in budget
