"""Every policy on the same loaded models and prompts, side by side: each figure a ratio to the target alone,
run before and after the others on each prompt, and each row's figures the Summary's own over its runs' sums."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from ..engine.config import GenerationConfig
from ..engine.engine import Engine
from ..engine.events import Counts, ModelStats, Summary, Timings, Work
from ..engine.seed import release_seed_models
from ..serving.examples import Example
from ..serving.machine import Machine, describe_machine, rss_mb
from .costs import Bounds, Costs, bounds, measure_costs
from .peer import PeerResult
from .summaries import scored, target_agreement, text_ppl, written

@dataclass(frozen=True)
class Case:
    label: str
    config: GenerationConfig
    draft: str = ""  # which draft variant's engine runs it ("" the main one; see `run_bench`)


@dataclass
class Row:
    """One case over every prompt: its runs, and how far its text agreed with the target's."""

    label: str
    config: GenerationConfig
    draft: str = ""  # the draft variant ("" the main one)
    runs: list[Summary] = field(default_factory=list)
    bound_s: float | None = None  # the least model time its runs' own calls allow at the measured costs
    agree_tokens: int = 0  # positions equal to the target's own greedy text
    ref_tokens: int = 0
    same_text: int = 0
    rss_mb: float = 0.0  # resident memory right after its runs (the largest over prompts)

    def add(self, summary: Summary, tokens: list[int], reference: list[int]) -> None:
        self.runs.append(summary)
        self.agree_tokens += sum(a == b for a, b in zip(tokens, reference))
        self.ref_tokens += max(len(tokens), len(reference))
        self.same_text += tokens == reference
        self.rss_mb = max(self.rss_mb, rss_mb())

    @property
    def total(self) -> Summary:
        """One Summary of the runs' summed counts, times and model totals (no text, quality, budget or modes)."""
        runs, first = self.runs, self.runs[0]
        counts = Counts(**{f.name: sum(getattr(s.counts, f.name) for s in runs)
                           for f in dataclasses.fields(Counts) if f.name != "modes"})
        timings = Timings(**{name: sum(getattr(s.timings, name) for s in runs)
                             for name in ("wall_s", "routing_s", "router_s")})
        work = Work(draft=sum((s.work.draft for s in runs), ModelStats()),
                    target=sum((s.work.target for s in runs), ModelStats()))
        return Summary(text="", policy=first.policy, stop_reason=first.stop_reason,
                       prompt_tokens=sum(s.prompt_tokens for s in runs), counts=counts, timings=timings, work=work,
                       rule=first.rule, device=first.device)

    @property
    def agreement(self) -> float:
        return self.agree_tokens / self.ref_tokens if self.ref_tokens else 0.0

    @property
    def writing_tokens_per_s(self) -> float | None:
        """The mean over prompts of the speed after the first token (how llama.cpp reports "decoded")."""
        speeds = [s.writing_tokens_per_s for s in self.runs if s.writing_tokens_per_s is not None]
        return sum(speeds) / len(speeds) if speeds else None

    @property
    def text_ppl_by_target(self) -> float | None:
        """The target's perplexity of all this row's texts together (`text_ppl`)."""
        return text_ppl(map(scored, self.runs))

    @property
    def target_agreement(self) -> float | None:
        """Share of all this row's tokens the target would have written itself after the same prefix."""
        return target_agreement(map(scored, self.runs))

    @property
    def efficiency(self) -> float | None:
        """Measured speed over the bound speed: the bound's time over the time the runs took."""
        wall_s = self.total.timings.wall_s
        return self.bound_s / wall_s if self.bound_s is not None and wall_s else None

    def to_dict(self, target_tps: float) -> dict:
        t = self.total
        c, wall_s = t.counts, t.timings.wall_s
        return {"label": self.label, "policy": self.config.policy, "k": self.config.k, "draft": self.draft,
                "threshold": self.config.threshold, "prompts": len(self.runs), "n_tokens": c.n_tokens,
                "wall_s": wall_s, "target_tokens": c.n_target_tokens, "draft_tokens": c.n_draft_tokens,
                "drafted": c.n_drafted, "tokens_per_s": t.tokens_per_s,
                "speedup": t.tokens_per_s / target_tps if target_tps else None, "target_share": c.target_share,
                "acceptance": c.acceptance_rate, "agreement": self.agreement, "same_text": self.same_text,
                "overhead": t.overhead_s / wall_s if wall_s else 0.0, "rss_mb": self.rss_mb,
                "decode_tok_s": self.writing_tokens_per_s, "rule": self.config.rule,
                "text_ppl_by_target": self.text_ppl_by_target, "target_agreement": self.target_agreement,
                "bound_s": self.bound_s, "efficiency": self.efficiency,
                "modes": dict(sum((Counter(s.counts.modes) for s in self.runs), Counter()))}


