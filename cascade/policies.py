"""Every policy, in one registry: what it does, what it is called on the page, what settings it reads.

The config's validation, the command line's choices, the page's dropdown and the README's list all read
`POLICY_TABLE`. Seven policies are one propose-then-verify loop (`engine.py`) configured by four answers:
- Does the draft model propose tokens at all?
- Are tokens first copied from earlier in the text where its last few tokens occurred before (prompt
  lookup, `lookup.py`)? Then the draft model proposes only where lookup finds nothing.
- When the draft doubts a token (perplexity over the threshold), does the target take that position?
- Are proposed tokens checked by the target before they count, and by which rule?
`auto` chooses among those, round by round, from measured costs (`auto.py`); `seed` is the original
idea's own loop, kept as a baseline for measurements (`bench/seed.py`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Literal

Check = Literal["none", "rollback", "speculative"]


@dataclass(frozen=True)
class Policy:
    name: str
    label: str  # what the page's dropdown says
    description: str  # one sentence for a reader of the README or the command line's help
    drafts: bool = True  # the draft model proposes tokens (False: it is never called)
    # Each round first copies up to k tokens from earlier in the text (prompt lookup) where the text's end
    # occurred before; the target checks them as speculative drafts. Where lookup finds no match, the
    # draft model proposes if `drafts`, and otherwise the target writes one token alone.
    looks_up: bool = False
    escalates: bool = True  # a doubtful draft token is discarded and the target writes that position
    check: Check = "none"  # none: draft tokens count at once; otherwise held until the target checks them
    settings: tuple[str, ...] = ()  # the GenerationConfig fields it reads besides sampling and length
    steered: bool = False  # chooses another policy for each round (auto)
    loop: str | None = None  # "module:function" of a loop of its own, instead of the engine's
    on_page: bool = True  # offered in the page's dropdown

    def own_loop(self) -> Callable:
        """The function that runs this policy's own loop (imported on first use)."""
        module, _, function = self.loop.partition(":")
        return getattr(importlib.import_module(module), function)


POLICY_TABLE: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("target", "target: the big model alone (the baseline)",
               "the target alone: the baseline every speed is compared with",
               drafts=False, escalates=False),
        Policy("draft", "draft: the small model alone",
               "the draft alone: the fastest, and the least faithful to the target", escalates=False),
        Policy("cascade", "cascade: small writes, big steps in where small is unsure",
               "the draft writes; a token it is unsure of is written by the target instead",
               settings=("threshold",)),
        Policy("bild", "bild: cascade, and big may roll back small's recent tokens",
               "cascade, and when the target takes over it also checks the draft's recent tokens, rolling "
               "back from the first one it finds too unlikely (Big Little Decoder)",
               check="rollback", settings=("threshold", "rollback_threshold", "bild_window")),
        Policy("speculative", "speculative: big checks k drafted tokens at once",
               "the draft proposes up to k tokens, the target checks them in one batch and keeps the longest "
               "prefix it agrees with, plus one token of its own",
               check="speculative", settings=("k",)),
        Policy("lookup", "lookup: copies from earlier in the text, big checks the copy",
               "speculative decoding whose drafts cost nothing: where the text's last few tokens occurred before "
               "(in the prompt or the answer), up to k tokens that followed them there are proposed and the "
               "target checks them in one batch; with no match the target writes alone",
               drafts=False, escalates=False, looks_up=True, check="speculative", settings=("k", "lookup_ngram")),
        Policy("lookup+draft", "lookup+draft: copies from the text where it can, else small drafts",
               "lookup where the text's end occurred before, and the draft proposing as in speculative "
               "decoding where it did not; the target checks both the same way",
               looks_up=True, check="speculative", settings=("k", "lookup_ngram")),
        Policy("auto", "auto: measures as it goes and picks the fastest way",
               "measures both models' costs as it runs and writes each round the way predicted fastest: the "
               "target alone, speculative with the best k, or cascade when clearly cheaper",
               steered=True, settings=("threshold",)),
        Policy("seed", "seed: the original loop (re-reads the whole text per token)",
               "the original idea's own loop, one full llama-cpp-python call per token: the slow baseline",
               check="none", settings=("threshold",), loop="cascade.bench.seed:run_seed_loop", on_page=False),
    )
}

POLICIES: tuple[str, ...] = tuple(POLICY_TABLE)


def policy_list_markdown() -> str:
    """The README's list of policies, one line each."""
    return "\n".join(f"- `{p.name}`: {p.description}." for p in POLICY_TABLE.values())


@dataclass(frozen=True)
class Mode:
    """How one round is written: a policy of the engine's loop, with its k where it speculates."""

    policy: Policy
    k: int = 0

    @property
    def label(self) -> str:
        return f"{self.policy.name} k={self.k}" if self.policy.check == "speculative" else self.policy.name
