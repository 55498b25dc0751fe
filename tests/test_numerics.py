"""Whether speculative decoding's check sees the big model's own logits on this llama.cpp build
(`engine/numerics.py`), read from llama.cpp's system information. (On a build without batch-only kernels,
tests/test_real.py checks that speculative decoding's text is the big model's.)"""

from __future__ import annotations

import numpy as np

from cascade.engine.numerics import EXACT_BATCH, EXACT_INSTALL, batch_kernels, exact_check, numerics_words

FAST = "CPU : SSE3 = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
EXACT = "CPU : SSE3 = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | OPENMP = 1 | "


def test_the_builds_batch_kernels_are_read_from_its_system_information():
    assert batch_kernels(FAST) == ("LLAMAFILE", "REPACK")
    assert batch_kernels(EXACT) == ()
    assert batch_kernels("CPU : AVX2 = 1 | LLAMAFILE = 0 | REPACK = 1 |") == ("REPACK",)
    assert isinstance(batch_kernels(), tuple)  # this machine's own build, whichever it is


def test_a_check_is_exact_only_without_batch_kernels_on_a_cpu_and_within_the_measured_batch():
    assert not exact_check(4, info=FAST)
    assert exact_check(4, info=EXACT) and exact_check(EXACT_BATCH - 1, info=EXACT)
    assert not exact_check(EXACT_BATCH, info=EXACT)  # k + 1 rows: one more than measured
    assert not exact_check(4, gpu=True, info=EXACT)


def test_the_words_say_what_the_build_does_and_what_to_do():
    fast = numerics_words(4, info=FAST)
    assert "LLAMAFILE and REPACK" in fast and "up to rounding" in fast and EXACT_INSTALL in fast
    exact = numerics_words(4, info=EXACT)
    assert "its own greedy text" in exact and "k=4" in exact
    too_many = numerics_words(8, info=EXACT)
    assert "k=8 checks 9 at once" in too_many and f"k={EXACT_BATCH - 1} or less" in too_many
    assert "GPU" in numerics_words(4, gpu=True, info=EXACT)


def test_a_check_that_reads_the_prompt_reads_it_as_the_target_alone_does_and_its_proposals_apart(toy):
    """The first check of speculative decoding reads the prompt and the proposals after it. The prompt goes in
    one read ending at its last token, as the target alone reads it; the proposals in a read of their own
    (llama.cpp computes a token inside a long batch a little differently from one in a short one, and those
    few-token reads are the ones exact builds make exact)."""
    from .helpers import engine_for

    runner = engine_for(toy.small, toy.related).pair.target
    prompt = runner.llm.tokenize(b"The cat sat on the mat and looked at the door.")
    proposals = runner.llm.tokenize(b" It was", add_bos=False)[:2] + prompt[1:3]
    reads: list[int] = []
    decode = runner._decode
    runner._decode = lambda chunk, *a: (reads.append(len(chunk)), decode(chunk, *a))[1]
    try:
        runner.clear()
        alone = runner.advance(prompt, 1)
        runner.clear()
        reads.clear()
        checked = runner.advance(prompt + proposals, len(proposals) + 1)
        assert reads == [len(prompt), len(proposals)]
        assert np.array_equal(checked[0], alone[0])  # the prompt's last row: the same read, the same bits
        reads.clear()
        # A later check (its cache holds the text before the rows; the last of it is read again for its row):
        # one read.
        runner.advance(prompt + proposals + proposals, len(proposals) + 1)
        assert reads == [len(proposals) + 1]
    finally:
        del runner._decode
        runner.clear()