@dataclass
class BenchResult:
    rows: list[Row]
    costs: Costs  # the main pair's
    bounds: Bounds
    machine: Machine
    llama_cpp: list[PeerResult] | None = None  # None: not run or not built
    variant_costs: dict[str, Costs] = field(default_factory=dict)  # each draft variant's pair

    @property
    def target(self) -> Row:
        return self.rows[0]

    def row(self, label: str) -> Row | None:
        return next((r for r in self.rows if r.label == label), None)

    def to_dict(self) -> dict:
        target_tps = self.target.total.tokens_per_s
        peer = ({"skipped": "llama-speculative-simple not built (scripts/build-llama-cpp-tools)"}
                if self.llama_cpp is None else {str(p.k): p.to_dict() for p in self.llama_cpp})
        return {"rows": [r.to_dict(target_tps) for r in self.rows], "costs": self.costs.to_dict(),
                "bounds": self.bounds.to_dict(), "machine": self.machine.to_dict(), "llama_cpp": peer,
                "variant_costs": {name: c.to_dict() for name, c in self.variant_costs.items()}}


def default_cases(max_tokens: int, thresholds: Sequence[float] = (2, 3, 5, 10, 20),
                  ks: Sequence[int] = (1, 2, 4, 8), seed_loop: bool = True,
                  rules: Sequence[str] = ("entropy", "margin")) -> list[Case]:
    """Every policy; cascade at each perplexity threshold, and with each of `rules` at its default."""
    base = GenerationConfig(max_tokens=max_tokens)
    cases = [Case("draft", base.replace(policy="draft"))]
    cases += [Case(f"cascade {t:g}", base.replace(policy="cascade", threshold=float(t))) for t in thresholds]
    # threshold=None: the rule's own default (GenerationConfig fills it in)
    cases += [Case(f"cascade · {rule} {GenerationConfig(rule=rule).threshold:g}",
                   base.replace(policy="cascade", rule=rule, threshold=None)) for rule in rules]
    cases.append(Case("bild 5 / 20", base.replace(policy="bild", threshold=5.0, rollback_threshold=20.0)))
    cases += [Case(f"speculative k={k}", base.replace(policy="speculative", k=k, threshold=1e6)) for k in ks]
    cases.append(Case("lookup k=4", base.replace(policy="lookup", k=4)))
    cases.append(Case("lookup+draft k=4", base.replace(policy="lookup+draft", k=4, threshold=1e6)))
    cases.append(Case("auto", base.replace(policy="auto")))
    if seed_loop:
        # Last: its models hold logits for every position, and peak memory only ever grows.
        cases.append(Case("seed (threshold 5)", base.replace(policy="seed", threshold=5.0)))
    return cases


def with_draft_variants(cases: Sequence[Case], variants: Sequence[str]) -> list[Case]:
    """Every case again for each draft variant (but the seed's slow loop), labelled with its name."""
    out = list(cases)
    for name in variants:
        out += [Case(f"{c.label} · {name}", c.config, draft=name) for c in cases if c.config.policy != "seed"]
    return out


def run_bench(engine: Engine, examples: Iterable[Example], cases: list[Case], max_tokens: int,
              log: Callable[[str], None] = print, variants: Mapping[str, Engine] | None = None) -> BenchResult:
    """Every case on every prompt, the target alone around each prompt's; `variants`: engines with other drafts."""
    examples = list(examples)
    engines = {"": engine, **(variants or {})}
    target_config = GenerationConfig(policy="target", max_tokens=max_tokens)
    rows = [Row("target", target_config)] + [Row(c.label, c.config, c.draft) for c in cases]
    for e in engines.values():
        e.calibrate()  # as loading: weights paged in, auto's costs measured; no case pays for it
    for example in examples:
        log(f"prompt: {example.name}")
        reference, first = written(engine, example.prompt, target_config.replace(chat=example.chat))
        rows[0].add(first, reference, reference)
        for row in rows[1:]:
            tokens, summary = written(engines[row.draft], example.prompt, row.config.replace(chat=example.chat))
            row.add(summary, tokens, reference)
            release_seed_models(engines[row.draft].pair)
            log(f"  {row.label:26s} {summary.tokens_per_s:6.2f} tok/s  {summary.counts.n_tokens} tokens")
        tokens, last = written(engine, example.prompt, target_config.replace(chat=example.chat))
        rows[0].add(last, tokens, reference)
    context = engine.encode(examples[0].prompt, examples[0].chat)
    costs = {name: measure_costs(e.pair, context) for name, e in engines.items()}
    for row in rows:
        if all(s.work.call_sizes for s in row.runs):
            row.bound_s = sum(costs[row.draft].calls_s(s.work.call_sizes, s.work.extra_rows) for s in row.runs)
    horizon = max(r.total.counts.n_tokens // max(len(r.runs), 1) for r in rows)
    measured_acceptance = {r.config.k: r.total.counts.acceptance_rate for r in rows
                           if r.config.policy == "speculative" and not r.draft and r.total.counts.acceptance_rate}
    return BenchResult(rows=rows, costs=costs[""], bounds=bounds(costs[""], horizon, measured_acceptance),
                       machine=describe_machine(engine.pair),
                       variant_costs={name: c for name, c in costs.items() if name})
