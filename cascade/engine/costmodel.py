"""Expected seconds per token of each way of writing, from three per-call costs (for `auto` and the bench): d, the
draft's for one token; t1, the target's for a call over one token; b, the target's for each further token of it."""

from __future__ import annotations


def tokens_per_round(k: int, alpha: float) -> float:
    """Expected tokens a round of k drafts emits at acceptance rate alpha: (1 - a^(k+1)) / (1 - a)."""
    return (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1


def speculative_cost(d: float, target_call: float, k: int, alpha: float) -> float:
    """Seconds per token of speculative decoding: k draft steps and one `target_call` per round."""
    return (k * d + target_call) / tokens_per_round(k, alpha)


def cascade_cost(d: float, t1: float, b: float, e: float, horizon: int) -> float:
    """Seconds per token of cascade escalating a share `e`: a draft step per token, a target call per
    escalation, and a catch-up read of each token except those after the last escalation in `horizon`."""
    if e <= 0:
        return d
    horizon = max(horizon, 1)
    caught_up = 1 - (1 - e) * (1 - (1 - e) ** horizon) / (e * horizon)
    return d + e * max(t1 - b, 0.0) + caught_up * b


def break_even_share(d: float, t1: float, b: float, horizon: int) -> float:
    """The largest escalation share at which cascade costs less per token than t1 (0 if none), by bisection."""
    if cascade_cost(d, t1, b, 1e-9, horizon) >= t1:
        return 0.0
    if cascade_cost(d, t1, b, 1.0, horizon) < t1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cascade_cost(d, t1, b, mid, horizon) < t1 else (lo, mid)
    return lo


def target_alone_s(t1: float, b: float, prompt_tokens: int, n_tokens: int) -> float:
    """Estimated seconds of the target alone: a prompt call (t1 + b per further token), then t1 a token."""
    return t1 + max(prompt_tokens - 1, 0) * b + max(n_tokens - 1, 0) * t1
