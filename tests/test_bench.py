"""The benchmark, fast, on toy models: it must keep running so its numbers can be trusted."""

from __future__ import annotations

import json

from .helpers import cascade


def test_bench_reports_every_policy_against_the_target(toy, tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"name": "name", "prompt": "My name is A", "chat": False},
                                   {"name": "cat", "prompt": "The cat sat on the mat.", "chat": True}]))
    out, html = tmp_path / "bench.json", tmp_path / "bench.html"
    r = cascade("bench", "--draft", str(toy.small), "--target", str(toy.related), "--prompts", str(prompts),
                "--max-tokens", "16", "--thresholds", "3", "10", "--ks", "2", "--no-llama-cpp",
                "--json", str(out), "--html", str(html), timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    labels = [row["label"] for row in result["rows"]]
    assert labels == ["target", "draft", "cascade 3", "cascade 10", "bild 5 / 20", "speculative k=2", "auto",
                      "seed (threshold 5)"]
    rows = {row["label"]: row for row in result["rows"]}
    assert rows["target"]["speedup"] == 1.0 and rows["target"]["agreement"] == 1.0
    # greedy speculative writes the target's text: full agreement, by construction
    assert rows["speculative k=2"]["agreement"] == 1.0 and rows["speculative k=2"]["same_text"] == 2
    for row in result["rows"]:
        assert row["n_tokens"] > 0 and row["tokens_per_s"] > 0 and 0 <= row["overhead"] < 1
    assert set(result["costs"]["target_batch_s"]) == {"1", "2", "4", "8", "16"}
    assert "cascade_at_share" in result["bounds"]
    assert "| speculative k=2 |" in r.stdout and "tokens in one call" in r.stdout
    assert "<html>" in html.read_text() and "plotly" in html.read_text().lower()


def test_the_workers_bench_compares_n_engines_with_one(toy):
    r = cascade("workers", "--draft", str(toy.small), "--target", str(toy.related), "--max-tokens", "8",
                "--settings", "1x1", "2x1", "--n-ctx", "512", timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(lines) == 2 and "1.00×" in lines[0]
