"""The real-model tier for the learned router: train on 10 prompts of the train split, evaluate on 5 of
the test split (teacher-forced), and report the router's AUC beside the other rules'."""

from __future__ import annotations

import json

import pytest

from .helpers import lab

pytestmark = pytest.mark.real


def test_a_router_trained_on_ten_prompts_ranks_the_test_positions(real_pair, tmp_path):
    draft, target = real_pair
    env = {"CASCADE_CACHE": str(tmp_path / "cache")}
    models = ("--draft", draft, "--target", target, "--threads", "2", "--max-tokens", "24")
    router = tmp_path / "router.json"
    r = lab("router", "train", *models, "--split", "train", "--limit", "10", "--out", str(router), env=env,
            timeout=600)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "routers.json"
    r = lab("routers", *models, "--split", "test", "--limit", "5", "--router", str(router), "--no-real",
            "--json", str(out), env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    rules = json.loads(out.read_text())["rules"]
    report = ", ".join(f"{name}: AUC {rule['auc']:.3f}, ROC AUC {rule['roc_auc']:.3f}" for name, rule in rules.items())
    print(f"\nreal pair, 10 train / 5 test prompts, 24 tokens: {report}")
    assert set(rules) == {"perplexity", "entropy", "margin", "learned"}
    assert rules["learned"]["roc_auc"] > 0.6  # far better than chance at telling where the target differs


def test_the_shipped_router_is_the_one_trained_with_this_draft_file(real_pair):
    from cascade.routing.router import load_router, shipped_router_for

    draft, target = real_pair
    router = shipped_router_for(draft)
    assert router is not None, "no shipped router recognises the real draft file"
    assert load_router("", draft) is router or load_router("", draft).pair == router.pair
    assert shipped_router_for(target) is None  # the big model's file is not a draft any router was trained with
