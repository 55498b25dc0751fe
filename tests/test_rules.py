"""Deferral rules, the learned router, teacher-forced curves and the big model's view of a text."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cascade.engine.analysis import Routing
from cascade.engine.costmodel import break_even_share, cascade_cost
from cascade.engine.policies import POLICY_TABLE
from cascade.routing.router import FEATURES, Router, load_router
from cascade.routing.reading import read_row
from cascade.routing.rules import RULE_TABLE
from cascade.engine.sampling import log_softmax
from cascade.routing.curves import curve, rule_curves
from lab.fitting import fit, roc_auc

from .helpers import accepted_ids, engine_for, run

PROMPT = "Once upon a time there was a little cat who"


def toy_router(seed: int = 0) -> Router:
    """A router with fixed random weights: enough to exercise the learned rule on toy models."""
    rng = np.random.default_rng(seed)
    n = len(FEATURES)
    return Router(FEATURES, mean=np.zeros(n), scale=np.ones(n), coef=rng.normal(0, 0.5, n), intercept=0.0,
                  pair={"draft": "toy-small.gguf", "target": "toy-large.gguf"})


@pytest.fixture(scope="module")
def routed(toy):
    """The `partly` pair with a toy router (its own engine: the shared ones have none)."""
    engine = engine_for(toy.small, toy.related, n_batch=64)
    engine.router = toy_router()
    return engine


# ---- what the draft reads ----------------------------------------------------------------------------

def test_a_reading_matches_the_distribution_computed_directly():
    rng = np.random.default_rng(3)
    row = (rng.standard_normal(5000) * 4).astype(np.float32)
    before = row.copy()
    reading = read_row(row, 17)
    p = np.exp(log_softmax(before))
    top = np.sort(p)[::-1]
    assert np.array_equal(row, before)  # the row is left as it was
    assert reading.top_token == int(np.argmax(before))
    assert reading.draft_top1 == pytest.approx(top[0], rel=1e-6)
    assert reading.draft_top2 == pytest.approx(top[1], rel=1e-6)
    assert reading.draft_entropy == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-5)
    assert reading.draft_ppl == pytest.approx(1 / p[17], rel=1e-5)


def test_the_rules_read_different_things_and_margin_escalates_below():
    rng = np.random.default_rng(4)
    reading = read_row((rng.standard_normal(1000) * 3).astype(np.float32), 0)
    assert RULE_TABLE["margin"].score(reading) == pytest.approx(reading.draft_top1 - reading.draft_top2)
    assert RULE_TABLE["margin"].escalates(0.1, 0.4) and not RULE_TABLE["margin"].escalates(0.5, 0.4)
    assert RULE_TABLE["entropy"].escalates(2.0, 1.5) and not RULE_TABLE["entropy"].escalates(1.0, 1.5)
    assert RULE_TABLE["learned"].score(reading) is None  # no router, no learned score


# ---- each rule on a toy pair: the extremes are the draft and the target exactly ----------------------

@pytest.mark.parametrize("rule", list(RULE_TABLE))
def test_extreme_thresholds_reproduce_draft_and_target(routed, rule):
    r = RULE_TABLE[rule]
    keep_all, send_all = (r.low, r.high) if r.below else (r.high, r.low)
    draft_events, _ = run(routed, PROMPT, policy="draft", max_tokens=30)
    target_events, _ = run(routed, PROMPT, policy="target", max_tokens=30)
    events, summary = run(routed, PROMPT, policy="cascade", rule=rule, threshold=keep_all, max_tokens=30)
    assert accepted_ids(events) == accepted_ids(draft_events) and summary.counts.n_target_tokens == 0
    events, summary = run(routed, PROMPT, policy="cascade", rule=rule, threshold=send_all, max_tokens=30)
    assert accepted_ids(events) == accepted_ids(target_events) and summary.counts.n_draft_tokens == 0
    assert summary.rule == rule


@pytest.mark.parametrize("rule, threshold", [("entropy", 2.0), ("margin", 0.5), ("learned", 0.5)])
def test_cascade_escalates_exactly_where_the_rule_says(routed, rule, threshold):
    events, summary = run(routed, PROMPT, policy="cascade", rule=rule, threshold=threshold, max_tokens=40)
    r = RULE_TABLE[rule]
    escalated = [e for e in events if e.status == "escalated"]
    kept = [e for e in events if e.accepted and e.source == "draft"]
    assert all(r.escalates(r.score(e), threshold) for e in escalated)
    assert all(not r.escalates(r.score(e), threshold) for e in kept)
    assert summary.counts.n_target_tokens == len(escalated)
    # The recorded readings re-judge the run exactly: the what-if at the run's own rule and threshold.
    would, scored, total = Routing(events).at_threshold(threshold, rule).counts
    assert (would, total) == (len(escalated), summary.counts.n_tokens)


def test_every_drafted_token_carries_the_drafts_reading(routed):
    events, _ = run(routed, PROMPT, policy="cascade", threshold=3.0, max_tokens=30)
    drafted = [e for e in events if e.source == "draft"]
    assert drafted and all(None not in (e.draft_top1, e.draft_top2, e.draft_entropy, e.draft_score) for e in drafted)
    assert all(e.draft_top1 >= e.draft_top2 and 0 < e.draft_score < 1 for e in drafted)


def test_the_learned_rule_without_a_router_is_refused(toy):
    engine = engine_for(toy.small, toy.related)
    assert engine.router is None
    with pytest.raises(ValueError, match="learned rule needs a router"):
        run(engine, PROMPT, policy="cascade", rule="learned", threshold=0.5)


# ---- the router -----------------------------------------------------------------------------------

def synthetic(n: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features with a known rule: the target differs exactly where entropy - 2*margin > 0.5."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(FEATURES)))
    entropy, margin = FEATURES.index("entropy"), FEATURES.index("margin")
    y = (x[:, entropy] - 2 * x[:, margin] > 0.5).astype(int)
    return x, y


def test_a_router_fit_on_a_known_rule_recovers_it():
    x, y = synthetic()
    router = fit(x, y, c=100.0)
    w = router.coef / router.scale  # in the raw features' units
    entropy, margin = FEATURES.index("entropy"), FEATURES.index("margin")
    others = np.delete(np.abs(w), [entropy, margin])
    assert w[entropy] > 0 and w[margin] < 0 and w[margin] / w[entropy] == pytest.approx(-2.0, rel=0.1)
    assert others.max() < 0.1 * abs(w[entropy])
    x_test, y_test = synthetic(seed=1)
    assert ((router.probability(x_test) > 0.5) == y_test).mean() > 0.98


def test_router_inference_matches_scikit_learn_and_survives_json(tmp_path):
    from sklearn.linear_model import LogisticRegression

    x, y = synthetic(2000, seed=2)
    y = np.where(np.random.default_rng(5).random(len(y)) < 0.1, 1 - y, y)  # noisy labels: probabilities not 0/1
    router = fit(x, y)
    reference = LogisticRegression(C=1.0, max_iter=2000).fit((x - router.mean) / router.scale, y)
    expected = reference.predict_proba((x - router.mean) / router.scale)[:, 1]
    assert np.abs(router.probability(x) - expected).max() < 1e-6
    router.save(tmp_path / "router.json")
    again = Router.load(tmp_path / "router.json")
    assert np.abs(again.probability(x) - router.probability(x)).max() < 1e-12
    assert again.pair == router.pair and again.probability(x[0]) == pytest.approx(float(expected[0]), abs=1e-6)


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("{not json", "not readable JSON"),
    (json.dumps({"kind": "something else"}), "not a router file"),
    (json.dumps({"kind": "cascade-router", "features": ["a", "b"], "mean": [0, 0], "scale": [1, 1],
                 "coef": [1, 1], "intercept": 0}), "other features"),
])
def test_a_bad_router_file_is_named_in_words(tmp_path, content, message):
    path = tmp_path / "router.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_router(str(path))
    assert load_router("none") is None


# ---- teacher-forced curves ------------------------------------------------------------------------

def test_a_curve_by_hand():
    # Four positions; the draft is wrong at the 2nd and 4th. Perplexity escalates the most doubtful first.
    rule = RULE_TABLE["perplexity"]
    c = curve(rule, scores=[1.5, 9.0, 3.0, 6.0], differs=[False, True, False, True])
    # order by doubt: 9 (wrong), 6 (wrong), 3, 1.5
    assert c.shares == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert c.agreements == (0.5, 0.75, 1.0, 1.0, 1.0)
    assert c.share_at(0.75) == 0.25 and c.share_at(0.95) == 0.5
    assert c.auc == pytest.approx(0.125 * (0.5 + 0.75) + 0.125 * (0.75 + 1.0) + 0.5)
    # Each point's threshold gives exactly its share under the rule's own test.
    for share, threshold in zip(c.shares, c.thresholds):
        if threshold is not None:
            sent = sum(rule.escalates(s, threshold) for s in [1.5, 9.0, 3.0, 6.0]) / 4
            assert sent == share


def test_ties_move_together_and_margin_sweeps_from_the_smallest():
    rule = RULE_TABLE["margin"]
    c = curve(rule, scores=[0.1, 0.1, 0.9, 0.5], differs=[True, False, False, True])
    assert c.shares == (0.0, 0.5, 0.75, 1.0)  # the two 0.1s go to the target together
    assert c.agreements == (0.5, 0.75, 1.0, 1.0)
    for share, threshold in zip(c.shares, c.thresholds):
        if threshold is not None:
            assert sum(rule.escalates(s, threshold) for s in [0.1, 0.1, 0.9, 0.5]) / 4 == share


def test_curves_are_monotone_in_the_share():
    rng = np.random.default_rng(7)
    scores, differs = rng.random(300).round(2), rng.random(300) < 0.3
    for rule in ("perplexity", "margin"):
        c = curve(RULE_TABLE[rule], list(scores * 10 + 1 if rule == "perplexity" else scores), list(differs))
        assert all(b > a for a, b in zip(c.shares, c.shares[1:]))
        assert all(b >= a for a, b in zip(c.agreements, c.agreements[1:]))
        assert c.shares[-1] == 1.0 and c.agreements[-1] == 1.0 and 0 <= c.auc <= 1


def test_roc_auc_matches_scikit_learn():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(9)
    labels = rng.random(500) < 0.3
    scores = (labels * 0.8 + rng.random(500)).round(1)  # ties included
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_forced_positions_are_the_drafts_rows_along_the_targets_text(routed):
    events, _ = run(routed, PROMPT, policy="target", max_tokens=20)
    text = accepted_ids(events)
    positions = routed.teacher_force(PROMPT, True, text)
    assert [p.target_token for p in positions] == text
    # The same readings, one position at a time, as the draft reads while writing.
    prompt_tokens = routed.encode(PROMPT, True)
    runner = routed.pair.draft
    with routed.pair.lock:
        runner.clear()
        for i, p in enumerate(positions[:5]):
            row = runner.advance(prompt_tokens + text[:i], 1)[0]
            assert p.draft_token == int(np.argmax(row))
            assert p.reading.draft_entropy == pytest.approx(read_row(row, p.draft_token).draft_entropy, abs=1e-3)
    curves = rule_curves(positions)
    assert set(curves) == set(RULE_TABLE)  # learned included: the engine has a router


# ---- the big model's view of the text -------------------------------------------------------------

# Every policy the engine's loop writes; one with a loop of its own (the seed's) reports text, not token
# ids, and its scoring re-reads that text re-tokenized (`scoring.score_text`).
ENGINE_LOOP_POLICIES = [p.name for p in POLICY_TABLE.values() if not p.own_loop]


@pytest.mark.parametrize("policy", ENGINE_LOOP_POLICIES)
def test_text_perplexity_by_target_equals_a_direct_recomputation(routed, policy):
    target = routed.pair.target
    with routed.pair.lock:
        target.clear()  # so that what the scoring pass finds in the target's cache is this run's alone
    before = target.stats
    events, summary = run(routed, PROMPT, policy=policy, threshold=3.0, max_tokens=30)
    scoring = target.stats - before - summary.work.target  # the target's work after the run: the scoring pass
    text = accepted_ids(events)
    prompt_tokens = routed.encode(PROMPT, True)
    with routed.pair.lock:
        target.clear()
        rows = target.advance(prompt_tokens + text[:-1], len(text))
    logps = [log_softmax(row)[t] for row, t in zip(rows, text)]
    assert summary.quality.text_ppl_by_target == pytest.approx(math.exp(-np.mean(logps)), rel=1e-3)
    agree = np.mean([int(np.argmax(row)) == t for row, t in zip(rows, text)])
    assert summary.quality.target_agreement == pytest.approx(agree)
    # The scoring pass reads the text from the first position the target did not read while writing to
    # the end, each token once, reusing the target's cache up to there: exactly those positions after a
    # run in which the target read the prompt; the prompt too after one in which it read nothing (the
    # draft alone); nothing where it read every position.
    unread = [e.position for e in events if e.accepted and e.target_ppl is None]
    if not unread:
        expected = 0
    elif summary.work.target.tokens_evaluated:
        expected = len(text) - unread[0]
    else:
        expected = summary.prompt_tokens + len(text) - 1
    assert scoring.tokens_evaluated == expected, f"the scoring pass read {scoring.tokens_evaluated} tokens"
    assert (scoring.calls == 0) == (expected == 0)


def test_the_target_alone_agrees_with_itself_and_is_not_read_twice(routed):
    target = routed.pair.target
    before = target.stats
    _, summary = run(routed, PROMPT, policy="target", max_tokens=30)
    assert summary.quality.target_agreement == 1.0 and summary.quality.text_ppl_by_target >= 1.0
    scoring = target.stats - before - summary.work.target
    assert scoring.calls == 0 and scoring.tokens_evaluated == 0  # every position was scored while writing


# ---- break-even -----------------------------------------------------------------------------------

def test_break_even_is_where_cascade_stops_beating_the_target():
    d, t1, b = 0.035, 0.075, 0.016
    e = break_even_share(d, t1, b, 64)
    assert 0 < e < 1
    assert cascade_cost(d, t1, b, e * 0.99, 64) < t1 < cascade_cost(d, t1, b, min(e * 1.01, 1), 64)
    assert break_even_share(0.08, t1, b, 64) == 0.0  # a draft dearer than the target never pays
