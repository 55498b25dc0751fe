"""Every rule's quality/cost picture on a prompt set (`python -m lab routers`): each rule's curve from
teacher forcing (the target's own greedy text for each prompt, cached, and one batched draft pass over it),
and real cascade runs at each rule's threshold nearest a share, beside the target and the draft alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from cascade.bench.summaries import scored, target_agreement, text_ppl, written
from cascade.engine.config import GenerationConfig
from cascade.engine.engine import Engine
from cascade.engine.events import Summary
from cascade.routing.curves import Curve, Position, rule_curves
from cascade.routing.rules import RULE_TABLE
from lab.prompts import PromptItem
from lab.fitting import roc_auc
from lab.router_data import target_text

Log = Callable[[str], None]
AGREEMENTS = (0.9, 0.95, 0.99)


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
        figures = [scored(s) for s in runs]
        return cls(policy, sum(s.counts.n_tokens for s in runs), sum(s.timings.wall_s for s in runs),
                   text_ppl(figures), target_agreement(figures))

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
    return [written(engine, item.prompt, config.replace(chat=item.chat))[1] for item in items]


def evaluate(engine: Engine, items: Sequence[PromptItem], max_tokens: int, share: float = 0.10,
             real: bool = True, log: Log = lambda _m: None) -> RoutersResult:
    """Every rule's teacher-forced curve on `items`, and (if `real`) cascade run for real at each rule's
    threshold nearest `share`, beside the target alone and the draft alone on the same prompts."""
    # The target alone runs first, timed: its texts are the teacher-forced curves' texts too.
    from tqdm import tqdm

    target_runs: list[Summary] = []
    positions: list[Position] = []
    for item in tqdm(items, unit="prompt", desc="target alone + draft pass", dynamic_ncols=True, mininterval=1.0):
        text, summary = target_text(engine, item, max_tokens, cache=None)
        target_runs.append(summary)
        positions += engine.teacher_force(item.prompt, item.chat, text) if text else []
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
        tokens, wall = sum(s.counts.n_tokens for s in summaries), sum(s.timings.wall_s for s in summaries)
        figures = [scored(s) for s in summaries]
        i = c.thresholds.index(threshold) if threshold in c.thresholds else c.index_near(share)
        run = RealRun(rule=name, threshold=threshold, forced_share=c.shares[i], forced_agreement=c.agreements[i],
                      share=sum(s.counts.n_target_tokens for s in summaries) / tokens if tokens else 0.0,
                      agreement=target_agreement(figures) or 0.0, text_ppl_by_target=text_ppl(figures),
                      tokens_per_s=tokens / wall if wall else 0.0,
                      routing_share=sum(s.timings.routing_s for s in summaries) / wall if wall else 0.0,
                      router_share=sum(s.timings.router_s for s in summaries) / wall if wall else 0.0,
                      summaries=[s.to_dict() for s in summaries])
        run.speedup = run.tokens_per_s / target_speed if target_speed else 0.0
        result.real[name] = run
        log(f"[cascade, {name} at {threshold:.4g}] share {run.share:.1%} (teacher-forced {run.forced_share:.1%}), "
            f"agreement {run.agreement:.1%} (teacher-forced {run.forced_agreement:.1%}), "
            f"{run.tokens_per_s:.1f} tokens/s ({run.speedup:.2f}x the target alone)")
    return result
