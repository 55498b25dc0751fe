"""Whether the target's batched check sees the logits of its own one-token steps, on this llama.cpp build.

Speculative decoding keeps the draft's tokens that the target, reading them all in one batch, would have
chosen itself. Its text is the target alone's only if a batch's logits equal those of one token at a time.
On a CPU, llama.cpp's repacked weights (`GGML_CPU_REPACK`) and llamafile's matrix kernels
(`GGML_LLAMAFILE`) compute a batch with other kernels than a single token, and a quantized model's logits
then differ in their last places: the argmax flips at near ties (on the project's build, speculative
decoding changed 41 of HumanEval's 164 answers, BENCHMARKS.md "Is it still right?"). Built without both,
batches of up to `EXACT_BATCH` tokens gave bit-identical logits to one-token steps (FIELD-NOTES), and, since
the runner reads a prompt apart from the proposals after it, all 41 of every 4th HumanEval answer came out
identical to the target's (BENCHMARKS.md). `scripts/install-llama-cpp --exact`
builds it, at about 18% of the big model's own speed on the 2-core host.

The build says which kernels it has in llama.cpp's system information ("LLAMAFILE = 1 | REPACK = 1").
"""

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
    """Whether a check of `k` proposals (a batch of k + 1 rows) sees the logits of one-token steps: on a CPU
    build without batch-only kernels, for batches up to `EXACT_BATCH`. A GPU's kernels were not measured."""
    return not gpu and not batch_kernels(info) and k + 1 <= EXACT_BATCH


def numerics_words(k: int, gpu: bool = False, info: str | None = None) -> str:
    """One sentence on whether speculative decoding's text is the big model's own on this build, and what to
    do if it is not."""
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
