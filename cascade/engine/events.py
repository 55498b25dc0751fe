"""What the engine yields: typed, immutable records (`TokenEvent`s as it decides, one `Summary` at the end)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence, Union

# Who proposed a token: the draft, the target, or prompt lookup (checked by the target).
Source = Literal["draft", "target", "lookup"]
# accepted: in the output; escalated: the draft doubted it and the target wrote the position; rejected: a
# proposal the target's check refused; rolled_back: a drafted token the target overruled afterwards (BiLD).
Status = Literal["accepted", "escalated", "rejected", "rolled_back"]
StopReason = Literal["eos", "max_tokens", "stop_string", "context_full", "cancelled"]
# A model's likeliest tokens at a position, likeliest first: (the token's text, its probability).
Alternatives = Union[tuple[tuple[str, float], ...], None]


def plain(value: Any) -> Any:
    """JSON-ready: tuples as lists, keys as text, non-finite floats (JSON has none) as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True)
class TokenEvent:
    position: int  # index in the generated text, 0 = first token after the prompt
    token_id: int
    text: str  # accepted: the text it adds (never half a character); otherwise its own piece
    source: Source
    status: Status
    draft_ppl: float | None  # the draft's perplexity of this token, where the draft scored it
    target_ppl: float | None  # the target's perplexity of this token, where the target scored it
    t: float  # seconds since the generation started
    # The draft's reading here (`DraftReading`), so any rule can re-judge the run; draft_score needs a router.
    draft_top1: float | None = None
    draft_top2: float | None = None
    draft_entropy: float | None = None
    draft_score: float | None = None
    # Each model's likeliest tokens here, when asked for (`GenerationConfig.alternatives`).
    draft_top: Alternatives = None
    target_top: Alternatives = None

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    def to_dict(self) -> dict[str, Any]:
        return plain(dataclasses.asdict(self))  # the tops as JSON gives them back: lists of [text, probability]


@dataclass(frozen=True)
class ModelStats:
    """What one model did during one generation."""

    calls: int = 0  # llama_decode calls
    tokens_evaluated: int = 0  # tokens pushed through the model (prompt included)
    tokens_discarded: int = 0  # evaluated tokens later removed from its cache (rollbacks)
    seconds: float = 0.0  # wall time inside the model (decode plus reading logits)
    shared_calls: int = 0  # of calls: decoded in one llama.cpp batch with another slot's (`--batch-slots`)

    def __sub__(self, other: "ModelStats") -> "ModelStats":
        return ModelStats(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def __add__(self, other: "ModelStats") -> "ModelStats":
        return ModelStats(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


@dataclass(frozen=True)
class Counts:
    """The output's tokens by who wrote them, the proposals by what became of them, auto's rounds by mode."""

    n_tokens: int  # tokens in the output: n_draft_tokens + n_target_tokens + n_lookup_tokens
    n_draft_tokens: int  # of which the draft wrote
    n_target_tokens: int  # of which the target wrote
    n_drafted: int = 0  # tokens the draft sampled, kept or not (lookup's proposals are not among them)
    n_escalated: int = 0
    n_rejected: int = 0
    n_rolled_back: int = 0
    n_lookup_tokens: int = 0  # tokens of the output prompt lookup proposed and the target accepted
    n_lookup_proposed: int = 0  # tokens prompt lookup proposed, kept or not
    modes: dict[str, int] = dataclasses.field(default_factory=dict)  # auto: rounds written each way

    @property
    def target_share(self) -> float:
        return self.n_target_tokens / self.n_tokens if self.n_tokens else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Share of proposed tokens (draft's and lookup's) kept in the output; None if none was proposed."""
        proposed = self.n_drafted + self.n_lookup_proposed
        return (self.n_draft_tokens + self.n_lookup_tokens) / proposed if proposed else None


@dataclass(frozen=True)
class Timings:
    """When the output came, and the time spent judging the draft's tokens."""

    wall_s: float  # generation time: prompt processing included, model loading excluded
    first_token_s: float | None = None  # when the output's first token came (reading the prompt included)
    routing_s: float = 0.0  # of wall_s: reading the draft's rows and applying the rule (the router included)
    router_s: float = 0.0  # of routing_s: the learned router's features and score (0 without a router)


@dataclass(frozen=True)
class Work:
    """What each model did: its totals, its calls by size, the logits rows beyond one a call, its reading time."""

    draft: ModelStats = ModelStats()
    target: ModelStats = ModelStats()
    # Each model's calls by their size: {"target": {1: 40, 5: 12, 61: 1}} (tokens evaluated: calls)
    call_sizes: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)
    extra_rows: dict[str, int] = dataclasses.field(default_factory=dict)  # a check of k tokens asks k + 1 rows
    # Each model's seconds in calls of more than one token (the prompt, a check, a catch-up); absent: not recorded.
    reading_s: dict[str, float] = dataclasses.field(default_factory=dict)

    def split(self, model: str) -> tuple[float, float] | None:
        """`model`'s seconds as (reading, writing), writing the rest of its total; None if not recorded."""
        stats = getattr(self, model)
        if model not in self.reading_s:
            return None
        reading = min(max(self.reading_s[model], 0.0), stats.seconds)
        return reading, stats.seconds - reading

    def to_dict(self) -> dict[str, Any]:
        return plain(dataclasses.asdict(self))  # JSON's keys are text: the call sizes as "5": 12


@dataclass(frozen=True)
class Quality:
    """The target's view of the finished text (`scoring.score`): perplexity, greedy agreement, time, tops read."""

    text_ppl_by_target: float
    target_agreement: float
    scoring_s: float = 0.0  # the pass after the run, not part of wall_s
    scored_top: tuple[tuple[int, Alternatives], ...] = ()  # (position, top) pairs

    def to_dict(self) -> dict[str, Any]:
        return plain(dataclasses.asdict(self))


UNSCORED: dict[str, Any] = {"text_ppl_by_target": None, "target_agreement": None, "scoring_s": 0.0, "scored_top": []}


@dataclass(frozen=True)
class BudgetAccount:
    """A token budget's account: the share asked, the threshold it meant, where that threshold started."""

    share: float
    threshold: float | None  # the median threshold its positions met, in the rule's units (None: none judged)
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.share, "budget_threshold": self.threshold, "budget_source": self.source}


