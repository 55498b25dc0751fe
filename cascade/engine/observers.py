"""What the generation loop tells whoever watches it: one interface, every hook a no-op by default.

The loop (`loop.py`) calls these at the moments the algorithm names; the `Recorder` counts what
happened for the summary, and `auto`'s tuner (`auto.py`) learns the pair's costs from the same calls.
"""

from __future__ import annotations

from .events import TokenEvent
from .policies import Mode


class Observer:
    def round_started(self, mode: Mode) -> None:
        """A round begins (a round ends when no drafted token waits for the target's check)."""

    def model_called(self, model: str, n_tokens: int, seconds: float, n_rows: int = 1) -> None:
        """`model` ("draft" or "target") evaluated `n_tokens` in one call taking `seconds`, asking for the
        logits of `n_rows` positions (a check needs one row per checked token)."""

    def proposed(self, doubtful: bool) -> None:
        """The draft sampled a token; `doubtful`: the rule sends it to the target at the threshold."""

    def looked_up(self, n_tokens: int) -> None:
        """Prompt lookup proposed `n_tokens` copied from earlier in the text (nothing was sampled)."""

    def checked(self, kept: int, looked_at: int) -> None:
        """The target looked at `looked_at` proposed tokens in order and kept the first `kept`."""

    def told(self, event: TokenEvent) -> None:
        """An event for the caller: a token of the output, or a drafted token that was not kept."""
