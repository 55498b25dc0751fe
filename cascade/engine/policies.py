"""Every policy, in one registry: what it is called, what settings it reads, and how it writes a round.

The loop (`loop.py`) is one draft-then-check loop; a policy object answers its questions, as
transformers' candidate generators do for assisted decoding:
- `drafts`: does the draft model propose tokens at all?
- `looks_up`: are tokens first copied from earlier in the text where its end occurred before (prompt
  lookup, `lookup.py`)? Then the draft model proposes only where lookup finds nothing.
- `escalates`: when the draft doubts a token (its rule past the threshold), does the target take that
  position? Only such a policy judges the draft's doubt (`judges`), and so reads the rule.
- `window`: how many proposed tokens wait for the target's check before it reads them (0: a drafted
  token counts at once), and `verify`: which of them the target keeps, and what it writes next.
`Auto` chooses among the others round by round from measured costs (`auto.py`); `Seed` is the original
idea's own loop (`seed.py`, which `Engine.generate` runs in place of the engine's), kept as the baseline.

Adding a policy is one class (or an instance of one) and one entry in `POLICY_TABLE`: the config's
validation, the command line's choices, the page's dropdown and the API's models all read the table.
A policy reads its request through `Reads`, so this module imports no config, model or loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from .events import Status
from .sampling import Sampler


# The escalation grain (`GenerationConfig.span`): once the rule escalates a position, the target writes it and,
# for a span, goes on writing while the span lasts, the draft silent. "sure": while the target's probability of
# the token it wrote is under SURE (a round 90%, chosen before any measurement: where the big model is unsure
# too, the text is hard, and the small model would likely be worse). "line": to the end of the line (code's
# unit). Never more than SPAN_MAX tokens at once.
SPANS = ("token", "sure", "line")
SURE = 0.9
SPAN_MAX = 16

# What a policy that judges the draft's doubt reads: the rule, and its threshold; a policy whose rule decides
# who writes the text (`uses_rule`) also reads a budget, which moves the threshold as it writes.
JUDGED = ("rule", "threshold")
SHARED = JUDGED + ("budget",)


class Reads(Protocol):
    """The settings of its request a policy's own behaviour reads (a `GenerationConfig` has them)."""

    @property
    def bild_window(self) -> int: ...

    @property
    def rollback_threshold(self) -> float: ...


def span_goes_on(span: str, written: int, p_target: float, piece: str) -> bool:
    """Whether the target writes the next position too, having written `written` tokens since the rule
    escalated (the escalated one included), the last with its own probability `p_target` and text `piece`."""
    if span == "token" or written >= SPAN_MAX:
        return False
    if span == "sure":
        return p_target < SURE
    return "\n" not in piece  # "line"


@dataclass(frozen=True)
class Check:
    """What the target's check of the proposed tokens sees, in one batch."""

    tokens: Sequence[int]  # the proposed tokens, in order
    q: Sequence[np.ndarray | None]  # the distribution each was drawn from (None: greedy, or copied by lookup)
    rows: np.ndarray  # the target's row at each proposal, and one more after them
    perplexities: Sequence[float]  # the target's perplexity of each proposed token


class Policy:
    """The engine's loop, writing each round one way. The base class is the target alone's check rule:
    keep the proposals the target would have chosen itself (greedy), then its own token."""

    drafts = True  # the draft model proposes tokens (False: it is never called)
    looks_up = False  # prompt lookup proposes first; the draft (if it drafts) only where lookup finds nothing
    escalates = True  # a doubtful draft token is discarded and the target writes that position
    steered = False  # each round's way is chosen from measured costs (auto)
    # Every token it writes is the target's own choice (greedy) or an exact rejection-sampling draw: its
    # text is the target's, up to the numerics of batched evaluation on quantized models.
    lossless = False
    discarded: Status = "rejected"  # what a proposal the target's check did not keep is called
    own_loop = False  # it runs a loop of its own instead of the engine's (the seed's)

    def __init__(self, name: str, description: str, settings: Sequence[str] = (), on_page: bool = True) -> None:
        self.name = name
        self.description = description  # one sentence for the docs and the command line's help
        # The GenerationConfig fields it reads besides sampling, length, framing and (where it judges) span.
        self.settings = tuple(settings)
        self.on_page = on_page  # offered on the page and as the API's models

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def judges(self) -> bool:
        """Whether it judges the draft's doubt by a rule (so the learned rule needs a router for it)."""
        return "rule" in self.settings

    @property
    def uses_rule(self) -> bool:
        """Whether its rule decides who writes the text, so a budget can set its threshold (a policy that
        judges only to end a round early, as speculative decoding does, writes the target's text either way)."""
        return "budget" in self.settings

    @property
    def text_settings(self) -> tuple[str, ...]:
        """The settings that decide the text it writes: a lossless policy's rule only paces it."""
        return tuple(s for s in self.settings if not (self.lossless and s in SHARED))

    def refusal(self, rule: str) -> str | None:
        """Why it cannot judge by this rule, or None if it can."""
        return None

    def window(self, config: Reads, k: int) -> int:
        """Proposed tokens held for the target's check before it reads them; 0: a drafted token counts at once."""
        return 0

    def verify(self, check: Check, sampler: Sampler, config: Reads) -> tuple[int, int]:
        """How many of the proposed tokens the target keeps, and its own token for the next position.
        Greedy verification is prefix matching: the token after the last match is always the target's own."""
        for i, token in enumerate(check.tokens):
            best = int(np.argmax(check.rows[i]))
            if best != token:
                return i, best
        return len(check.tokens), sampler.target(check.rows[len(check.tokens)])

    def mode_label(self, k: int) -> str:
        """How a round written this way is named in a Summary's `modes` (auto)."""
        return self.name


