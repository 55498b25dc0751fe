"""Counting one generation as it runs: its Summary's counts, timings and the models' work."""

from __future__ import annotations

import time
from collections import Counter

from .events import Counts, Timings, TokenEvent, Work
from .observers import Observer
from .policies import Mode
from .runner import ModelRunner


class Recorder(Observer):
    """Counts tokens by who wrote them and by fate, rounds by mode, and the models' work since it began."""

    def __init__(self, draft: ModelRunner, target: ModelRunner, steered: bool = False) -> None:
        self.steered = steered
        self.runners = (draft, target)
        self.start_stats = (draft.stats, target.stats)
        self.t0 = time.perf_counter()
        self.tokens: Counter[str] = Counter()  # accepted tokens by source; discarded ones by status
        self.drafted = 0
        self.looked_up_tokens = 0
        self.modes: Counter[str] = Counter()
        self.first_token_s: float | None = None
        self.calls: dict[str, Counter[int]] = {"draft": Counter(), "target": Counter()}  # call sizes
        self.extra_rows: Counter[str] = Counter()  # logits rows asked for beyond one a call, by model
        self.reading_s = {"draft": 0.0, "target": 0.0}  # seconds in calls of more than one token, by model

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def round_started(self, mode: Mode) -> None:
        if self.steered:  # a fixed policy's rounds are all alike; auto's say what it chose
            self.modes[mode.label] += 1

    def model_called(self, model: str, n_tokens: int, seconds: float, n_rows: int = 1) -> None:
        self.calls[model][n_tokens] += 1
        self.extra_rows[model] += n_rows - 1
        if n_tokens > 1:
            self.reading_s[model] += seconds

    def proposed(self, doubtful: bool) -> None:
        self.drafted += 1

    def looked_up(self, n_tokens: int) -> None:
        self.looked_up_tokens += n_tokens

    def told(self, event: TokenEvent) -> None:
        self.tokens[event.source if event.accepted else event.status] += 1
        if event.accepted and self.first_token_s is None:
            self.first_token_s = event.t

    def counts(self) -> Counts:
        c = self.tokens
        return Counts(n_tokens=c["draft"] + c["target"] + c["lookup"], n_draft_tokens=c["draft"],
                      n_target_tokens=c["target"], n_drafted=self.drafted, n_escalated=c["escalated"],
                      n_rejected=c["rejected"], n_rolled_back=c["rolled_back"], n_lookup_tokens=c["lookup"],
                      n_lookup_proposed=self.looked_up_tokens, modes=dict(self.modes))

    def timings(self, routing_s: float = 0.0, router_s: float = 0.0) -> Timings:
        """The run's times until now, with the judge's (`Judge.routing_s`, `router_s`)."""
        return Timings(wall_s=self.elapsed(), first_token_s=self.first_token_s, routing_s=routing_s, router_s=router_s)

    def work(self) -> Work:
        draft, target = self.runners
        return Work(draft=draft.stats - self.start_stats[0], target=target.stats - self.start_stats[1],
                    call_sizes={model: dict(sorted(sizes.items())) for model, sizes in self.calls.items()},
                    extra_rows=dict(self.extra_rows), reading_s=dict(self.reading_s))
