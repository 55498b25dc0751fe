"""`python -m lab router train` and `python -m lab routers`, end to end on toy models."""

from __future__ import annotations

import json

import pytest

from cascade.routing.identity import fingerprint
from cascade.routing.router import Router
from cascade.routing.rules import RULE_TABLE

from .helpers import lab

PROMPTS = [{"prompt": "The cat sat on the mat.", "chat": True}, {"prompt": "My name is A", "chat": False},
           {"prompt": "Once upon a time", "chat": False}, {"prompt": "Count to ten.", "chat": True}]


@pytest.fixture(scope="module")
def trained(toy, tmp_path_factory):
    """A router trained on the toy pair, and the prompt file and cache it used."""
    folder = tmp_path_factory.mktemp("router")
    prompts = folder / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    out = folder / "router.json"
    env = {"CASCADE_CACHE": str(folder / "cache")}
    r = lab("router", "train", "--draft", str(toy.small), "--target", str(toy.related), "--prompts", str(prompts),
            "--max-tokens", "12", "--out", str(out), env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return out, prompts, env, r


def test_training_writes_a_router_naming_its_pair_and_data(trained, toy):
    out, _, env, r = trained
    router = Router.load(out)
    assert router.pair == {"draft": toy.small.name, "target": toy.related.name,  # by name, and by content
                           "draft_fingerprint": fingerprint(toy.small), "target_fingerprint": fingerprint(toy.related)}
    assert router.data["prompts"] == 4 and router.data["positions"] == 4 * 12
    assert 0 < router.data["differs_share"] < 1 and "router written to" in r.stdout
    # The target's texts were cached: training again does not run the target.
    assert len(list((out.parent / "cache" / "target-texts").glob("*.json"))) == 4


def test_training_again_reuses_the_targets_texts(trained, toy, tmp_path):
    out, prompts, env, _ = trained
    r = lab("router", "train", "--draft", str(toy.small), "--target", str(toy.related), "--prompts", str(prompts),
            "--max-tokens", "12", "--out", str(tmp_path / "again.json"), env=env, timeout=300)
    assert r.returncode == 0 and "4 of 4 of the target's texts came from the cache" in r.stdout
    assert Router.load(tmp_path / "again.json").to_dict()["coef"] == Router.load(out).to_dict()["coef"]


def test_routers_reports_every_rule_measured(trained, toy, tmp_path):
    router, prompts, env, _ = trained
    out, html = tmp_path / "routers.json", tmp_path / "routers.html"
    r = lab("routers", "--draft", str(toy.small), "--target", str(toy.related), "--prompts", str(prompts),
            "--router", str(router), "--max-tokens", "12", "--json", str(out), "--html", str(html),
            env=env, timeout=400)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert set(result["rules"]) == set(RULE_TABLE)
    for name, rule in result["rules"].items():
        assert set(rule["share_at_agreement"]) == {"0.9", "0.95", "0.99"}
        assert 0 < rule["auc"] <= 1
        real = rule["real"]
        assert 0 <= real["share"] <= 1 and 0 <= real["agreement"] <= 1 and real["tokens_per_s"] > 0
        assert real["text_ppl_by_target"] >= 1 and real["threshold"] is not None
        assert RULE_TABLE[name].low <= real["threshold"] <= RULE_TABLE[name].high
    assert result["baselines"]["target"]["agreement"] == 1.0
    assert result["baselines"]["draft"]["text_ppl_by_target"] >= 1
    assert 0 <= result["break_even_share"] <= 1
    assert "share for 95% agreement" in r.stdout and "Break-even" in r.stdout
    assert "Which rule decides best?" in html.read_text()


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "a", "chat": "yes"}\n', "chat"),
    ("not json\n", "line 1"),
])
def test_a_bad_prompt_file_is_named(toy, tmp_path, content, message):
    prompts = tmp_path / "bad.jsonl"
    prompts.write_text(content)
    r = lab("routers", "--draft", str(toy.small), "--target", str(toy.related), "--prompts", str(prompts),
            "--no-real", timeout=120)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
