"""Whether the target's batched check sees the logits of its own one-token steps, on this llama.cpp build (on a
CPU, the REPACK and LLAMAFILE kernels compute batches differently, so near ties can flip)."""

from __future__ import annotations

import functools
import re

BATCH_KERNELS = ("LLAMAFILE", "REPACK")  # kernels a batch uses and one token does not (CPU)
EXACT_BATCH = 7  # the largest batch measured to give one-token steps' logits on a build without them
EXACT_INSTALL = "scripts/install-llama-cpp --exact"


@functools.cache
def system_info() -> str:
    import llama_cpp

    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")


def batch_kernels(info: str | None = None) -> tuple[str, ...]:
    """The batch-only kernels this build has (of `BATCH_KERNELS`), read from llama.cpp's system information."""
    flags = dict(re.findall(r"(\w+) = (\d+)", system_info() if info is None else info))
    return tuple(k for k in BATCH_KERNELS if flags.get(k, "0") != "0")


def exact_check(k: int, gpu: bool = False, info: str | None = None) -> bool:
    """Whether a check of `k` proposals (k + 1 rows) sees one-token steps' logits (a GPU: not measured)."""
    return not gpu and not batch_kernels(info) and k + 1 <= EXACT_BATCH


def numerics_words(k: int, gpu: bool = False, info: str | None = None) -> str:
    """One sentence on whether speculative decoding's text is the big model's own here, and what to do if not."""
    if gpu:
        return ("on a GPU, the big model's batched check and its one-token steps may round differently, so "
                "speculative decoding's text is the big model's up to rounding (near ties can flip)")
    kernels = batch_kernels(info)
    if kernels:
        return (f"this llama.cpp build reads a batch with other kernels than one token ({' and '.join(kernels)}), so "
                "speculative decoding's text is the big model's up to rounding: at near ties a token can differ "
                f"(for checks that see the big model's own logits, `{EXACT_INSTALL}`)")
    if k + 1 > EXACT_BATCH:
        return (f"this llama.cpp build reads batches of up to {EXACT_BATCH} tokens as it reads one, but k={k} checks "
                f"{k + 1} at once, where rounding differs again: k={EXACT_BATCH - 1} or less keeps the check exact")
    return (f"this llama.cpp build reads a batch of up to {EXACT_BATCH} tokens as it reads one, so with k={k} the "
            "big model's check sees its own logits and the text is its own greedy text")
