"""Recorded runs as values, for the tests of what the page draws from them (no model runs).

Three runs, each a list of the `TokenEvent`s the engine would have sent, and `summary()`, a `Summary`
with plausible numbers; `spans()` reads the token elements back out of the page's HTML.
"""

from __future__ import annotations

import html
import re

from cascade.engine.analysis import Decision
from cascade.engine.events import Counts, Summary, Timings, TokenEvent


def ev(position, text, source="draft", status="accepted", draft_ppl=None, target_ppl=None) -> TokenEvent:
    return TokenEvent(position=position, token_id=position, text=text, source=source, status=status,
                      draft_ppl=draft_ppl, target_ppl=target_ppl, t=0.1 * (position + 1))


# How the recorded runs were decided: perplexity at 5, or a 20% share by it.
AT_5 = Decision("perplexity", 5.0)
BY_SHARE = Decision("perplexity", 5.0, 0.2)

# A cascade run at threshold 5: the draft doubted " sat" (7.0), so the target wrote " lay" there.
CASCADE = [
    ev(0, "The", draft_ppl=1.2),
    ev(1, " cat", draft_ppl=2.0),
    ev(2, " sat", status="escalated", draft_ppl=7.0),
    ev(2, " lay", source="target", draft_ppl=9.0, target_ppl=1.5),
    ev(3, " <b>&amp;</b>", draft_ppl=3.0),
    ev(4, "\n", draft_ppl=1.1),
]

# A speculative run: " x" and " y" were drafted and rejected; the target wrote " z" at position 2;
# later the draft's " w" at 3 was kept and the target added position 4 with no draft proposal there.
SPECULATIVE = [
    ev(0, "A", draft_ppl=1.1, target_ppl=1.3),
    ev(1, " b", draft_ppl=1.4, target_ppl=1.2),
    ev(2, " x", status="rejected", draft_ppl=1.5, target_ppl=30.0),
    ev(3, " y", status="rejected", draft_ppl=1.3, target_ppl=8.0),
    ev(2, " z", source="target", draft_ppl=4.0, target_ppl=1.2),
    ev(3, " w", draft_ppl=2.5, target_ppl=1.1),
    ev(4, " v", source="target", draft_ppl=None, target_ppl=1.05),
]

# The target alone: the draft scored nothing, so there is no what-if.
TARGET_ONLY = [ev(i, f" t{i}", source="target", target_ppl=1.0 + i) for i in range(3)]


def accepted(events: list[TokenEvent]) -> list[TokenEvent]:
    return [e for e in events if e.accepted]


def spans(markup: str, cls: str) -> list[str]:
    """The texts of the token elements carrying a class, unescaped."""
    pattern = rf'<(?:span|s) class="[^"]*\b{cls}\b[^"]*"[^>]*>(.*?)</(?:span|s)>'
    return [html.unescape(t) for t in re.findall(pattern, markup, flags=re.S)]


def summary(text="x", policy="cascade", n=80, by_target=12, wall=80 / 18.3, first_token_s=None, n_lookup_tokens=0,
            modes=(), stop_reason="max_tokens", **kw) -> Summary:
    """A finished run's Summary: `n` tokens, `by_target` of them by the big model (`n_lookup_tokens` copied, auto's
    `modes`), in `wall` seconds, the first after `first_token_s`; `kw`, its other fields (work, rule, budget...)."""
    counts = Counts(n_tokens=n, n_draft_tokens=n - by_target, n_target_tokens=by_target, n_drafted=n,
                    n_escalated=by_target, n_lookup_tokens=n_lookup_tokens, modes=dict(modes))
    return Summary(text=text, policy=policy, stop_reason=stop_reason, prompt_tokens=10, counts=counts,
                   timings=Timings(wall_s=wall, first_token_s=first_token_s), **kw)
