"""Where sharing pays: for each size of big model, what the small model's help is worth on this machine, measured
(cascade at each budget beside the big model alone) and predicted (the smallest pair's calls replayed at each size's
measured costs). A size without its real file runs as a stand-in (`standin`): its speed is real, its text is noise."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..engine.catalog import Size
from ..engine.config import GenerationConfig, ModelConfig
from ..engine.engine import Engine
from ..engine.events import Counts, Summary, Timings, Work
from ..engine.models import ModelPair, load_pair
from ..serving.examples import Example
from .costs import Costs, measure_costs

Log = Callable[[str], None]

SPECULATIVE_K = 4
COST_REPEATS = 5  # each cost the median of this many calls


@dataclass(frozen=True)
class BigModel:
    """One big model to measure: its size, the file that runs, and whether that file is a stand-in."""

    size: Size
    path: Path
    stand_in: bool


@dataclass
class Run:
    """One generation's figures that the map needs: its Summary and the tokens it kept."""

    summary: Summary

    @property
    def tokens(self) -> int:
        return self.summary.counts.n_tokens

    @property
    def wall_s(self) -> float:
        return self.summary.timings.wall_s

    @classmethod
    def from_dict(cls, d: dict) -> "Run":
        """A run as `to_dict` wrote it: what the map reads of it (tokens, writers, time, calls)."""
        counts = Counts(d["tokens"], d["tokens"] - d["by_big_model"], d["by_big_model"])
        calls = {m: {int(n): k for n, k in sizes.items()} for m, sizes in d["call_sizes"].items()}
        return cls(Summary(text="", policy=d["policy"], stop_reason=d["stop"], prompt_tokens=0, counts=counts,
                           timings=Timings(d["wall_s"]),
                           work=Work(call_sizes=calls, extra_rows=d.get("extra_rows", {}))))

    def to_dict(self) -> dict:
        c = self.summary.counts
        return {"policy": self.summary.policy, "tokens": c.n_tokens, "by_big_model": c.n_target_tokens,
                "wall_s": self.wall_s, "stop": self.summary.stop_reason,
                "call_sizes": {m: {str(n): k for n, k in sizes.items()}
                               for m, sizes in self.summary.work.call_sizes.items()},
                "extra_rows": self.summary.work.extra_rows}


@dataclass
class SizeResult:
    """Everything measured on one big model: its costs, its runs alone, and its runs at each budget."""

    model: BigModel
    costs: Costs
    alone: list[Run] = field(default_factory=list)
    shared: dict[float, list[Run]] = field(default_factory=dict)  # budget -> runs, one per prompt
    speculative: list[Run] = field(default_factory=list)  # only where the weights are real

    @property
    def target_tok_s(self) -> float:
        return _speed(self.alone)

    def measured_vs_target(self, budget: float) -> float | None:
        runs = self.shared.get(budget)
        return _speed(runs) / self.target_tok_s if runs and self.target_tok_s else None

    def speculative_vs_target(self) -> float | None:
        return _speed(self.speculative) / self.target_tok_s if self.speculative and self.target_tok_s else None

    @classmethod
    def from_dicts(cls, model: BigModel, costs: dict, runs: dict) -> "SizeResult":
        """A size's result as a where-it-pays file keeps it (`Costs.to_dict`, `runs_dict`)."""
        result = cls(model, Costs(costs["draft_step_s"], costs["target_step_s"],
                                  {int(n): s for n, s in costs["target_batch_s"].items()},
                                  {int(n): s for n, s in costs["draft_batch_s"].items()}, costs["extra_row_s"]))
        result.alone = [Run.from_dict(r) for r in runs["alone"]]
        result.speculative = [Run.from_dict(r) for r in runs["speculative"]]
        result.shared = {float(way.split()[1]): [Run.from_dict(r) for r in rs] for way, rs in runs.items()
                         if way.startswith("cascade ")}
        return result

    def runs_dict(self) -> dict:
        """Every run's tokens, the big model's part, time and stop, by way of writing."""
        return {"alone": [r.to_dict() for r in self.alone], "speculative": [r.to_dict() for r in self.speculative],
                **{f"cascade {b:g}": [r.to_dict() for r in runs] for b, runs in self.shared.items()}}


def _speed(runs: Sequence[Run]) -> float:
    wall = sum(r.wall_s for r in runs)
    return sum(r.tokens for r in runs) / wall if wall else 0.0


# ---- prediction ------------------------------------------------------------------------------------

def replay_s(run: Run, costs: Costs) -> float:
    """A run's model calls, by size as they happened, at `costs`' prices (time outside the models is left out)."""
    work = run.summary.work
    return costs.calls_s(work.call_sizes, work.extra_rows)


def predicted_vs_target(shared: Sequence[Run], alone: Sequence[Run], costs: Costs) -> float | None:
    """A way of sharing's speed over the big model alone at `costs`, replaying the pattern pair's runs of both."""
    if not shared or not alone:
        return None
    shared_s, alone_s = sum(replay_s(r, costs) for r in shared), sum(replay_s(r, costs) for r in alone)
    if not shared_s or not alone_s:
        return None
    return (sum(r.tokens for r in shared) / shared_s) / (sum(r.tokens for r in alone) / alone_s)


