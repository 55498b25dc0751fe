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

    def cascade_s_per_token(self, escalation_rate: float, horizon: int) -> float:
        """Expected seconds per token of cascade over `horizon` tokens: a draft step for each, and for
        each escalation one target call that catches up on the tokens since the last (see
        `cascade_cost`)."""
        b = (self.target_batch(16) - self.target_step_s) / 15
        return cascade_cost(self.draft_step_s, self.target_step_s, b, escalation_rate, horizon)

    def to_dict(self) -> dict:
        return {"draft_step_s": self.draft_step_s, "target_step_s": self.target_step_s,
                "target_batch_s": self.target_batch_s, "draft_batch_s": self.draft_batch_s}


def cascade_cost(d: float, t1: float, b: float, e: float, horizon: int) -> float:
    """Seconds per token of cascade: d per draft step, t1 + (n - 1)·b for a target call over n tokens.

    Each escalation (a share e of tokens) costs one target call; every token is read by the target
    once, in the catch-up at the next escalation, unless no escalation follows it before the text ends:
    then the target never reads it. Over a horizon of R tokens that happens to a share
    (1 - e)(1 - (1 - e)^R) / (eR) of them, which is why a rarely doubtful draft runs at its own speed.
    """
    if e <= 0:
        return d
    caught_up = 1 - (1 - e) * (1 - (1 - e) ** horizon) / (e * horizon)
    return d + e * max(t1 - b, 0.0) + caught_up * b


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
