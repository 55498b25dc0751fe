"""A run over the tasks: each answer with its check (its record is its cache line, with the task's digest and
the check's version), and each configuration's figures (pass@1, share, speed, flips against the target alone)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ..engine.events import Summary
from . import sandbox
from .summaries import scored, target_agreement, text_ppl
from .tasks import CHECK_VERSION, Task
from .tasks_configs import Configuration


@dataclass(frozen=True)
class Answer:
    """One configuration's answer to one task, and how its check went."""

    task_id: str
    answer: str  # the whole answer: the given prefix, then what the models wrote
    n_tokens: int
    n_target_tokens: int
    wall_s: float
    stop_reason: str
    text_ppl_by_target: float | None
    target_agreement: float | None
    check: sandbox.Check
    cached: bool = False
    measured_at: str = ""

    @classmethod
    def from_summary(cls, task: Task, summary: Summary, check: sandbox.Check) -> "Answer":
        figures = scored(summary)
        return cls(task.task_id, summary.answer, figures.n_tokens, summary.counts.n_target_tokens,
                   summary.timings.wall_s, summary.stop_reason, figures.text_ppl_by_target, figures.target_agreement,
                   check, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"))

    def record(self, task: Task) -> dict:
        d = dataclasses.asdict(self)
        d.pop("cached")
        ppl = d["text_ppl_by_target"]
        d.update(task_digest=task.digest, check_version=CHECK_VERSION,
                 text_ppl_by_target=ppl if ppl is None or math.isfinite(ppl) else None)
        return d

    @classmethod
    def from_record(cls, record: dict) -> "Answer":
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in record.items() if k in fields}
        values["check"] = sandbox.Check(**record["check"])
        return cls(**{**values, "cached": True})


@dataclass
class ConfigResult:
    """One configuration over the tasks: pass@1, the big model's share, speed, and failures by kind."""

    configuration: Configuration
    answers: list[Answer] = field(default_factory=list)
    vs_target: float | None = None  # tokens/s over the target alone's on the same tasks, this run
    paired: Paired | None = None  # the problems that flipped against the target alone's answers

    @property
    def n_tasks(self) -> int:
        return len(self.answers)

    @property
    def passed(self) -> int:
        return sum(a.check.passed for a in self.answers)

    @property
    def pass_at_1(self) -> float:
        return self.passed / self.n_tasks if self.answers else 0.0

    @property
    def n_tokens(self) -> int:
        return sum(a.n_tokens for a in self.answers)

    @property
    def target_share(self) -> float:
        return sum(a.n_target_tokens for a in self.answers) / self.n_tokens if self.n_tokens else 0.0

    @property
    def share_spread(self) -> tuple[float, float, float] | None:
        """The 10th, 50th and 90th percentiles of the big model's share of each answer; None without answers."""
        shares = [a.n_target_tokens / a.n_tokens for a in self.answers if a.n_tokens]
        return tuple(float(p) for p in np.percentile(shares, [10, 50, 90])) if shares else None

    @property
    def wall_s(self) -> float:
        return sum(a.wall_s for a in self.answers)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mean_tokens(self) -> float:
        return self.n_tokens / self.n_tasks if self.answers else 0.0

    @property
    def text_ppl_by_target(self) -> float | None:
        """The big model's perplexity of all the answers' tokens together (None unless every answer has one)."""
        return text_ppl(self.answers, every=True)

    @property
    def target_agreement(self) -> float | None:
        return target_agreement(self.answers)

    @property
    def failures(self) -> dict[str, int]:
        return {kind: sum(a.check.kind == kind for a in self.answers) for kind in sandbox.FAILURE_KINDS}

    def to_dict(self) -> dict[str, Any]:
        c = self.configuration
        return {"label": c.label, "policy": c.policy, "rule": c.rule, "threshold": c.threshold, "budget": c.budget,
                "k": c.k, "n_tasks": self.n_tasks, "passed": self.passed, "pass_at_1": self.pass_at_1,
                "target_share": self.target_share, "share_spread": self.share_spread,
                "tokens_per_s": self.tokens_per_s, "vs_target": self.vs_target,
                "text_ppl_by_target": self.text_ppl_by_target, "target_agreement": self.target_agreement,
                "mean_tokens": self.mean_tokens, "n_tokens": self.n_tokens, "wall_s": self.wall_s,
                "failures": self.failures, "cached": sum(a.cached for a in self.answers),
                "paired": self.paired.to_dict() if self.paired is not None else None,
                "settings": c.settings(),
                "answers": [{"task_id": a.task_id, "kind": a.check.kind, "detail": a.check.detail[:200],
                             "n_tokens": a.n_tokens, "n_target_tokens": a.n_target_tokens,
                             "wall_s": round(a.wall_s, 4), "stop_reason": a.stop_reason,
                             "measured_at": a.measured_at} for a in self.answers]}


@dataclass(frozen=True)
class Paired:
    """Answers beside the target alone's: problems `gained` and `lost`, and texts `differing`."""

    gained: tuple[str, ...]
    lost: tuple[str, ...]
    differing: tuple[str, ...] = ()
    n: int = 0  # the problems both answered

    def to_dict(self) -> dict[str, Any]:
        return {"gained": list(self.gained), "lost": list(self.lost),
                "mcnemar_p": mcnemar_exact(len(self.gained), len(self.lost)),
                "same_text": self.n - len(self.differing), "differing": list(self.differing)}


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact two-sided p: the chance that fair coin tosses split b + c as unevenly as b to c."""
    n = b + c
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def flips(base: Mapping[str, bool], other: Iterable[tuple[str, bool]]) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """Over the problems both answered (task id: solved), in the other's order: gained, lost, and how many."""
    common = [(task_id, ok) for task_id, ok in other if task_id in base]
    return (tuple(t for t, ok in common if ok and not base[t]), tuple(t for t, ok in common if base[t] and not ok),
            len(common))


def paired(target: ConfigResult, other: ConfigResult) -> Paired:
    """`Paired` over the problems both answered, in the other's order."""
    theirs = {a.task_id: a for a in target.answers}
    gained, lost, n = flips({t: a.check.passed for t, a in theirs.items()},
                            ((a.task_id, a.check.passed) for a in other.answers))
    differing = tuple(a.task_id for a in other.answers if a.task_id in theirs and a.answer != theirs[a.task_id].answer)
    return Paired(gained=gained, lost=lost, differing=differing, n=n)


def with_speed_ratios(results: list[ConfigResult]) -> list[ConfigResult]:
    """Each configuration's speed over the target alone's on the same tasks, and its `Paired` against it."""
    target = next((r for r in results if r.configuration.policy == "target"), None)
    if target is None:
        return results
    by_task = {a.task_id: a for a in target.answers}
    for r in results:
        common = [by_task[a.task_id] for a in r.answers if a.task_id in by_task]
        tokens, wall = sum(a.n_tokens for a in common), sum(a.wall_s for a in common)
        if common and wall > 0 and r.tokens_per_s > 0:
            r.vs_target = r.tokens_per_s / (tokens / wall)
        if r is not target:
            r.paired = paired(target, r)
    return results