# ---- the rows ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MapRow:
    """One size and way of sharing: measured and predicted speed over the big model alone."""

    target: str
    params_b: float
    stand_in: bool
    policy: str
    budget: float | None
    measured_vs_target: float | None
    predicted_vs_target: float | None
    target_tok_s: float
    draft_cost_ratio: float  # the small model's cost per token over the big one's
    catchup_cost_ratio: float  # the big model's cost per token of a short read over its cost of one step

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def rows_for(result: SizeResult, pattern: SizeResult) -> list[MapRow]:
    costs = result.costs
    common = dict(target=result.model.size.name, params_b=result.model.size.params_b,
                  stand_in=result.model.stand_in, target_tok_s=result.target_tok_s,
                  draft_cost_ratio=costs.draft_step_s / costs.target_step_s,
                  catchup_cost_ratio=costs.target_extra_s() / costs.target_step_s)
    rows = [MapRow(policy="cascade", budget=b, measured_vs_target=result.measured_vs_target(b),
                   predicted_vs_target=predicted_vs_target(pattern.shared.get(b, []), pattern.alone, costs), **common)
            for b in sorted(result.shared)]
    if pattern.speculative:
        rows.append(MapRow(policy=f"speculative k={SPECULATIVE_K}", budget=None,
                           measured_vs_target=result.speculative_vs_target(),
                           predicted_vs_target=predicted_vs_target(pattern.speculative, pattern.alone, costs),
                           **common))
    return rows


# ---- running ----------------------------------------------------------------------------------------

def _run(engine: Engine, example: Example, config: GenerationConfig) -> Run:
    """One generation without the scoring read: the map times writing only."""
    config = config.replace(chat=example.chat)
    summaries = [e for e in engine.generate(example.prompt, config, score=False) if isinstance(e, Summary)]
    return Run(summaries[-1])


def write_to_the_end(pair: ModelPair) -> None:
    """Let no model choose an end of generation, as no model may choose padding: every answer runs to its
    `max_tokens` (llama-bench's fixed lengths), since a stand-in's nonsense may make the small model stop early."""
    ends = [t for t in range(pair.n_vocab) if pair.is_end_of_generation(t)]
    for runner in (pair.draft, pair.target):
        kept = runner.padding if runner.padding is not None else np.empty(0, dtype=np.int64)
        runner.padding = np.union1d(kept, ends).astype(np.int64)


def measure_size(model: BigModel, models: ModelConfig, examples: Sequence[Example], budgets: Sequence[float],
                 max_tokens: int, speculative: bool, log: Log = print) -> SizeResult:
    """Load the small model with `model`, measure its costs, then run the big model alone, cascade at each
    budget (the perplexity rule: the budget sets its threshold) and, if asked, speculative decoding."""
    pair = load_pair(dataclasses.replace(models, target=str(model.path), parallel=1),
                     progress=lambda msg: log(f"  [{msg}]"))
    try:
        write_to_the_end(pair)
        engine = Engine(pair)
        context = engine.encode(examples[0].prompt, examples[0].chat)
        log(f"  measuring costs ({model.size.name}{', stand-in' if model.stand_in else ''})")
        result = SizeResult(model, measure_costs(pair, context, repeats=COST_REPEATS))
        base = GenerationConfig(max_tokens=max_tokens)
        for example in examples:
            run = _run(engine, example, base.replace(policy="target"))
            result.alone.append(run)
            log(f"  {example.name}: big model alone {run.tokens / run.wall_s:5.2f} tok/s")
            for budget in budgets:
                run = _run(engine, example, base.replace(policy="cascade", rule="perplexity", budget=budget))
                result.shared.setdefault(budget, []).append(run)
                log(f"  {example.name}: cascade, budget {budget:.0%}: {run.tokens / run.wall_s:5.2f} tok/s "
                    f"({run.summary.counts.target_share:.0%} by the big model)")
            if speculative:
                run = _run(engine, example, base.replace(policy="speculative", k=SPECULATIVE_K))
                result.speculative.append(run)
                log(f"  {example.name}: speculative k={SPECULATIVE_K} {run.tokens / run.wall_s:5.2f} tok/s")
        return result
    finally:
        pair.draft.close()
        pair.target.close()


def break_even_sentence(rows: Sequence[MapRow], budget: float = 0.1) -> str:
    """The map in one sentence: from which size the small model saves time at `budget`, and by how much."""
    at = sorted((r for r in rows if r.policy == "cascade" and r.budget == budget), key=lambda r: r.params_b)
    if not at:
        return f"No size ran at a {budget:.0%} share."
    speed = {r.target: r.measured_vs_target if r.measured_vs_target is not None else r.predicted_vs_target
             for r in at}
    paying = [r for r in at if (speed[r.target] or 0) > 1.0]
    tried = ", ".join(r.target for r in at)
    if not paying:
        best = max(speed.values(), key=lambda v: v or 0)
        return (f"On this machine a 0.5B small model does not save time with any big model tried ({tried}) at a "
                f"{budget:.0%} share: the best is {best:.2f}× the big model alone.")
    first = paying[0]
    figures = ", ".join(f"{speed[r.target]:.2f}× with {r.target}" for r in paying)
    return (f"On this machine a 0.5B small model saves time with a big model of {first.target} or more at a "
            f"{budget:.0%} share: {figures}.")
