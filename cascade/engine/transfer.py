"""A download's progress in words: huggingface_hub drives a bar (`Download.bar`, its `tqdm_class`), and the
model's whole download is said as "downloading the target model (part 1 of 2): 1.2 of 4.7 GB"."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

Progress = Callable[[str], None]
PROGRESS_EVERY_S = 0.5  # a download's progress is said at most this often


def amounts(done: int, total: int) -> str:
    """"1.2 of 4.7 GB": two byte counts in the unit of the larger."""
    unit, scale = next(((u, s) for u, s in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)) if total >= s), ("bytes", 1))
    return f"{done} of {total} bytes" if scale == 1 else f"{done / scale:.1f} of {total / scale:.1f} {unit}"


@dataclass
class Download:
    """One part's download said as the model's whole (`label: done of total`), at most every PROGRESS_EVERY_S."""

    report: Progress
    label: str
    before: int  # bytes of the parts before this one
    total: int  # every part's bytes
    clock: Callable[[], float]
    last: float = -math.inf

    def __post_init__(self) -> None:
        self.show(0, force=True)

    def show(self, done: int, force: bool = False) -> None:
        now = self.clock()
        if force or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.report(f"{self.label}: {amounts(self.before + max(done, 0), self.total)}")

    @property
    def bar(self) -> Callable[..., "Bar"]:
        """What huggingface_hub takes as its `tqdm_class`: it makes a bar per transfer and moves it."""
        return functools.partial(Bar, self)


class Bar:
    """The part of a tqdm bar huggingface_hub uses (a Xet transfer's "downloading bytes" bar is not said)."""

    def __init__(self, download: Download, *, total: int | None = None, initial: int = 0, desc: str = "",
                 **_options) -> None:
        self.download, self.total, self.n = download, total, initial
        self.said = not str(desc).endswith("downloading bytes")

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.said:
            self.download.show(self.n, force=self.total is not None and self.n >= self.total)

    def refresh(self, *_args, **_kwargs) -> None:
        """Nothing to draw: progress is said by `update`."""

    set_postfix_str = close = refresh

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