NO_BUDGET: dict[str, Any] = {"budget": None, "budget_threshold": None, "budget_source": ""}


@dataclass(frozen=True)
class Summary:
    """One generation's outcome: text, stop and records (quality None: not scored; budget None: none asked)."""

    text: str
    policy: str
    stop_reason: StopReason
    prompt_tokens: int
    counts: Counts
    timings: Timings
    work: Work = dataclasses.field(default_factory=Work)
    rule: str = ""  # the deferral rule that judged the draft's tokens (policies that escalate)
    device: str = ""  # where the models ran, in words ("CPU, 2 threads")
    # The answer prefix given in the request: not in `text` nor the counts; its tokens are among prompt_tokens.
    answer_prefix: str = ""
    n_given_tokens: int = 0
    budget: BudgetAccount | None = None
    quality: Quality | None = None

    @property
    def answer(self) -> str:
        """The whole answer as a reader sees it: the given prefix, then what the models wrote."""
        return self.answer_prefix + self.text

    @property
    def tokens_per_s(self) -> float:
        return self.counts.n_tokens / self.timings.wall_s if self.timings.wall_s > 0 else 0.0

    @property
    def writing_tokens_per_s(self) -> float | None:
        """Tokens/s after the first token: the speed of writing, with reading the prompt taken off."""
        n, wall, first = self.counts.n_tokens, self.timings.wall_s, self.timings.first_token_s
        if n < 2 or first is None or wall <= first:
            return None
        return (n - 1) / (wall - first)

    @property
    def overhead_s(self) -> float:
        """Wall time spent outside both models."""
        return max(0.0, self.timings.wall_s - self.work.draft.seconds - self.work.target.seconds)

    def to_dict(self) -> dict[str, Any]:
        """One flat JSON object (run files, `--json`): each record's keys side by side, and the derived figures."""
        return {"text": self.text, "policy": self.policy, "stop_reason": self.stop_reason,
                "prompt_tokens": self.prompt_tokens, "rule": self.rule, "device": self.device,
                "answer_prefix": self.answer_prefix, "n_given_tokens": self.n_given_tokens,
                **dataclasses.asdict(self.counts), **dataclasses.asdict(self.timings), **self.work.to_dict(),
                **(self.quality.to_dict() if self.quality is not None else UNSCORED),
                **(self.budget.to_dict() if self.budget is not None else NO_BUDGET),
                "target_share": self.counts.target_share, "acceptance_rate": self.counts.acceptance_rate,
                "tokens_per_s": self.tokens_per_s, "writing_tokens_per_s": self.writing_tokens_per_s,
                "overhead_s": self.overhead_s}


@dataclass(frozen=True)
class Written:
    """The answer is complete: the Summary before the scoring pass (`mark_written=True`); the final one follows."""

    summary: Summary


Event = Union[TokenEvent, Written, Summary]


def complete_events(events: Sequence[TokenEvent], summary: Summary | None) -> list[TokenEvent]:
    """`events` with `Quality.scored_top` filled into the kept tokens the target read only when scoring."""
    scored = dict(summary.quality.scored_top) if summary is not None and summary.quality is not None else {}
    return [dataclasses.replace(e, target_top=scored[e.position])
            if e.accepted and e.target_top is None and e.position in scored else e for e in events]
