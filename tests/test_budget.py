"""The token budget (`routing/budget.py`): the share it delivers, on scores whose distribution is known, and
through the engine on the toy pair; its calibration's recognition of a draft file by content."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from cascade import GenerationConfig
from cascade.engine.events import Summary
from cascade.routing.budget import BudgetTracker, Calibration, calibration_for, fingerprint, tracker_for
from cascade.routing.rules import RULE_TABLE
from lab.calibration import LEVELS, save
from lab.calibration import quantiles_of as calibrate

from .helpers import engine_for, replay


def perplexities(rng, n, spread=1.0):
    """Perplexities like a draft's: mostly near 1, a long tail (code: a small spread; chat: a larger one)."""
    return np.exp(rng.exponential(0.3 * spread, n))


@pytest.mark.parametrize("budget", [0.05, 0.1, 0.2, 0.3])
@pytest.mark.parametrize("spread", [0.3, 1.0, 3.0])
def test_the_share_delivered_tracks_the_budget_whatever_the_texts_scores(budget, spread):
    # The calibration is of one kind of text (spread 1); the answers are far more certain (code-like, 0.3),
    # like it, or far less certain (3.0). Nothing is tuned to the answer: the tracker follows it.
    rng = np.random.default_rng(7)
    prior = np.quantile(perplexities(rng, 5000), LEVELS)
    shares = []
    for _ in range(20):
        decisions = replay("perplexity", budget, perplexities(rng, 128, spread), prior)
        shares.append(np.mean(decisions))
    assert abs(np.mean(shares) - budget) <= 0.01, shares
    assert all(abs(s - budget) <= 0.03 for s in shares), shares


def test_it_escalates_the_most_doubtful_positions_not_any():
    # Most of the positions escalated are among the answer's most doubtful ones (those a hindsight choice of
    # as many would take); a blind choice of as many would share a tenth of them.
    rng = np.random.default_rng(1)
    prior = np.quantile(perplexities(rng, 5000), LEVELS)
    overlaps = []
    for _ in range(20):
        scores = perplexities(rng, 128)
        escalated = set(np.flatnonzero(replay("perplexity", 0.1, scores, prior)))
        most_doubtful = set(np.argsort(-scores)[:len(escalated)])
        overlaps.append(len(escalated & most_doubtful) / len(escalated))
    assert np.mean(overlaps) >= 0.6, overlaps


def test_a_budget_of_nothing_or_everything_means_it():
    scores = list(np.linspace(1, 50, 100))
    assert not any(replay("perplexity", 0.0, scores))
    assert all(replay("perplexity", 1.0, scores))


def test_margin_escalates_below_and_the_threshold_is_in_its_units():
    rng = np.random.default_rng(3)
    margins = rng.uniform(0, 1, 300)
    tracker = BudgetTracker("margin", 0.2, np.quantile(rng.uniform(0, 1, 2000), LEVELS))
    decided = [tracker.judge(m) for m in margins]
    assert abs(np.mean(decided) - 0.2) <= 0.03
    assert 0.1 < tracker.meant < 0.3  # about the 20% quantile of a uniform margin
    assert max(m for m, d in zip(margins, decided) if d) < 0.5  # small margins go to the big model


def test_nothing_looks_ahead():
    # The decisions on the first positions are the same whatever comes after them.
    rng = np.random.default_rng(5)
    scores = list(perplexities(rng, 200))
    later = scores[:100] + list(perplexities(rng, 100, spread=5.0))
    assert replay("perplexity", 0.1, scores)[:100] == replay("perplexity", 0.1, later)[:100]


def test_a_position_without_a_score_is_counted_and_never_escalated():
    tracker = BudgetTracker("perplexity", 0.5)
    assert tracker.judge(None) is False and tracker.n_judged == 1
    # Without a calibration, the first threshold is the rule's default.
    assert BudgetTracker("perplexity", 0.1).threshold == RULE_TABLE["perplexity"].default


