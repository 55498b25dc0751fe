"""Expected seconds per token of each way of writing, from three per-call costs.

d: the draft's cost for one token; t1: the target's cost for a call over one token; b: the target's
cost for each further token of the same call. `auto` uses these to choose as it runs; the bench uses
them to derive the best speed the measured costs allow. Pure functions, one definition each.
"""

from __future__ import annotations


def tokens_per_round(k: int, alpha: float) -> float:
    """Expected tokens a speculative round of k drafts emits when each draft is accepted with
    probability alpha (Leviathan et al.): (1 - a^(k+1)) / (1 - a), k + 1 when every draft is kept."""
    return (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1


def speculative_cost(d: float, target_call: float, k: int, alpha: float) -> float:
    """Seconds per token of speculative decoding: k draft steps and one target call over k + 1 tokens
    (`target_call`) per round, divided by the tokens a round emits."""
    return (k * d + target_call) / tokens_per_round(k, alpha)


def cascade_cost(d: float, t1: float, b: float, e: float, horizon: int) -> float:
    """Seconds per token of cascade: d per draft step, t1 + (n - 1)·b for a target call over n tokens.

    Each escalation (a share e of tokens) costs one target call; every token is read by the target
    once, in the catch-up at the next escalation, unless no escalation follows it before the text ends:
    then the target never reads it. Over a horizon of R tokens that happens to a share
    (1 - e)(1 - (1 - e)^R) / (eR) of them, which is why a rarely doubtful draft runs at its own speed.
    """
    if e <= 0:
        return d
    horizon = max(horizon, 1)
    caught_up = 1 - (1 - e) * (1 - (1 - e) ** horizon) / (e * horizon)
    return d + e * max(t1 - b, 0.0) + caught_up * b


def break_even_share(d: float, t1: float, b: float, horizon: int) -> float:
    """The largest share of tokens the target may write in cascade (escalations) while cascade still
    costs less per token than the target alone (t1): where `cascade_cost` crosses t1, found by bisection
    (the cost grows with the share). 0 when even a draft that is never doubted is not cheaper."""
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
    """Seconds the target alone would take for a request: one call that reads the prompt (t1 for its first
    token, b for each further one) and writes the first token, then t1 for each token after it. An estimate:
    `b` is measured on verification batches, and a long prompt's larger batches cost less per token."""
    return t1 + max(prompt_tokens - 1, 0) * b + max(n_tokens - 1, 0) * t1
