"""A router's training data from the standard-library corpus (`corpus.py`), and what it learns from it.

`collect` has both models read every text of the corpus (one batched pass each, `Engine.read_along`) and
keeps, for each position, the router's features (the hidden state too, when asked), whether the two models'
choices differ, and what the token is (code, string, comment or prose). Texts go in a stable shuffled
order, so a run stopped early holds a fair sample; the data lives in shards of a folder, so a stopped run
goes on where it stopped.

`study` then fits routers out of fold (folds by module), chooses the regularisation there, draws the
learning curve, and measures every router and rule on the held-out modules: the share of positions the big
model must write for 95% agreement.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.engine import Engine
from ..routing.curves import roc_auc, share_for
from ..routing.identity import fingerprint
from ..routing.router import FEATURES, Router, fit, fit_out_of_fold, scores_out_of_fold
from ..routing.rules import RULE_TABLE
from .corpus import CLASS_NAMES, CODE, COMMENT, PROSE, STRING, CorpusItem, token_classes

Log = Callable[[str], None]
SHARD = 40  # texts per shard file
CLASS_CODES = {CODE: 0, STRING: 1, COMMENT: 2, PROSE: 3}
KINDS = ("code-qwen", "code-raw", "prose")


def ordered(items: Sequence[CorpusItem]) -> list[CorpusItem]:
    """The corpus in a stable shuffled order (by a hash of each prompt), so any prefix is a fair sample."""
    return sorted(items, key=lambda it: hashlib.sha256((it.module + "\0" + it.prompt).encode()).digest())


@dataclass
class CorpusData:
    """Every position read so far: features, labels and what each position is."""

    x: np.ndarray  # (n, features) float32
    differs: np.ndarray  # (n,) bool: the draft's choice is not the target's
    cls: np.ndarray  # (n,) uint8: CLASS_CODES of the token
    item: np.ndarray  # (n,) int32: index of the text in the ordered corpus
    module: np.ndarray  # (n,) int32: index of the module (the unit of folds and of the train/test split)
    test: np.ndarray  # (n,) bool: the position's module is in the held-out split
    kind: np.ndarray  # (n,) uint8: index in KINDS
    info: dict[str, Any]

    def __len__(self) -> int:
        return len(self.differs)

    def where(self, mask: np.ndarray) -> CorpusData:
        return CorpusData(self.x[mask], self.differs[mask], self.cls[mask], self.item[mask], self.module[mask],
                          self.test[mask], self.kind[mask], self.info)

    @property
    def n_hidden(self) -> int:
        return self.x.shape[1] - len(FEATURES)


def collect(engine: Engine, items: Sequence[CorpusItem], folder: Path, positions: int, max_tokens: int = 192,
            hidden: bool = True, log: Log = lambda _m: None) -> None:
    """Read texts of the corpus (in `ordered` order) until the folder holds `positions` positions, going on
    from the shards already there. Each text is cut at `max_tokens` tokens."""
    from tqdm import tqdm

    folder.mkdir(parents=True, exist_ok=True)
    items = ordered(items)
    modules = sorted({it.module for it in items})
    manifest = folder / "manifest.json"
    info = {"draft": engine.pair.draft_path.name, "target": engine.pair.target_path.name,
            "draft_fingerprint": fingerprint(engine.pair.draft_path),
            "target_fingerprint": fingerprint(engine.pair.target_path), "hidden": hidden,
            "max_tokens": max_tokens, "texts_in_corpus": len(items), "modules": modules}
    if manifest.is_file():
        old = json.loads(manifest.read_text())
        if {k: old.get(k) for k in info} != info:
            raise ValueError(f"{folder} holds data of another pair or setting; choose another folder")
    manifest.write_text(json.dumps(info))
    have = sum(int(np.load(p)["differs"].shape[0]) for p in sorted(folder.glob("shard-*.npz")))
    shard = max((int(p.stem.split("-")[1]) + 1 for p in folder.glob("shard-*.npz")), default=0)
    module_index = {m: i for i, m in enumerate(modules)}
    started = time.perf_counter()
    with tqdm(total=positions, initial=min(have, positions), unit="pos", desc="reading the corpus",
              dynamic_ncols=True, mininterval=2.0) as bar:
        while have < positions and shard * SHARD < len(items):
            rows: dict[str, list] = {k: [] for k in ("x", "differs", "cls", "item", "module", "test", "kind")}
            for index in range(shard * SHARD, min((shard + 1) * SHARD, len(items))):
                it = items[index]
                tokens = engine.pair.target.llm.tokenize(it.text.encode("utf-8"), add_bos=False, special=False)
                tokens = tokens[:max_tokens]
                if not tokens:
                    continue
                pieces = [engine.pair.target.llm.detokenize([t]) for t in tokens]
                classes = token_classes(pieces, it.classes, it.text)
                read = engine.read_along(it.prompt, it.chat, tokens, it.system, it.answer_prefix, hidden=hidden)
                rows["x"].append(np.stack([p.x for p in read]).astype(np.float32))
                rows["differs"].append(np.array([p.differs for p in read], dtype=bool))
                rows["cls"].append(np.array([CLASS_CODES[c] for c in classes], dtype=np.uint8))
                n = len(read)
                rows["item"].append(np.full(n, index, dtype=np.int32))
                rows["module"].append(np.full(n, module_index[it.module], dtype=np.int32))
                rows["test"].append(np.full(n, it.split == "test", dtype=bool))
                rows["kind"].append(np.full(n, KINDS.index(it.kind), dtype=np.uint8))
                bar.update(n)
            if rows["x"]:
                np.savez(folder / f"shard-{shard:05d}.npz", **{k: np.concatenate(v) for k, v in rows.items()})
                have += sum(len(d) for d in rows["differs"])
            shard += 1
    log(f"{have} positions in {folder} ({time.perf_counter() - started:.0f} s this run)")


def load(folder: Path) -> CorpusData:
    shards = sorted(folder.glob("shard-*.npz"))
    if not shards:
        raise ValueError(f"no corpus data in {folder}: collect it first (python -m cascade router corpus)")
    parts = [np.load(p) for p in shards]
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("x", "differs", "cls", "item", "module", "test", "kind")}
    return CorpusData(info=json.loads((folder / "manifest.json").read_text()), **cat)


# ---- labels ------------------------------------------------------------------------------------------

def label(data: CorpusData, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A label and its positions' weights. "differs": the two models' choices differ. "code": they differ
    in code, not inside a string or a comment (where a different word rarely changes what a program does);
    positions in strings and comments are still trained on, as positions where nothing needs the big model."""
    if name == "differs":
        return data.differs.astype(int), None
    if name == "code":
        return (data.differs & ~np.isin(data.cls, [CLASS_CODES[STRING], CLASS_CODES[COMMENT]])).astype(int), None
    raise ValueError(f"unknown label {name!r}: differs or code")


