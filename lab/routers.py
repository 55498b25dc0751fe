"""Training the learned router, and measuring every rule's quality/cost picture on a prompt set.

Both start from the same data (teacher forcing, `engine/forcing.py`): the target's own greedy text for
each prompt, and one batched draft pass over it. The target's texts are kept in a cache folder (keyed by
the target file, the prompt and the length), so training and evaluating again does not run the target again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..engine.config import GenerationConfig
from ..engine.engine import Engine
from ..engine.events import Summary
from ..routing.curves import Curve, Position, roc_auc, rule_curves
from ..routing.identity import fingerprint
from ..routing.router import FEATURES, Router, fit, scores_out_of_fold
from ..routing.rules import RULE_TABLE
from ..serving.examples import PromptItem
from .local import cache_folder
from .summaries import summary_of, target_agreement, text_ppl, written

Log = Callable[[str], None]
AGREEMENTS = (0.9, 0.95, 0.99)


def cache_dir() -> Path:
    return cache_folder("target-texts")


@dataclass
class PromptData:
    """One prompt's teacher-forced positions, with the target's run that wrote the text (None if cached)."""

    item: PromptItem
    text: list[int]
    positions: list[Position]
    target_run: Summary | None = None


def _key(engine: Engine, item: PromptItem, max_tokens: int) -> str:
    target = engine.pair.target_path
    size = target.stat().st_size if target.exists() else 0
    raw = json.dumps([target.name, size, item.prompt, item.chat, max_tokens])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def target_text(engine: Engine, item: PromptItem, max_tokens: int, cache: Path | None = None,
                ) -> tuple[list[int], Summary | None]:
    """The target's greedy text for a prompt, as token ids (and its run's Summary when it ran now)."""
    path = cache / f"{_key(engine, item, max_tokens)}.json" if cache is not None else None
    if path is not None and path.is_file():
        return json.loads(path.read_text())["tokens"], None
    tokens, summary = written(engine, item.prompt, GenerationConfig(policy="target", max_tokens=max_tokens,
                                                                    chat=item.chat))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"prompt": item.prompt, "chat": item.chat, "max_tokens": max_tokens,
                                    "target": engine.pair.target_path.name, "tokens": tokens}))
    return tokens, summary


def collect(engine: Engine, items: Sequence[PromptItem], max_tokens: int, cache: Path | None = None,
            hidden: bool = False) -> list[PromptData]:
    """Teacher-forced positions for every prompt: the target's text (run or cached), then one draft pass
    (its features with the draft's hidden state when `hidden`), with a progress bar."""
    from tqdm import tqdm

    out = []
    with tqdm(items, unit="prompt", desc="teacher forcing", dynamic_ncols=True, mininterval=1.0) as bar:
        for item in bar:
            text, run = target_text(engine, item, max_tokens, cache)
            positions = engine.teacher_force(item.prompt, item.chat, text, hidden=hidden) if text else []
            out.append(PromptData(item, text, positions, run))
            bar.set_postfix_str(f"{len(text)} tokens{' (target ran)' if run else ' (cached)'}", refresh=False)
    return out


def pooled(data: Sequence[PromptData]) -> list[Position]:
    return [p for d in data for p in d.positions]


# Regularisation strengths `choose_c` tries: a router over the hidden state has ~900 inputs for ~10k
# positions, and needs far stronger regularisation than one over 17 features.
C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


def _xy(data: Sequence[PromptData]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and each position's prompt index."""
    positions = pooled(data)
    if not positions:
        raise ValueError("no positions to train on: the target wrote nothing for these prompts")
    x = np.stack([p.x for p in positions])
    y = np.array([p.differs for p in positions], dtype=int)
    groups = np.array([i for i, d in enumerate(data) for _ in d.positions])
    return x, y, groups


def choose_c(data: Sequence[PromptData], folds: int = 5, grid: Sequence[float] = C_GRID) -> dict[float, float]:
    """Each regularisation strength's ROC AUC out of fold, the folds split by prompt (a prompt's positions
    are never both trained and judged on)."""
    x, y, groups = _xy(data)
    return scores_out_of_fold(x, y, groups, grid, n_hidden=x.shape[1] - len(FEATURES), folds=folds)


def train_router(engine: Engine, data: Sequence[PromptData], c: float | None = 1.0, split: str = "") -> Router:
    """A router fit on every position of `data`, naming the pair and the data it came from. `c` None: the
    regularisation strength with the best ROC AUC out of fold (`choose_c`)."""
    x, y, _ = _xy(data)
    n_hidden = x.shape[1] - len(FEATURES)
    grid = choose_c(data) if c is None else {}
    c = max(grid, key=grid.get) if c is None else c
    pair = {"draft": engine.pair.draft_path.name, "target": engine.pair.target_path.name,
            "draft_fingerprint": fingerprint(engine.pair.draft_path),
            "target_fingerprint": fingerprint(engine.pair.target_path)}
    info = {"prompts": len(data), "positions": len(y), "differs_share": float(y.mean()),
            "max_tokens": max((len(d.text) for d in data), default=0), "split": split, "c": c,
            "hidden": n_hidden}
    if grid:
        info["out_of_fold_roc_auc"] = {f"{k:g}": v for k, v in grid.items()}
    router = fit(x, y, pair=pair, data=info, c=c, n_hidden=n_hidden)
    info["train_roc_auc"] = roc_auc(router.probability(x), y.astype(bool))
    return router


# ---- evaluating every rule ----------------------------------------------------------------------------


@dataclass
class RealRun:
    """Cascade with one rule at one threshold, run for real on every prompt."""

    rule: str
    threshold: float
    forced_share: float  # teacher-forced: the share this threshold escalates
    forced_agreement: float
    share: float = 0.0  # measured: tokens the target wrote / all tokens
    agreement: float = 0.0  # measured: tokens the target would have written itself after the same prefix
    text_ppl_by_target: float | None = None
    tokens_per_s: float = 0.0
    speedup: float = 0.0  # tokens/s against the target alone in the same run
    routing_share: float = 0.0  # of wall time: reading rows and applying the rule (router included)
    router_share: float = 0.0  # of wall time: the router's features and score alone
    summaries: list[dict] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "summaries"}
        d["agreement_gap_points"] = 100 * (self.forced_agreement - self.agreement)
        return d


@dataclass
class Baseline:
    policy: str
    tokens: int = 0
    wall_s: float = 0.0
    text_ppl_by_target: float | None = None
    agreement: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0

    @classmethod
    def of(cls, policy: str, runs: Sequence[Summary]) -> "Baseline":
        """A policy alone over every prompt: its runs' tokens and time summed, their texts weighed together."""
        return cls(policy, sum(s.n_tokens for s in runs), sum(s.wall_s for s in runs), text_ppl(runs),
                   target_agreement(runs))

    def to_dict(self) -> dict:
        return {"policy": self.policy, "tokens": self.tokens, "wall_s": self.wall_s,
                "tokens_per_s": self.tokens_per_s, "text_ppl_by_target": self.text_ppl_by_target,
                "agreement": self.agreement}


@dataclass
class RoutersResult:
    prompts: int
    positions: int
    max_tokens: int
    curves: dict[str, Curve]
    roc: dict[str, float | None]
    baselines: dict[str, Baseline] = field(default_factory=dict)
    real: dict[str, RealRun] = field(default_factory=dict)
    break_even_share: float | None = None
    costs: dict[str, Any] = field(default_factory=dict)
    router: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        rules = {}
        for name, c in self.curves.items():
            d = c.to_dict(AGREEMENTS)
            d["roc_auc"] = self.roc.get(name)
            if name in self.real:
                d["real"] = self.real[name].to_dict()
            rules[name] = d
        return {"prompts": self.prompts, "positions": self.positions, "max_tokens": self.max_tokens,
                "rules": rules, "baselines": {k: b.to_dict() for k, b in self.baselines.items()},
                "break_even_share": self.break_even_share, "costs": self.costs, "router": self.router,
                "machine": self.machine}


def run_policy(engine: Engine, items: Sequence[PromptItem], config: GenerationConfig) -> list[Summary]:
    return [summary_of(engine, item.prompt, config.replace(chat=item.chat)) for item in items]


def evaluate(engine: Engine, items: Sequence[PromptItem], max_tokens: int, share: float = 0.10,
             real: bool = True, log: Log = lambda _m: None) -> RoutersResult:
    """Every rule's teacher-forced curve on `items`, and (if `real`) cascade run for real at each rule's
    threshold nearest `share`, beside the target alone and the draft alone on the same prompts."""
    # The target alone runs first, timed: its texts are the teacher-forced curves' texts too.
    from tqdm import tqdm

    target_runs: list[Summary] = []
    data: list[PromptData] = []
    for item in tqdm(items, unit="prompt", desc="target alone + draft pass", dynamic_ncols=True, mininterval=1.0):
        text, summary = target_text(engine, item, max_tokens, cache=None)
        target_runs.append(summary)
        data.append(PromptData(item, text, engine.teacher_force(item.prompt, item.chat, text) if text else [], summary))
    positions = pooled(data)
    curves = rule_curves(positions)
    differs = [p.differs for p in positions]
    roc = {name: roc_auc([RULE_TABLE[name].doubt(RULE_TABLE[name].score(p.reading)) for p in positions], differs)
           for name in curves}
    result = RoutersResult(prompts=len(items), positions=len(positions), max_tokens=max_tokens, curves=curves,
                           roc=roc)
    result.baselines["target"] = Baseline.of("target", target_runs)
    if engine.router is not None:
        result.router = {"trained_on": engine.router.trained_on, "data": engine.router.data}
    if not real:
        return result
    draft_runs = run_policy(engine, items, GenerationConfig(policy="draft", max_tokens=max_tokens))
    result.baselines["draft"] = Baseline.of("draft", draft_runs)
    log(f"[draft alone] {result.baselines['draft'].tokens_per_s:.1f} tokens/s")
    target_speed = result.baselines["target"].tokens_per_s
    for name, c in curves.items():
        threshold = c.threshold_for_share(share)
        summaries = run_policy(engine, items, GenerationConfig(policy="cascade", rule=name, threshold=threshold,
                                                               max_tokens=max_tokens))
        tokens, wall = sum(s.n_tokens for s in summaries), sum(s.wall_s for s in summaries)
        i = c.thresholds.index(threshold) if threshold in c.thresholds else c.index_near(share)
        run = RealRun(rule=name, threshold=threshold, forced_share=c.shares[i], forced_agreement=c.agreements[i],
                      share=sum(s.n_target_tokens for s in summaries) / tokens if tokens else 0.0,
                      agreement=target_agreement(summaries) or 0.0, text_ppl_by_target=text_ppl(summaries),
                      tokens_per_s=tokens / wall if wall else 0.0,
                      routing_share=sum(s.routing_s for s in summaries) / wall if wall else 0.0,
                      router_share=sum(s.router_s for s in summaries) / wall if wall else 0.0,
                      summaries=[s.to_dict() for s in summaries])
        run.speedup = run.tokens_per_s / target_speed if target_speed else 0.0
        result.real[name] = run
        log(f"[cascade, {name} at {threshold:.4g}] share {run.share:.1%} (teacher-forced {run.forced_share:.1%}), "
            f"agreement {run.agreement:.1%} (teacher-forced {run.forced_agreement:.1%}), "
            f"{run.tokens_per_s:.1f} tokens/s ({run.speedup:.2f}x the target alone)")
    return result
