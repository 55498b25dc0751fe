"""Per-call costs of the two models, measured, and the speed bounds they imply.

Every policy's speed is set by three numbers: the draft's cost per token (one decode each), the
target's cost for one token, and the target's cost for a batch of n tokens. `measure_costs` times
them on the loaded pair; `Bounds` turns them into the best speed each policy could reach.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .models import ModelPair
from .runner import ModelRunner

BATCH_SIZES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Costs:
    draft_step_s: float  # one draft token
    target_step_s: float  # one target token
    target_batch_s: dict[int, float] = field(default_factory=dict)  # n tokens in one target call
    draft_batch_s: dict[int, float] = field(default_factory=dict)

    def target_batch(self, n: int) -> float:
        """Cost of a target call over n tokens, interpolated linearly between measured sizes."""
        sizes = sorted(self.target_batch_s)
        if n > sizes[-1]:  # beyond what was measured, the per-token cost of the largest batch
            return self.target_batch_s[sizes[-1]] * n / sizes[-1]
        return float(np.interp(n, sizes, [self.target_batch_s[s] for s in sizes]))

    def speculative_s_per_token(self, k: int, alpha: float) -> float:
        """Expected seconds per emitted token of greedy speculative decoding with k drafts and a
        per-token acceptance rate alpha (Leviathan et al.: (1 - a^(k+1)) / (1 - a) tokens per round)."""
        emitted = (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1
        return (k * self.draft_step_s + self.target_batch(k + 1)) / emitted

    def cascade_s_per_token(self, escalation_rate: float) -> float:
        """Expected seconds per token of cascade: a draft step for every token, and for each escalation
        one target call that catches up on the tokens since the last (1 / rate of them)."""
        if escalation_rate <= 0:
            return self.draft_step_s
        run = 1 / escalation_rate
        return self.draft_step_s + escalation_rate * self.target_batch(run)

    def to_dict(self) -> dict:
        return {"draft_step_s": self.draft_step_s, "target_step_s": self.target_step_s,
                "target_batch_s": self.target_batch_s, "draft_batch_s": self.draft_batch_s}


def _time_batches(runner: ModelRunner, context: list[int], sizes, repeats: int) -> dict[int, float]:
    """Median time of evaluating n tokens on top of `context` (rolled back after each)."""
    out = {}
    for n in sizes:
        extra = [context[i % len(context)] for i in range(n)]
        times = []
        for _ in range(repeats):
            runner.advance(context, 1)  # the cache holds exactly the context
            t = time.perf_counter()
            runner.advance(context + extra, 1)
            times.append(time.perf_counter() - t)
        out[n] = float(np.median(times))
    return out


def measure_costs(pair: ModelPair, context: list[int], repeats: int = 5) -> Costs:
    with pair.lock:
        target = _time_batches(pair.target, context, BATCH_SIZES, repeats)
        draft = _time_batches(pair.draft, context, BATCH_SIZES, repeats)
    return Costs(draft_step_s=draft[1], target_step_s=target[1], target_batch_s=target, draft_batch_s=draft)
