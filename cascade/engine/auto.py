"""The `auto` policy's tuner: from running averages of the models' per-call costs (d, t1, b) and the escalation
and acceptance rates, the way predicted cheapest (`costmodel`) to write the next tokens. It switches only to a way
10% cheaper, and while the target writes alone it probes the draft now and then (after 64 tokens, then 128, ...)."""

from __future__ import annotations

import statistics
from collections import deque

from .costmodel import break_even_share, cascade_cost, speculative_cost
from .events import TokenEvent
from .observers import Observer
from .policies import POLICY_TABLE, Mode

KS = (1, 2, 3, 4, 6, 8)
# A target call over more tokens than this reads a prompt, not a check, and does not feed the estimate of `b`.
MAX_VERIFY_BATCH = 64
LONG_READ = 8  # a target call reading at least this many tokens with one row is a long read (`recent_reads`)


class Ewma:
    def __init__(self, weight: float = 0.2) -> None:
        self.value: float | None = None
        self.weight = weight

    def add(self, x: float) -> None:
        self.value = x if self.value is None else (1 - self.weight) * self.value + self.weight * x


class AutoTuner(Observer):
    first_probe_after = 64  # tokens the target writes alone before the first probe of the draft
    max_probe_every = 4096  # probes while the target stays best come at most this far apart
    switch_margin = 0.9
    # A probe's catch-up may cost at most this share of the target's time for the tokens still to write.
    probe_budget = 0.03

    def __init__(self) -> None:
        self.draft_step = Ewma()
        self.target_step = Ewma()
        self.target_extra = Ewma()  # seconds per additional token in a target batch
        # The big model alone's estimate reads medians of recent calls, steadier than `auto`'s quick averages:
        self.recent_steps: deque[float] = deque(maxlen=64)  # the target's one-token calls
        self.recent_reads: deque[float] = deque(maxlen=16)  # per further token of a long read with one row
        self.draft_extra = Ewma()  # the same for the draft: what catching it up costs
        self.escalation = Ewma(0.05)
        self.alpha = Ewma(0.05)
        self.current: Mode | None = None
        self.since_probe = 0
        self.probe_every = self.first_probe_after

    # ---- observations (the loop's Observer hooks) ---------------------------------------------------

    def model_called(self, model: str, n_tokens: int, seconds: float, n_rows: int = 1) -> None:
        step, extra = (self.draft_step, self.draft_extra) if model == "draft" else (self.target_step, self.target_extra)
        if n_tokens == 1:
            step.add(seconds)
            if model == "target":
                self.recent_steps.append(seconds)
        elif n_tokens > 1 and step.value is not None and (model == "draft" or n_tokens <= MAX_VERIFY_BATCH):
            extra.add(max(0.0, seconds - step.value) / (n_tokens - 1))
        if model == "target" and n_tokens >= LONG_READ and n_rows == 1 and step.value is not None:
            self.recent_reads.append(max(0.0, seconds - step.value) / (n_tokens - 1))

    def alone_costs(self) -> tuple[float, float] | None:
        """(a target step, a further token of a long read): medians of the recent calls; None before any."""
        if not self.recent_steps:
            return None
        reads = self.recent_reads or ([self.target_extra.value] if self.target_extra.value is not None else [])
        return (statistics.median(self.recent_steps), statistics.median(reads)) if reads else None

    def proposed(self, doubtful: bool) -> None:
        self.escalation.add(float(doubtful))

    def checked(self, kept: int, looked_at: int) -> None:
        for i in range(looked_at):
            self.alpha.add(1.0 if i < kept else 0.0)

    def told(self, event: TokenEvent) -> None:
        if event.accepted:
            self.since_probe += 1

    # ---- decisions --------------------------------------------------------------------------------

    def predictions(self, horizon: int = 128, draft_lag: int = 0) -> dict[tuple[str, int], float]:
        """Predicted seconds per token of each way of writing the next `horizon` tokens; {} before costs are known."""
        d, t1, b = self.draft_step.value, self.target_step.value, self.target_extra.value
        if None in (d, t1, b):
            return {}
        horizon = max(horizon, 1)
        catch_up = self.probe_cost(draft_lag) / horizon
        out = {("target", 0): t1}
        if self.escalation.value is not None:
            out[("cascade", 0)] = cascade_cost(d, t1, b, self.escalation.value, horizon) + catch_up
        if self.alpha.value is not None:
            a = min(self.alpha.value, 0.999)
            for k in KS:
                out[("speculative", k)] = speculative_cost(d, t1 + k * b, k, a) + catch_up
        return out

    def break_even_share(self, horizon: int = 128) -> float | None:
        """`costmodel.break_even_share` at the costs measured so far; None before they are measured."""
        d, t1, b = self.draft_step.value, self.target_step.value, self.target_extra.value
        return None if None in (d, t1, b) else break_even_share(d, t1, b, horizon)

    def cascade_speed(self, share: float, horizon: int = 128) -> float | None:
        """Cascade's speed over the target alone at `share`, at the costs measured so far; None before them."""
        d, t1, b = self.draft_step.value, self.target_step.value, self.target_extra.value
        return None if None in (d, t1, b) else t1 / cascade_cost(d, t1, b, share, horizon)

    def choose(self, horizon: int = 128, draft_lag: int = 0) -> Mode:
        """How to write the next tokens, `horizon` of which remain to be written at most."""
        if self.target_step.value is None:
            # The target's cost per token first (its first call also reads the prompt, so it takes two).
            return self._set("target", 0)
        predicted = self.predictions(horizon, draft_lag)
        if len(predicted) < 2:
            # Then the draft: speculative rounds measure its cost, the batch cost and the agreement.
            return self._set("speculative", 2)
        if (self.current is not None and self.current.policy.name == "target" and self.since_probe >= self.probe_every
                and self.probe_cost(draft_lag) <= self.probe_budget * horizon * self.target_step.value):
            self.since_probe = 0
            self.probe_every = min(self.probe_every * 2, self.max_probe_every)
            return Mode(POLICY_TABLE["speculative"], 2)  # a probe; `current` stays
        lossless = {key: v for key, v in predicted.items() if key[0] != "cascade"}
        best = min(lossless, key=lossless.get)
        # Cascade changes the text, so it must earn its place: clearly cheaper than the best lossless way.
        if ("cascade", 0) in predicted and predicted[("cascade", 0)] < self.switch_margin * lossless[best]:
            best = ("cascade", 0)
        if self.current is not None:
            key = (self.current.policy.name, self.current.k)
            if key in predicted and predicted[best] > self.switch_margin * predicted[key]:
                best = key
        return self._set(*best)

    def probe_cost(self, draft_lag: int) -> float:
        """Seconds the draft spends first reading what it has missed (a probe's, or any round's, catch-up)."""
        per_token = self.draft_extra.value if self.draft_extra.value is not None else self.draft_step.value
        return draft_lag * per_token

    def _set(self, name: str, k: int) -> Mode:
        if self.current is None or (self.current.policy.name, self.current.k) != (name, k):
            self.since_probe = 0
            if name != "target":
                self.probe_every = self.first_probe_after
        self.current = Mode(POLICY_TABLE[name], k)
        return self.current


class CostWatcher(Observer):
    """Teaches a tuner the models' costs from a run it does not steer (the machine's speed drifts)."""

    def __init__(self, tuner: AutoTuner) -> None:
        self.tuner = tuner

    def model_called(self, model: str, n_tokens: int, seconds: float, n_rows: int = 1) -> None:
        self.tuner.model_called(model, n_tokens, seconds, n_rows)
