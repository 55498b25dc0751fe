"""The hooks the generation loop calls as it runs, each a no-op by default (the `Recorder`, `auto`'s tuner)."""

from __future__ import annotations

from .events import TokenEvent
from .policies import Mode


class Observer:
    def round_started(self, mode: Mode) -> None:
        """A round begins (it ends when no drafted token awaits the target's check)."""

    def model_called(self, model: str, n_tokens: int, seconds: float, n_rows: int = 1) -> None:
        """`model` ("draft" or "target") read `n_tokens` in one call of `seconds`, asking for `n_rows` rows."""

    def proposed(self, doubtful: bool) -> None:
        """The draft sampled a token; `doubtful`: the rule sends it to the target."""

    def looked_up(self, n_tokens: int) -> None:
        """Prompt lookup proposed `n_tokens`."""

    def checked(self, kept: int, looked_at: int) -> None:
        """The target looked at `looked_at` proposed tokens in order and kept the first `kept`."""

    def told(self, event: TokenEvent) -> None:
        """An event for the caller: an output token, or a proposal not kept."""
