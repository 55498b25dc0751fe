"""The study: routers fit on the train groups of the router data (regularisation chosen out of fold), judged
with the hand-made rules on the held-out groups (the share of positions the big model must write for 95%
agreement), and the learning curve (`python -m lab router study`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from cascade.routing.router import FEATURES, Router
from cascade.routing.rules import RULE_TABLE
from lab.corpus import CLASS_NAMES
from lab.fitting import roc_auc, share_for
from lab.router_data import (
    CLASS_CODES,
    KINDS,
    CorpusData,
    Log,
    choose_c,
    columns,
    fit_on,
    label,
    out_of_fold,
    pair_of,
)


def learning_curve(train: CorpusData, test: CorpusData, y_train: np.ndarray, c: float, hidden: bool,
                   sizes: Sequence[int]) -> list[dict[str, float]]:
    """ROC AUC on the held-out modules of routers fit on the first n positions (texts in their shuffled
    order, so each prefix is a fair sample), and the share each needs for 95% agreement there."""
    out = []
    x_test = columns(test, hidden).astype(np.float64)
    for n in sizes:
        if n > len(train):
            break
        r = fit_on(train.where(np.arange(len(train)) < n), y_train[:n], c, hidden)
        p = r.probability(x_test)
        out.append({"positions": n, "test_roc_auc": roc_auc(p, test.differs),
                    "share_for_95": share_for(p, test.differs)})
    return out

# ---- the study ---------------------------------------------------------------------------------------

C_TOP2 = (0.01, 0.1, 1.0)
C_HIDDEN = (0.0003, 0.001, 0.003, 0.01)
LEARNING_SIZES = (2_500, 5_000, 10_000, 20_000, 40_000, 80_000)


def rule_scores(data: CorpusData) -> dict[str, np.ndarray]:
    """Each hand-made rule's score at every position, in the rule's own units (as its threshold reads it)."""
    column = {name: data.x[:, FEATURES.index(name)].astype(np.float64) for name in ("logp_token", "margin", "entropy")}
    with np.errstate(over="ignore"):  # a token the draft gave no chance: perplexity inf, as the rule reads it
        perplexity = np.exp(-column["logp_token"])
    return {"perplexity": perplexity, "margin": column["margin"], "entropy": column["entropy"]}


def rule_doubts(data: CorpusData) -> dict[str, np.ndarray]:
    """What each hand-made rule doubts, larger more, at every position."""
    return {name: -score if RULE_TABLE[name].below else score for name, score in rule_scores(data).items()}


def default_shares(data: CorpusData, routers: dict[str, Router]) -> dict[str, dict[str, float]]:
    """The share of positions each rule sends to the big model at its default threshold (`RULE_TABLE`),
    and the agreement that keeps: the learned rule with each router, the others with their own scores.
    What a request that names no threshold and no budget gets, on text of this kind."""
    scores = rule_scores(data)
    for name, router in routers.items():
        scores[f"learned ({name})"] = np.asarray(router.probability(columns(data, router.n_hidden > 0)
                                                                    .astype(np.float64)))
    out = {}
    for name, score in scores.items():
        rule = RULE_TABLE[name.split(" ")[0]]
        sent = score < rule.default if rule.below else score > rule.default
        out[name] = {"threshold": rule.default, "share": float(sent.mean()),
                     "agreement": float(1.0 - (data.differs & ~sent).mean())}
    return out


def frontier_row(doubt: np.ndarray, data: CorpusData) -> dict[str, Any]:
    """How one ranking of positions does: ROC AUC for each label, and the share for 95% agreement over all
    positions, over code texts, and counting only differences in code ("code" label)."""
    code_label, _ = label(data, "code")
    is_code = data.kind != KINDS.index("prose")
    return {"roc_auc": roc_auc(doubt, data.differs), "roc_auc_code_label": roc_auc(doubt, code_label),
            "share_for_95": share_for(doubt, data.differs),
            "share_for_95_code_texts": share_for(doubt[is_code], data.differs[is_code]),
            "share_for_95_prose": share_for(doubt[~is_code], data.differs[~is_code]),
            "share_for_95_code_label": share_for(doubt, code_label.astype(bool))}


def study(data: CorpusData, log: Log = print, sizes: Sequence[int] = LEARNING_SIZES) -> tuple[dict[str, Any], dict[str, Router]]:
    """Fit routers on the train modules (regularisation chosen out of fold, folds by module), judge them and
    the rules on the held-out modules, and draw the learning curve. Returns the results and the routers
    (fit on every train position), keyed "top2", "hidden", "hidden-code"."""
    train, test = data.where(~data.test), data.where(data.test)
    results: dict[str, Any] = {
        "positions": len(data), "train_positions": len(train), "test_positions": len(test),
        "train_modules": len(np.unique(train.module)), "test_modules": len(np.unique(test.module)),
        "texts": len(np.unique(data.item)), "differs_share": float(data.differs.mean()),
        "class_shares": {CLASS_NAMES[k]: float((data.cls == v).mean()) for k, v in CLASS_CODES.items()},
        "info": {k: v for k, v in data.info.items() if k != "modules"}}
    held: dict[str, dict[str, Any]] = {name: frontier_row(d, test) for name, d in rule_doubts(test).items()}
    oof: dict[str, dict[str, Any]] = {name: frontier_row(d, train) for name, d in rule_doubts(train).items()}
    routers: dict[str, Router] = {}
    chosen: dict[str, Any] = {}
    for name, hidden, label_name, grid in (("top2", False, "differs", C_TOP2), ("hidden", True, "differs", C_HIDDEN),
                                          ("hidden-code", True, "code", C_HIDDEN)):
        if hidden and not train.n_hidden:
            continue
        y_train, _ = label(train, label_name)
        log(f"[{name}: label {label_name}, choosing C out of fold]")
        started = time.perf_counter()
        scores = choose_c(train, y_train, hidden, grid, log)
        c = max(scores, key=scores.get)
        oof[name] = frontier_row(out_of_fold(train, y_train, c, hidden), train)
        info = {"corpus": "python-stdlib", "label": label_name, "positions": len(train),
                "texts": len(np.unique(train.item)), "modules": len(np.unique(train.module)),
                "differs_share": float(train.differs.mean()), "c": c, "hidden": train.n_hidden if hidden else 0,
                "out_of_fold_roc_auc": {f"{k:g}": v for k, v in scores.items()}}
        router = fit_on(train, y_train, c, hidden, pair_of(data), info)
        routers[name] = router
        held[name] = frontier_row(np.asarray(router.probability(columns(test, hidden).astype(np.float64))), test)
        chosen[name] = {"c": c, "label": label_name, "out_of_fold_roc_auc": info["out_of_fold_roc_auc"],
                        "seconds": time.perf_counter() - started}
        log(f"[{name}] C {c:g}; held out: share for 95% {held[name]['share_for_95']:.1%} "
            f"(perplexity {held['perplexity']['share_for_95']:.1%})")
    results.update(held_out=held, out_of_fold=oof, routers=chosen, at_default_held_out=default_shares(test, routers))
    if "hidden" in chosen:
        y_train, _ = label(train, "differs")
        results["learning_curve"] = {
            "hidden": learning_curve(train, test, y_train, chosen["hidden"]["c"], True, sizes),
            "top2": learning_curve(train, test, y_train, chosen["top2"]["c"], False, sizes)}
    return results, routers


def markdown(results: dict[str, Any]) -> str:
    lines = [(f"{results['positions']:,} positions from {results['texts']:,} texts: {results['train_positions']:,} "
             f"in {results['train_modules']} train modules, {results['test_positions']:,} in {results['test_modules']} "
             f"held-out modules; the models' choices differ at {results['differs_share']:.1%}."), "",
             ("| ranking | ROC AUC, held out | share for 95% agreement: held out (code texts / prose) | out of fold "
             "(train modules) | share for 95% with only code differences counted, held out |"),
             "|---|---|---|---|---|"]
    for name, row in results["held_out"].items():
        o = results["out_of_fold"].get(name, {})
        lines.append(f"| {name} | {row['roc_auc']:.3f} | {row['share_for_95']:.1%} ({row['share_for_95_code_texts']:.1%}"
                     f" / {row['share_for_95_prose']:.1%}) | {o.get('share_for_95', float('nan')):.1%} | "
                     f"{row['share_for_95_code_label']:.1%} |")
    if "at_default_held_out" in results:  # studies saved before it have no such key
        lines += ["", "At each rule's default threshold, held out: " + "; ".join(
            f"{name} {d['threshold']:g} sends {d['share']:.1%} (agreement {d['agreement']:.1%})"
            for name, d in results["at_default_held_out"].items())]
    for name, curve in results.get("learning_curve", {}).items():
        lines += ["", f"Learning curve ({name}): " + ", ".join(
            f"{p['positions']:,} → AUC {p['test_roc_auc']:.3f}, {p['share_for_95']:.1%}" for p in curve)]
    return "\n".join(lines)
