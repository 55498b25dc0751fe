"""Per-call costs of the two models, measured on the loaded pair (`measure_costs`), and the best speed each
policy could reach at them (`bounds`, by `costmodel`'s formulas)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..engine.costmodel import cascade_cost, speculative_cost, break_even_share
from ..engine.models import ModelPair
from ..engine.runner import ModelRunner

# Verification batches are small; 32 and 64 stand for catch-ups and a prompt's reading.
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Costs:
    draft_step_s: float  # one draft token
    target_step_s: float  # one target token
    target_batch_s: dict[int, float] = field(default_factory=dict)  # n tokens in one target call
    draft_batch_s: dict[int, float] = field(default_factory=dict)
    # What each logits row beyond the first adds to a call (the LM head for that position), by model
    extra_row_s: dict[str, float] = field(default_factory=dict)

    def call_s(self, model: str, n: int) -> float:
        """Cost of one call of `model` ("draft" or "target") over n tokens, interpolated between measured sizes."""
        return _interpolate(self.draft_batch_s if model == "draft" else self.target_batch_s, n)

    def calls_s(self, call_sizes: dict[str, dict[int, int]], extra_rows: dict[str, int] | None = None) -> float:
        """The least model time a run's calls ({model: {tokens: calls}}, extra logits rows) take at these prices."""
        calls = sum(count * self.call_s(model, int(n)) for model, sizes in call_sizes.items()
                    for n, count in sizes.items())
        return calls + sum(n * self.extra_row_s.get(model, 0.0) for model, n in (extra_rows or {}).items())

    def target_extra_s(self) -> float:
        """The target's cost for each further token of a call (from 1 to 16 tokens)."""
        return (self.call_s("target", 16) - self.target_step_s) / 15

    def speculative_s_per_token(self, k: int, alpha: float) -> float:
        """Expected seconds per token of greedy speculative decoding: k drafts, per-token acceptance alpha."""
        return speculative_cost(self.draft_step_s, self.call_s("target", k + 1), k, alpha)

    def break_even_share(self, horizon: int) -> float:
        """The largest big-model share at which cascade still beats the target alone at these prices."""
        return break_even_share(self.draft_step_s, self.target_step_s, self.target_extra_s(), horizon)

    def to_dict(self) -> dict:
        return asdict(self)


def _interpolate(measured: dict[int, float], n: int) -> float:
    sizes = sorted(measured)
    if n > sizes[-1]:  # beyond what was measured, the per-token cost of the largest batch
        return measured[sizes[-1]] * n / sizes[-1]
    return float(np.interp(n, sizes, [measured[s] for s in sizes]))


def _time_call(runner: ModelRunner, context: list[int], n: int, rows: int, repeats: int) -> float:
    """Median time of evaluating n tokens on top of `context` (rolled back after each), with `rows` logits rows."""
    extra = [context[i % len(context)] for i in range(n)]
    times = []
    for _ in range(repeats):
        runner.advance(context, 1)  # the cache holds exactly the context
        t = time.perf_counter()
        runner.advance(context + extra, rows)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


# A check of k = 4 drafts asks for 5 rows: the extra rows' cost is measured at that size.
ROWS_MEASURED_AT = 5


def measure_costs(pair: ModelPair, context: list[int], repeats: int = 5) -> Costs:
    with pair.lock:
        target = {n: _time_call(pair.target, context, n, 1, repeats) for n in BATCH_SIZES}
        draft = {n: _time_call(pair.draft, context, n, 1, repeats) for n in BATCH_SIZES}
        n = ROWS_MEASURED_AT
        extra_row = {name: max(0.0, _time_call(runner, context, n, n, repeats)
                               - _time_call(runner, context, n, 1, repeats)) / (n - 1)
                     for name, runner in (("target", pair.target), ("draft", pair.draft))}
    return Costs(draft_step_s=draft[1], target_step_s=target[1], target_batch_s=target, draft_batch_s=draft,
                 extra_row_s=extra_row)


@dataclass(frozen=True)
class Bounds:
    """The best speeds the measured costs allow, as ratios to the target alone."""

    cascade_at_share: dict[float, float]  # escalation share (evenly spread) -> ratio
    speculative_best_case: dict[int, float]  # k -> ratio if every draft were accepted
    speculative_at_measured_acceptance: dict[int, float]  # k -> ratio at the acceptance the bench saw

    def to_dict(self) -> dict:
        return {"cascade_at_share": {f"{s:.2f}": v for s, v in self.cascade_at_share.items()},
                "speculative_best_case_k": {str(k): v for k, v in self.speculative_best_case.items()},
                "speculative_at_measured_acceptance": {f"speculative k={k}": v for k, v in
                                                       self.speculative_at_measured_acceptance.items()}}


def bounds(costs: Costs, horizon: int, measured_acceptance: dict[int, float],
           shares=(0.0, 0.05, 0.1, 0.2, 0.3), ks=(1, 2, 4, 8)) -> Bounds:
    """What `costs` allow over texts of `horizon` tokens; `measured_acceptance`: k to the share of drafts kept."""
    t1, extra = costs.target_step_s, costs.target_extra_s()
    return Bounds(
        cascade_at_share={s: t1 / cascade_cost(costs.draft_step_s, t1, extra, s, horizon) for s in shares},
        speculative_best_case={k: t1 / costs.speculative_s_per_token(k, 1.0) for k in ks},
        speculative_at_measured_acceptance={k: t1 / costs.speculative_s_per_token(k, min(a, 0.999))
                                            for k, a in measured_acceptance.items()},
    )
