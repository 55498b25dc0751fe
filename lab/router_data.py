"""A router's training data, in one pipeline: both models read texts, and at each position the router's
features and whether their choices differ.

The texts come from Python's standard library (`corpus.py`: text neither model wrote) or from the target's
own greedy answers to a prompt set (`written`, cached). `collect` has both models read each text (one
batched pass each) and keeps, for each position, the router's features (the hidden state too, when asked),
the label (the two models' choices differ) and what the token is (code, string, comment or prose). Texts go
in a stable shuffled order, so a run stopped early holds a fair sample; the data lives in shards of a
folder, so a stopped run goes on where it stopped. `choose_c` and `fit_on` fit routers on it, the folds
split by group (a module of the corpus, or a prompt).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from cascade.bench.local import cache_folder
from cascade.bench.summaries import written as generated
from cascade.engine.config import GenerationConfig
from cascade.engine.engine import Engine
from cascade.engine.forcing import CHUNK, forced_positions
from cascade.engine.runner import ModelRunner
from cascade.routing.curves import Position
from cascade.routing.identity import fingerprint
from cascade.routing.router import FEATURES, Router
from lab.prompts import PromptItem
from lab.corpus import CODE, COMMENT, PROSE, STRING, CorpusItem, token_classes
from lab.fitting import fit, fit_out_of_fold, roc_auc, scores_out_of_fold

Log = Callable[[str], None]
SHARD = 40  # texts per shard file
CLASS_CODES = {CODE: 0, STRING: 1, COMMENT: 2, PROSE: 3}
KINDS = ("code-qwen", "code-raw", "prose", "answer")
# Regularisation strengths `choose_c` tries by default: a router over the hidden state (~900 inputs) needs
# far stronger regularisation than one over the 17 features.
C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


# ---- the texts ---------------------------------------------------------------------------------------

def ordered(items: Sequence[CorpusItem]) -> list[CorpusItem]:
    """The texts in a stable shuffled order (by a hash of each prompt), so any prefix is a fair sample."""
    return sorted(items, key=lambda it: hashlib.sha256((it.module + "\0" + it.prompt).encode()).digest())


def cache_dir() -> Path:
    return cache_folder("target-texts")


def _key(engine: Engine, item: PromptItem, max_tokens: int) -> str:
    target = engine.pair.target_path
    size = target.stat().st_size if target.exists() else 0
    raw = json.dumps([target.name, size, item.prompt, item.chat, max_tokens])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def target_text(engine: Engine, item: PromptItem, max_tokens: int, cache: Path | None = None) -> tuple[list[int], Any]:
    """The target's greedy text for a prompt, as token ids (and its run's Summary when it ran now, None when
    the text came from the cache)."""
    path = cache / f"{_key(engine, item, max_tokens)}.json" if cache is not None else None
    if path is not None and path.is_file():
        return json.loads(path.read_text())["tokens"], None
    tokens, summary = generated(engine, item.prompt, GenerationConfig(policy="target", max_tokens=max_tokens,
                                                                      chat=item.chat))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"prompt": item.prompt, "chat": item.chat, "max_tokens": max_tokens,
                                    "target": engine.pair.target_path.name, "tokens": tokens}))
    return tokens, summary


def written(engine: Engine, prompts: Sequence[PromptItem], max_tokens: int,
            cache: Path | None = None) -> tuple[list[CorpusItem], int]:
    """The target's own answers to a prompt set, as texts to read (each prompt its own group), and how many
    of them came from the cache."""
    items, cached = [], 0
    for i, prompt in enumerate(prompts):
        tokens, run = target_text(engine, prompt, max_tokens, cache)
        cached += run is None
        items.append(CorpusItem(prompt.prompt, "", "", f"prompt {i:05d}", "answer", prompt.chat, tokens=tuple(tokens)))
    return items, cached


# ---- reading -----------------------------------------------------------------------------------------

def choices_along(runner: ModelRunner, prompt: Sequence[int], text: Sequence[int], chunk: int = CHUNK) -> list[int]:
    """A model's own choice (argmax) at every position of `text` after `prompt`, read in batched chunks."""
    out: list[int] = []
    prompt, text = list(prompt), list(text)
    runner.clear()
    for start in range(0, len(text), chunk):
        end = min(start + chunk, len(text))
        rows = runner.advance(prompt + text[:end - 1], end - start)
        out.extend(int(i) for i in np.argmax(rows, axis=1))
    return out


def read_along(engine: Engine, item: CorpusItem, tokens: Sequence[int], hidden: bool = False) -> list[Position]:
    """Both models read `tokens` after the item's prompt, in one batched pass each: at every position the
    draft's reading (`forcing.forced_positions`) and, as its `target_token`, the target's own choice after
    the same prefix, so `Position.differs` is the router's label whoever wrote the text."""
    with engine.pair.writing():
        prompt = engine.encode(item.prompt, item.chat, item.system, item.answer_prefix)
        choices = choices_along(engine.pair.target, prompt, tokens)
        positions = forced_positions(engine.pair, prompt, tokens, hidden=hidden)
    return [replace(p, target_token=t) for p, t in zip(positions, choices)]


@dataclass
class CorpusData:
    """Every position read so far: features, labels and what each position is."""

    x: np.ndarray  # (n, features) float32
    differs: np.ndarray  # (n,) bool: the draft's choice is not the target's
    cls: np.ndarray  # (n,) uint8: CLASS_CODES of the token
    item: np.ndarray  # (n,) int32: index of the text in the ordered texts
    module: np.ndarray  # (n,) int32: index of its group (a module, or a prompt): the unit of folds and of the split
    test: np.ndarray  # (n,) bool: the position's group is in the held-out split
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


