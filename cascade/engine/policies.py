"""Every policy in one registry (`POLICY_TABLE`): its name, the settings it reads, and its answers to the loop's
questions (`drafts`, `looks_up`, `escalates`, `window`, `verify`); it reads its request through `Reads`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from .events import Status
from .sampling import Sampler


# The escalation grain (`GenerationConfig.span`): the escalated token; on while the target's own probability is
# under SURE (unsure, the draft would likely be worse); or to the end of the line. At most SPAN_MAX tokens.
SPANS = ("token", "sure", "line")
SURE = 0.9
SPAN_MAX = 16

# What a policy that judges doubt reads; one whose rule decides who writes (`uses_rule`) also reads a budget.
JUDGED = ("rule", "threshold")
SHARED = JUDGED + ("budget",)


class Reads(Protocol):
    """The settings of its request a policy's own behaviour reads (a `GenerationConfig` has them)."""

    @property
    def bild_window(self) -> int: ...

    @property
    def rollback_threshold(self) -> float: ...


def span_goes_on(span: str, written: int, p_target: float, piece: str) -> bool:
    """Whether the target writes the next position too, after `written` tokens, the last with `p_target`, `piece`."""
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
    """One way of writing a round; the base class verifies as the target alone: greedy prefix match."""

    drafts = True  # the draft model proposes tokens (False: it is never called)
    looks_up = False  # prompt lookup proposes first; the draft (if it drafts) only where lookup finds nothing
    escalates = True  # a doubtful draft token is discarded and the target writes that position
    steered = False  # each round's way is chosen from measured costs (auto)
    lossless = False  # its text is the target's (greedy or exact rejection sampling), up to batched numerics
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
        """Whether its rule decides who writes the text (not merely ends a round early), so a budget applies."""
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
        """How many of the proposed tokens the target keeps, and its own token for the next position."""
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
    """Cascade whose tokens wait for the target, which rolls back from the first too unlikely (Big Little Decoder)."""

    discarded = "rolled_back"

    def window(self, config: Reads, k: int) -> int:
        return config.bild_window

    def verify(self, check: Check, sampler: Sampler, config: Reads) -> tuple[int, int]:
        kept = next((i for i, ppl in enumerate(check.perplexities) if ppl > config.rollback_threshold),
                    len(check.tokens))
        return kept, sampler.target(check.rows[kept])


class Speculative(Policy):
    """Up to k proposals checked in one batch (the longest acceptable prefix kept); a doubted one ends the round."""

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
