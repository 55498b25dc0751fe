"""The policies: one draft-then-verify loop, configured five ways.

Every policy answers the same three questions, and the loop in `engine.py` asks nothing else:
- Does the draft write at all?
- When the draft doubts a token (perplexity over the threshold), does the target take that position?
- Are the draft's tokens checked by the target before they count, and by which rule?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Check = Literal["none", "rollback", "speculative"]


@dataclass(frozen=True)
class Policy:
    name: str
    drafts: bool  # the draft proposes tokens (False: the target writes every token itself)
    escalates: bool  # a doubtful draft token is discarded and the target writes that position
    check: Check  # none: draft tokens count at once; otherwise held until the target checks them
    description: str


POLICY_TABLE: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("target", drafts=False, escalates=False, check="none",
               description="the target alone: the baseline every speed is compared with"),
        Policy("draft", drafts=True, escalates=False, check="none",
               description="the draft alone: the fastest, and the least faithful to the target"),
        Policy("cascade", drafts=True, escalates=True, check="none",
               description="the draft writes; a token it is unsure of is written by the target instead"),
        Policy("bild", drafts=True, escalates=True, check="rollback",
               description="cascade, and when the target takes over it also checks the draft's recent "
                           "tokens, rolling back from the first one it finds too unlikely (Big Little Decoder)"),
        Policy("speculative", drafts=True, escalates=True, check="speculative",
               description="the draft proposes up to k tokens, the target checks them in one batch and "
                           "keeps the longest prefix it agrees with, plus one token of its own"),
    )
}
