"""The command line's contract, and the Hub download path against a local stand-in for the Hub."""

from __future__ import annotations

import pytest

from .fakehub import FakeHub
from cascade.engine.policies import POLICIES

from .helpers import TOY_THREADS, cascade, json_lines

@pytest.mark.parametrize("policy", POLICIES)
def test_generate_json_contract(toy, policy):
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--policy", policy,
                "--threshold", "3", "--k", "3", "--max-tokens", "12", "--seed", "1", "--threads", str(TOY_THREADS),
                "--json", "My name is A")
    assert r.returncode == 0, r.stderr
    events, summary = json_lines(r.stdout)
    for key in ("text", "n_tokens", "n_target_tokens", "tokens_per_s", "wall_s"):
        assert key in summary
    # Quality in every summary: the target's perplexity of the text, and its same-prefix agreement.
    assert summary["text_ppl_by_target"] >= 1 and 0 <= summary["target_agreement"] <= 1
    accepted = [e for e in events if e["status"] == "accepted"]
    assert summary["n_tokens"] == len(accepted) <= 12
    assert summary["text"] == "".join(e["text"] for e in accepted)
    assert summary["n_target_tokens"] == sum(e["source"] == "target" for e in accepted)
    assert summary["policy"] == policy and summary["wall_s"] > 0


def test_generate_takes_a_rule_and_records_the_drafts_reading(toy):
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--rule", "margin",
                "--threshold", "0.5", "--max-tokens", "12", "--router", "none", "--json", "My name is A")
    assert r.returncode == 0, r.stderr
    events, summary = json_lines(r.stdout)
    assert summary["rule"] == "margin"
    drafted = [e for e in events if e["source"] == "draft"]
    assert drafted and all(e["draft_top1"] >= e["draft_top2"] and e["draft_entropy"] >= 0 for e in drafted)
    for e in (e for e in events if e["status"] == "escalated"):
        assert e["draft_top1"] - e["draft_top2"] < 0.5
    bad = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--rule", "margin",
                  "--threshold", "5", "My name is A")
    assert bad.returncode == 2 and "threshold must be between 0 and 1 for the margin rule" in bad.stderr


def test_generate_takes_a_budget_and_says_what_it_delivered(toy):
    base = ["generate", "--draft", str(toy.small), "--target", str(toy.related), "--rule", "margin", "--budget", "0.2",
            "--max-tokens", "24", "--threads", str(TOY_THREADS), "--router", "none", "My name is A"]
    r = cascade(*base, "--json")
    assert r.returncode == 0, r.stderr
    _, summary = json_lines(r.stdout)
    assert summary["budget"] == 0.2 and summary["budget_source"]
    assert 0 <= summary["budget_threshold"] <= 1  # the margin rule's units
    assert abs(summary["target_share"] - 0.2) <= 0.1, summary["target_share"]
    human = cascade(*base)
    assert human.returncode == 0, human.stderr
    assert f"budget 20% of the tokens for the target: it wrote {summary['target_share']:.1%}" in human.stderr
    assert f"a margin threshold of {summary['budget_threshold']:.4g}" in human.stderr


def test_the_budget_flag_comes_from_the_configs_metadata_and_is_unset_unless_given():
    from cascade.cli import build_parser
    from cascade.serving.settings import generation_config

    parser = build_parser()
    assert generation_config(parser.parse_args(["generate", "hi"])).budget is None
    assert generation_config(parser.parse_args(["generate", "--budget", "0.1", "hi"])).budget == 0.1
    help_text = " ".join(cascade("generate", "--help").stdout.split())
    assert "--budget BUDGET the share of tokens the big model should write" in help_text
    assert "(default unset; 0 to 1)" in help_text


def test_terminal_output_paints_the_targets_tokens_red(toy):
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.large), "--threshold", "2",
                "--max-tokens", "20", "--raw", "The cat", env={"FORCE_COLOR": "1"})
    assert r.returncode == 0, r.stderr
    assert "\033[91m" in r.stdout
    assert "by the target" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--draft", "/no/such/file.gguf"], "draft model file not found"),
    (["--threshold", "nan"], "threshold must be a finite number"),
    (["--k", "0"], "k must be between"),
    (["--budget", "1.5"], "budget must be between 0 and 1, got 1.5"),
    (["--budget", "a tenth"], "argument --budget: invalid float value"),
])
def test_bad_input_gives_a_one_line_error(toy, args, message):
    base = ["generate", "--draft", str(toy.small), "--target", str(toy.related)]
    r = cascade(*base, *args, "hello")
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


def test_mismatched_vocabularies_are_refused(toy):
    r = cascade("generate", "--draft", str(toy.other_vocab), "--target", str(toy.related), "hello")
    assert r.returncode == 2 and "vocabular" in r.stderr and "Traceback" not in r.stderr


def test_not_a_gguf_file_is_refused(tmp_path, toy):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("hello")
    r = cascade("generate", "--draft", str(bogus), "--target", str(toy.related), "hello")
    assert r.returncode == 2 and "not a GGUF file" in r.stderr


def test_models_download_from_the_hub_once_then_come_from_the_cache(toy, tmp_path):
    files = {"toy-org/toy-small-GGUF/small.gguf": toy.small, "toy-org/toy-related-GGUF/related.gguf": toy.related}
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}
    args = ["generate", "--draft", "toy-org/toy-small-GGUF/small.gguf",
            "--target", "toy-org/toy-related-GGUF/related.gguf", "--max-tokens", "8", "--json", "My name is A"]
    with FakeHub(files) as hub:
        first = cascade(*args, env={**env, "HF_ENDPOINT": hub.url})
        assert first.returncode == 0, first.stderr
        assert sum(r.startswith("GET") for r in hub.requests) == 2  # each file fetched once
    cached = list((tmp_path / "hf").rglob("small.gguf"))
    assert cached and cached[0].read_bytes() == toy.small.read_bytes()
    # The Hub is gone: offline mode reads the cache and produces the same text.
    second = cascade(*args, env={**env, "HF_HUB_OFFLINE": "1"})
    assert second.returncode == 0, second.stderr
    assert json_lines(second.stdout)[1]["text"] == json_lines(first.stdout)[1]["text"]


def test_unreachable_hub_without_cache_says_how_to_use_local_files(tmp_path):
    env = {"HF_HOME": str(tmp_path / "empty"), "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2",
           "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    r = cascade("generate", "--draft", "toy-org/toy-small-GGUF/small.gguf",
                "--target", "toy-org/toy-related-GGUF/related.gguf", "hello", env=env)
    assert r.returncode == 2, r.stderr
    assert "unreachable" in r.stderr and "CASCADE_DRAFT" in r.stderr and "Traceback" not in r.stderr


def test_missing_file_on_the_hub_is_named(toy, tmp_path):
    with FakeHub({"toy-org/toy-small-GGUF/small.gguf": toy.small}) as hub:
        r = cascade("generate", "--draft", "toy-org/toy-small-GGUF/small.gguf",
                    "--target", "toy-org/toy-small-GGUF/nope.gguf", "hello",
                    env={"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url})
    assert r.returncode == 2 and "does not exist on the Hub" in r.stderr, r.stderr