class TargetAlone(Policy):
    drafts = False
    escalates = False
    lossless = True


class DraftAlone(Policy):
    escalates = False


class Cascade(Policy):
    """The draft writes; where its rule doubts a token, the target writes that position instead."""


class Bild(Cascade):
    """Cascade, and the draft's tokens wait for the target, which rolls back from the first it finds too
    unlikely (Big Little Decoder)."""

    discarded = "rolled_back"

    def window(self, config: Reads, k: int) -> int:
        return config.bild_window

    def verify(self, check: Check, sampler: Sampler, config: Reads) -> tuple[int, int]:
        kept = next((i for i, ppl in enumerate(check.perplexities) if ppl > config.rollback_threshold),
                    len(check.tokens))
        return kept, sampler.target(check.rows[kept])


class Speculative(Policy):
    """Up to k proposals, checked by the target in one batch: the longest acceptable prefix, then its own
    token. Sampling, each proposal is kept with probability min(1, p/q) (rejection sampling), so the text
    follows the target's distribution exactly. A drafted token the rule doubts ends the round early: the
    target checks what is pending and writes that position itself (drafting on past it would mostly be
    refused)."""

    lossless = True

    def window(self, config: Reads, k: int) -> int:
        return k

    def verify(self, check: Check, sampler: Sampler, config: Reads) -> tuple[int, int]:
        if sampler.greedy:
            return super().verify(check, sampler, config)
        return sampler.speculative(check.tokens, check.q, check.rows)

    def mode_label(self, k: int) -> str:
        return f"{self.name} k={k}"


class Lookup(Speculative):
    drafts = False
    looks_up = True
    escalates = False  # nothing is drafted, so nothing is doubted


class LookupDraft(Speculative):
    looks_up = True


class Auto(Policy):
    """Writes each round the way `auto.AutoTuner` predicts fastest; it never writes a round itself."""

    steered = True


class Seed(Cascade):
    """The original loop (`seed.run_seed_loop`): it reads only the draft's perplexity of its token."""

    own_loop = True

    def refusal(self, rule: str) -> str | None:
        return None if rule == "perplexity" else f"the seed's loop judges by perplexity alone, got {rule!r}"


POLICY_TABLE: dict[str, Policy] = {
    p.name: p
    for p in (
        TargetAlone("target", "the target alone: the baseline every speed is compared with"),
        DraftAlone("draft", "the draft alone: the fastest, and the least faithful to the target"),
        Cascade("cascade", "the draft writes; a token it is unsure of is written by the target instead",
                settings=SHARED),
        Bild("bild", "cascade, and when the target takes over it also checks the draft's recent tokens, rolling "
             "back from the first one it finds too unlikely (Big Little Decoder)",
             settings=SHARED + ("rollback_threshold", "bild_window")),
        Speculative("speculative", "the draft proposes up to k tokens, the target checks them in one batch and keeps "
                    "the longest prefix it agrees with, plus one token of its own",
                    settings=("k",) + JUDGED),
        Lookup("lookup", "speculative decoding whose drafts cost nothing: where the text's last few tokens occurred "
               "before (in the prompt or the answer), up to k tokens that followed them there are proposed and the "
               "target checks them in one batch; with no match the target writes alone",
               settings=("k", "lookup_ngram")),
        LookupDraft("lookup+draft", "lookup where the text's end occurred before, and the draft proposing as in "
                    "speculative decoding where it did not; the target checks both the same way",
                    settings=("k", "lookup_ngram") + JUDGED),
        Auto("auto", "measures both models' costs as it runs and writes each round the way predicted fastest: the "
             "target alone, speculative with the best k, or cascade when clearly cheaper",
             settings=SHARED),
        Seed("seed", "the original idea's own loop, one full llama-cpp-python call per token: the slow baseline",
             settings=JUDGED, on_page=False),
    )
}

POLICIES: tuple[str, ...] = tuple(POLICY_TABLE)


def offered() -> list[Policy]:
    """The policies a visitor or an API client may choose (the seed's loop is a baseline only)."""
    return [p for p in POLICY_TABLE.values() if p.on_page]


def policy_list_markdown() -> str:
    """The list of policies in docs/how-it-works.md, one line each."""
    return "\n".join(f"- `{p.name}`: {p.description}." for p in POLICY_TABLE.values())


@dataclass(frozen=True)
class Mode:
    """How one round is written: a policy of the engine's loop, with its k where it speculates."""

    policy: Policy
    k: int = 0

    @property
    def label(self) -> str:
        return self.policy.mode_label(self.k)

    def window(self, config: Reads) -> int:
        return self.policy.window(config, self.k)
