"""Pairs whose vocabularies differ only in padding rows, which neither model may ever write."""

from __future__ import annotations

from dataclasses import replace

import gguf
import numpy as np
import pytest

from cascade import Engine, ModelConfig, ModelError, load_pair

from .helpers import TOY_THREADS, engine_for, run
from .toymodels import LARGE, SMALL as SMALL_TOY, SMALL_PADDING, build_padded_models, main_vocab, random_weights, \
    write_gguf, write_padded

PROMPT = "My name is"
REAL_TOKENS = 509  # the toy vocabulary's size; padding ids start here


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    return build_padded_models(tmp_path_factory.mktemp("padded-toys"))


# ---- padding rows -------------------------------------------------------------------------------

def test_a_pair_differing_only_in_padding_rows_writes_what_the_plain_pair_writes_and_never_padding(toy, padded):
    plain, engine = engine_for(toy.small, toy.large), engine_for(padded.small, padded.large)
    assert engine.pair.n_vocab == REAL_TOKENS + SMALL_PADDING  # the target's further padding rows are cut
    assert engine.pair.target.padding.tolist() == list(range(REAL_TOKENS, REAL_TOKENS + SMALL_PADDING))
    for policy in ("target", "draft", "cascade", "bild", "speculative", "lookup+draft"):
        for temperature in (0.0, 0.8):
            settings = dict(policy=policy, temperature=temperature, seed=5, max_tokens=12)
            events, summary = run(engine, PROMPT, **settings)
            assert max(e.token_id for e in events) < REAL_TOKENS, (policy, temperature)
            assert summary.text == run(plain, PROMPT, **settings)[1].text, (policy, temperature)


def test_padding_rows_only_the_bigger_model_has_are_accepted_and_cut(toy, padded):
    engine = engine_for(toy.small, padded.large)
    assert engine.pair.n_vocab == REAL_TOKENS and engine.pair.target.padding is None
    settings = dict(policy="cascade", max_tokens=12)
    assert run(engine, PROMPT, **settings)[1].text == run(engine_for(toy.small, toy.large), PROMPT, **settings)[1].text


def test_the_toy_padding_would_win_without_the_mask(padded):
    """The control: the padded target's padding rows out-score its real tokens, so the mask is what keeps them out."""
    engine = Engine(load_pair(ModelConfig(draft=str(padded.small), target=str(padded.large), n_threads=TOY_THREADS,
                                          n_ctx=256)))
    engine.pair.target.padding = None
    events, _ = run(engine, PROMPT, policy="target", max_tokens=4)
    assert all(e.token_id >= REAL_TOKENS for e in events)


def test_pairs_whose_real_tokens_differ_are_refused(toy, tmp_path):
    extra_words = write_padded(tmp_path / "large-extra-words.gguf", LARGE, 8, token_type=int(gguf.TokenType.NORMAL))
    with pytest.raises(ModelError, match=r"the target has 8 more tokens, and token 509 .*is not padding"):
        load_pair(ModelConfig(draft=str(toy.small), target=str(extra_words), n_threads=TOY_THREADS, n_ctx=256))
    vocab = main_vocab()
    swapped = replace(vocab, tokens=[vocab.tokens[1], vocab.tokens[0], *vocab.tokens[2:]])  # same size, same EOS
    write_gguf(tmp_path / "swapped.gguf", SMALL_TOY, swapped, random_weights(SMALL_TOY, vocab))
    with pytest.raises(ModelError, match=r"vocabularies differ \(token 0 is b'!' vs b'\"'\)"):
        load_pair(ModelConfig(draft=str(toy.small), target=str(tmp_path / "swapped.gguf"), n_threads=TOY_THREADS,
                              n_ctx=256))
    with pytest.raises(ModelError, match="vocabularies differ"):
        load_pair(ModelConfig(draft=str(toy.other_vocab), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=256))


def test_masking_a_rows_padding_leaves_its_real_tokens_alone():
    from cascade.engine.runner import NEVER

    rows = np.random.default_rng(0).standard_normal((3, 152_064)).astype(np.float32)
    padding = np.arange(151_665, 152_064)
    masked = rows.copy()
    masked[:, padding] = NEVER
    assert np.array_equal(masked[:, :151_665], rows[:, :151_665]) and (masked.argmax(1) < 151_665).all()
    from cascade.routing.reading import read_row

    reading = read_row(masked[0], int(masked[0].argmax()))
    assert np.isfinite(reading.draft_entropy) and reading.draft_entropy > 0
