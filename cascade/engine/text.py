"""Token bytes to text, safely for characters that span tokens, and stop strings."""

from __future__ import annotations

import codecs
from typing import Sequence


class TextAssembler:
    """Appends token bytes and returns what each adds to the text (a split character comes whole, at its end)."""

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(stop)
        self._longest_stop = max((len(s) for s in self._stop), default=0)
        self.text = ""
        self.stopped = False

    def push(self, piece: bytes) -> str:
        """Add a token's bytes; return the text it completes (cut after a stop string, if one ends here)."""
        delta = self._decoder.decode(piece)
        if self._stop and delta:
            delta = self._cut_at_stop(delta)
        self.text += delta
        return delta

    def _cut_at_stop(self, delta: str) -> str:
        # Only the new text and the tail it can join with may contain a stop string not seen before.
        start = max(0, len(self.text) - self._longest_stop + 1)
        window = self.text[start:] + delta
        ends = [window.find(s) + len(s) for s in self._stop if s in window]
        if not ends:
            return delta
        self.stopped = True
        end_in_delta = min(ends) - (len(self.text) - start)
        return delta[:end_in_delta]