def _rows(engine: Engine, it: CorpusItem, index: int, group: int, max_tokens: int, hidden: bool) -> dict | None:
    """One text read by both models, as the columns of CorpusData (None for an empty text)."""
    llm = engine.pair.target.llm
    tokens = list(it.tokens) or llm.tokenize(it.text.encode("utf-8"), add_bos=False, special=False)
    tokens = tokens[:max_tokens]
    if not tokens:
        return None
    classes = token_classes([llm.detokenize([t]) for t in tokens], it.classes, it.text) if it.classes \
        else [PROSE] * len(tokens)
    read = read_along(engine, it, tokens, hidden=hidden)
    n = len(read)
    return {"x": np.stack([p.x for p in read]).astype(np.float32),
            "differs": np.array([p.differs for p in read], dtype=bool),
            "cls": np.array([CLASS_CODES[c] for c in classes], dtype=np.uint8),
            "item": np.full(n, index, dtype=np.int32), "module": np.full(n, group, dtype=np.int32),
            "test": np.full(n, it.split == "test", dtype=bool), "kind": np.full(n, KINDS.index(it.kind), dtype=np.uint8)}


def collect(engine: Engine, items: Sequence[CorpusItem], folder: Path, positions: int, max_tokens: int = 192,
            hidden: bool = True, log: Log = lambda _m: None) -> None:
    """Read texts (in `ordered` order) until the folder holds `positions` positions, going on from the
    shards already there. Each text is cut at `max_tokens` tokens."""
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
    with tqdm(total=positions, initial=min(have, positions), unit="pos", desc="reading the texts",
              dynamic_ncols=True, mininterval=2.0) as bar:
        while have < positions and shard * SHARD < len(items):
            rows = [r for index in range(shard * SHARD, min((shard + 1) * SHARD, len(items)))
                    if (r := _rows(engine, items[index], index, module_index[items[index].module], max_tokens,
                                   hidden)) is not None]
            if rows:
                np.savez(folder / f"shard-{shard:05d}.npz", **{k: np.concatenate([r[k] for r in rows]) for k in rows[0]})
                n = sum(len(r["differs"]) for r in rows)
                have += n
                bar.update(n)
            shard += 1
    log(f"{have} positions in {folder} ({time.perf_counter() - started:.0f} s this run)")


def load(folder: Path) -> CorpusData:
    shards = sorted(folder.glob("shard-*.npz"))
    if not shards:
        raise ValueError(f"no router data in {folder}: collect it first (python -m lab router corpus)")
    parts = [np.load(p) for p in shards]
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("x", "differs", "cls", "item", "module", "test", "kind")}
    return CorpusData(info=json.loads((folder / "manifest.json").read_text()), **cat)


# ---- fitting -----------------------------------------------------------------------------------------

def label(data: CorpusData, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A label and its positions' weights. "differs": the two models' choices differ. "code": they differ
    in code, not inside a string or a comment (where a different word rarely changes what a program does);
    positions in strings and comments are still trained on, as positions where nothing needs the big model."""
    if name == "differs":
        return data.differs.astype(int), None
    if name == "code":
        return (data.differs & ~np.isin(data.cls, [CLASS_CODES[STRING], CLASS_CODES[COMMENT]])).astype(int), None
    raise ValueError(f"unknown label {name!r}: differs or code")


def columns(data: CorpusData, hidden: bool) -> np.ndarray:
    return data.x if hidden else data.x[:, :len(FEATURES)]


def fit_on(data: CorpusData, y: np.ndarray, c: float, hidden: bool, pair: dict | None = None,
           info: dict | None = None) -> Router:
    x = columns(data, hidden).astype(np.float64)
    return fit(x, y, pair=pair, data=info, c=c, n_hidden=data.n_hidden if hidden else 0)


def out_of_fold(data: CorpusData, y: np.ndarray, c: float, hidden: bool, folds: int = 5) -> np.ndarray:
    """Each position's router probability from a router that never saw its group."""
    return fit_out_of_fold(columns(data, hidden).astype(np.float64), y, data.module, c,
                           data.n_hidden if hidden else 0, folds)


def choose_c(data: CorpusData, y: np.ndarray, hidden: bool, grid: Sequence[float] = C_GRID,
             log: Log = lambda _m: None) -> dict[float, float]:
    """Each regularisation strength's ROC AUC out of fold, the folds split by group."""
    return scores_out_of_fold(columns(data, hidden).astype(np.float64), y, data.module, grid,
                              data.n_hidden if hidden else 0, log=log)


def pair_of(data: CorpusData) -> dict[str, str]:
    """The pair the data was read by, as a router names it."""
    return {k: data.info[k] for k in ("draft", "target", "draft_fingerprint", "target_fingerprint") if k in data.info}


def train_router(data: CorpusData, c: float | None = 1.0, split: str = "") -> Router:
    """A router fit on every position of `data` with the label "differs", naming the pair and the data it
    came from. `c` None: the regularisation strength with the best ROC AUC out of fold (`choose_c`)."""
    y, _ = label(data, "differs")
    hidden = data.n_hidden > 0
    grid = choose_c(data, y, hidden) if c is None else {}
    c = max(grid, key=grid.get) if c is None else c
    info = {"prompts": len(np.unique(data.module)), "positions": len(data), "differs_share": float(data.differs.mean()),
            "max_tokens": data.info.get("max_tokens"), "split": split, "c": c, "hidden": data.n_hidden}
    if grid:
        info["out_of_fold_roc_auc"] = {f"{k:g}": v for k, v in grid.items()}
    router = fit_on(data, y, c, hidden, pair_of(data), info)
    info["train_roc_auc"] = roc_auc(router.probability(columns(data, hidden).astype(np.float64)), data.differs)
    return router
