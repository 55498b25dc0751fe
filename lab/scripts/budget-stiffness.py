#!/usr/bin/env python3
"""How stiffly a token budget should hold each answer to its share, measured on text no evaluation uses.

A budget's tracker (`cascade/routing/budget.py`) makes every answer deliver close to the budget: it
corrects what it delivered over `HORIZON` positions and weighs its calibration as `PRIOR_WEIGHT` positions.
A fixed threshold at the same overall share lets an answer the draft is sure of send less and a doubtful
one more. This replays trackers of several stiffnesses over the router corpus's held-out texts (Python's
standard library, both models reading it: `python -m lab router corpus`), each text as one answer,
with the perplexity rule and the shipped calibration, and reports for each: the share delivered overall
and per text, and the share of the two models' differences the escalations caught (agreement).

    python lab/scripts/budget-stiffness.py CORPUS_FOLDER [BUDGET ...]
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository, as it is not installed
from lab import router_data, study  # noqa: E402
from cascade.routing.budget import HORIZON, PRIOR_WEIGHT, BudgetTracker, shipped  # noqa: E402
from cascade.routing.curves import points  # noqa: E402

# (name, prior weight, horizon): the shipped tracker, stiffer calibrations and longer horizons, and the
# calibration's threshold alone (never corrected by the answer).
VARIANTS = [("shipped", PRIOR_WEIGHT, HORIZON), ("64 / 32", 64, 32), ("256 / 128", 256, 128),
            ("1024 / 512", 1024, 512), ("calibration only", 1e12, 1e12)]


def texts(data):
    """Each held-out text's perplexities and labels, in order, with whether it was a chat text."""
    test = data.where(data.test)
    perplexity = study.rule_scores(test)["perplexity"]
    for item in np.unique(test.item):
        at = test.item == item
        chat = router_data.KINDS[int(test.kind[at][0])] != "code-raw"
        yield perplexity[at], test.differs[at], chat, router_data.KINDS[int(test.kind[at][0])]


def replay(perplexities, prior, budget, weight, horizon):
    tracker = BudgetTracker("perplexity", budget, prior, prior_weight=weight, horizon=horizon)
    return np.array([tracker.judge(float(p)) for p in perplexities])


def main(folder: Path, budgets):
    data = router_data.load(folder)
    calibration = next((c for c in shipped() if c.fingerprint == data.info.get("draft_fingerprint")), None)
    corpus = list(texts(data))
    print(f"{len(corpus)} held-out texts, {sum(len(t[0]) for t in corpus):,} positions; calibration: "
          f"{calibration.name if calibration else 'none'}")
    all_ppl = np.concatenate([t[0] for t in corpus])
    all_differs = np.concatenate([t[1] for t in corpus])
    shares, agreements, _, _ = points(all_ppl, all_differs)
    for budget in budgets:
        print(f"\nbudget {budget:.0%}")
        print("| tracker (prior weight / horizon) | share delivered | per text: sd, within ±3 points | "
              "differences caught | agreement | a fixed threshold at that share (hindsight) |")
        print("|---|---|---|---|---|---|")
        for name, weight, horizon in VARIANTS:
            sent, per_text = [], []
            for ppl, differs, chat, _kind in corpus:
                prior = calibration.prior("perplexity", chat) if calibration else None
                s = replay(ppl, prior, budget, weight, horizon)
                sent.append(s)
                per_text.append(s.mean())
            sent_all = np.concatenate(sent)
            per_text = np.array(per_text)
            caught = (sent_all & all_differs).sum() / max(all_differs.sum(), 1)
            agreement = 1 - (all_differs & ~sent_all).mean()
            hindsight = agreements[int(np.argmin(np.abs(shares - sent_all.mean())))]
            print(f"| {name} | {sent_all.mean():.1%} | {per_text.std():.3f}, "
                  f"{np.mean(np.abs(per_text - budget) <= 0.03):.0%} | {caught:.1%} | {agreement:.2%} | "
                  f"{hindsight:.2%} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), [float(b) for b in sys.argv[2:]] or [0.05, 0.1, 0.2])