def test_a_draft_file_is_recognised_by_its_content_not_its_name(tmp_path, toy, monkeypatch):
    renamed = tmp_path / "renamed.gguf"
    shutil.copy(toy.small, renamed)
    assert fingerprint(renamed) == fingerprint(toy.small) != fingerprint(toy.large)
    ours = calibrate({"raw": {"perplexity": [1.0, 2.0, 3.0]}}, "toy small", fingerprint(toy.small), "test text")
    theirs = calibrate({"chat": {"perplexity": [5.0, 6.0]}}, "another pair", "0" * 32, "other text")
    folder = tmp_path / "calibrations"
    folder.mkdir()
    save(ours, folder / "b-toy.json"), save(theirs, folder / "a-other.json")
    from cascade.routing import budget

    monkeypatch.setattr(budget, "CALIBRATIONS", folder)
    budget.shipped.cache_clear(), budget.calibration_for.cache_clear()
    try:
        assert calibration_for(renamed) == (Calibration.load(folder / "b-toy.json"), True)
        assert "of this draft (toy small)" in tracker_for("perplexity", 0.1, renamed, chat=False).source
        # Another draft: the closest calibration, and the Summary's words say it is another's.
        other = tracker_for("perplexity", 0.1, toy.large, chat=True)
        assert "another draft (another pair" in other.source and other.prior is not None
        # A mode the calibration lacks borrows the other mode's scores.
        assert tracker_for("perplexity", 0.1, renamed, chat=True).prior is not None
        assert "no calibration" in tracker_for("entropy", 0.1, renamed, chat=False).source
    finally:
        budget.shipped.cache_clear(), budget.calibration_for.cache_clear()


def test_the_budget_is_a_checked_setting():
    assert GenerationConfig().budget is None
    assert GenerationConfig.parse({"budget": "0.1"}).budget == 0.1
    for bad in ("lots", 1.5, -0.1):
        with pytest.raises(ValueError, match="budget"):
            GenerationConfig.parse({"budget": bad})


def test_the_engine_delivers_the_budget_and_says_what_threshold_it_meant(toy):
    engine = engine_for(toy.small, toy.related)
    for rule in ("perplexity", "margin"):
        for budget in (0.1, 0.3):
            events = list(engine.generate("The cat sat on the mat", GenerationConfig(
                rule=rule, budget=budget, max_tokens=200, chat=False), score=False))
            summary = events[-1]
            assert isinstance(summary, Summary) and summary.counts.n_tokens >= 50
            assert abs(summary.counts.target_share - budget) <= 0.03, (rule, budget, summary.counts.target_share)
            account = summary.budget
            assert account.share == budget and account.threshold is not None and account.source
    # Without a budget, the Summary says nothing of one.
    plain = list(engine.generate("The cat sat", GenerationConfig(max_tokens=8, chat=False), score=False))[-1]
    assert plain.budget is None


def test_the_shipped_calibration_covers_every_rule_in_both_modes():
    from cascade.routing.budget import shipped

    (calibration,) = shipped()
    assert calibration.positions["chat"] > 1000 and calibration.positions["raw"] > 500
    for mode in ("chat", "raw"):
        for rule in RULE_TABLE:
            q = calibration.quantiles[mode][rule]
            assert len(q) == len(LEVELS) and list(q) == sorted(q)


def test_calibrate_writes_a_calibration_a_budget_then_starts_from_and_budget_check_measures_it(toy, tmp_path):
    from .helpers import lab

    out = tmp_path / "toy.json"
    done = lab("calibrate", "--draft", str(toy.small), "--target", str(toy.related), "--split", "train",
               "--every", "40", "--max-tokens", "12", "--router", "none", "--name", "toy pair", "--out", str(out))
    assert done.returncode == 0, done.stderr
    calibration = Calibration.load(out)
    assert calibration.fingerprint == fingerprint(toy.small) and calibration.name == "toy pair"
    assert "every 40th of the prompts of examples/router/train.jsonl" in calibration.text
    assert set(calibration.quantiles["chat"]) == {"perplexity", "entropy", "margin"}  # no router: no learned rule
    check = lab("budget-check", "--draft", str(toy.small), "--target", str(toy.related), "--split", "test",
                "--every", "25", "--max-tokens", "12", "--budgets", "0.2,0.5", "--router", "none",
                "--json", str(tmp_path / "runs.json"))
    assert check.returncode == 0, check.stderr
    assert "| 20% |" in check.stdout and "| 50% |" in check.stdout
    bad = lab("budget-check", "--draft", str(toy.small), "--target", str(toy.related), "--budgets", "a tenth")
    assert bad.returncode == 2 and "--budgets takes shares" in bad.stderr