# ---- judging -----------------------------------------------------------------------------------------

def columns(data: CorpusData, hidden: bool) -> np.ndarray:
    return data.x if hidden else data.x[:, :len(FEATURES)]


def fit_on(data: CorpusData, y: np.ndarray, c: float, hidden: bool, pair: dict | None = None,
           info: dict | None = None) -> Router:
    x = columns(data, hidden).astype(np.float64)
    return fit(x, y, pair=pair, data=info, c=c, n_hidden=data.n_hidden if hidden else 0)


def out_of_fold(data: CorpusData, y: np.ndarray, c: float, hidden: bool, folds: int = 5) -> np.ndarray:
    """Each position's router probability from a router that never saw its module."""
    return fit_out_of_fold(columns(data, hidden).astype(np.float64), y, data.module, c,
                           data.n_hidden if hidden else 0, folds)


def choose_c(data: CorpusData, y: np.ndarray, hidden: bool, grid: Sequence[float], log: Log) -> dict[float, float]:
    """Each regularisation strength's ROC AUC out of fold, the folds split by module."""
    return scores_out_of_fold(columns(data, hidden).astype(np.float64), y, data.module, grid,
                              data.n_hidden if hidden else 0, log=log)


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
        pair = {k: data.info[k] for k in ("draft", "target", "draft_fingerprint", "target_fingerprint")
                if k in data.info}
        info = {"corpus": "python-stdlib", "label": label_name, "positions": len(train),
                "texts": len(np.unique(train.item)), "modules": len(np.unique(train.module)),
                "differs_share": float(train.differs.mean()), "c": c, "hidden": train.n_hidden if hidden else 0,
                "out_of_fold_roc_auc": {f"{k:g}": v for k, v in scores.items()}}
        router = fit_on(train, y_train, c, hidden, pair, info)
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
