"""lab/scripts/near-tie.py: the two rows of logits behind a divergence of speculative decoding from the target
alone. The comparison on known rows; the recording on the toy pair (each recorded row is the one that
picked its position's token, so the positions line up)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from cascade import GenerationConfig

from .helpers import ROOT, engine_for

_spec = importlib.util.spec_from_file_location("near_tie", ROOT / "lab" / "scripts" / "near-tie.py")
near_tie = importlib.util.module_from_spec(_spec)
sys.modules["near_tie"] = near_tie  # (dataclasses look their module up by name)
_spec.loader.exec_module(near_tie)


def _reads(rows: list[np.ndarray], batch: int = 1) -> dict:
    return {i: near_tie.Read(r, batch, 0) for i, r in enumerate(rows)}


def test_the_comparison_reads_both_rows_at_the_first_position_where_the_texts_part():
    same = np.array([0.0, 3.0, 1.0, 0.0])
    alone_rows = [same, same + 0.0, np.array([0.0, 2.0, 1.9, 0.0])]
    # The speculative path's second row already differs (not enough to flip it); its third flips 1 for 2.
    spec_rows = [same, same + np.array([0, 0, 0.01, 0]), np.array([0.0, 2.0, 2.05, 0.0])]
    alone = ([1, 1, 1], _reads(alone_rows))
    spec = ([1, 1, 2, 3], _reads(spec_rows, batch=5))
    r = near_tie.compare(alone, spec, piece=str)
    assert r["position"] == 2 and not r["same_text"]
    assert r["alone_margin"] == pytest.approx(0.1) and r["speculative_margin"] == pytest.approx(0.05)
    assert r["alone"]["top"][0][0] == "1" and r["speculative"]["top"][0][0] == "2"
    assert r["max_abs_diff"] == pytest.approx(0.15)
    assert (r["positions_before"], r["identical_before"]) == (2, 1)
    assert r["first_differing"]["position"] == 1 and r["first_differing"]["speculative_batch"] == 5
    assert r["max_abs_diff_before"] == pytest.approx(0.01)


def test_identical_texts_are_said_to_be_so():
    rows = [np.array([0.0, 1.0])]
    r = near_tie.compare(([1], _reads(rows)), ([1], _reads(rows)), piece=str)
    assert r == {"n_alone": 1, "n_speculative": 1, "same_text": True}


@pytest.mark.parametrize("policy", ["target", "speculative"])
def test_each_recorded_row_is_the_one_that_chose_its_positions_token(toy, policy):
    engine = engine_for(toy.small, toy.related)
    config = GenerationConfig(policy=policy, k=4, max_tokens=24, temperature=0.0)
    tokens, reads = near_tie.written(engine, "The cat sat on the", config)
    assert tokens and sorted(reads) == list(range(len(tokens)))
    # Greedy: every token kept is the likeliest of the big model's row for its position.
    assert [int(np.argmax(reads[i].row)) for i in range(len(tokens))] == tokens
    batches = {reads[i].batch for i in range(1, len(tokens))}
    assert batches == {1} if policy == "target" else max(batches) > 1
    assert "advance" not in vars(engine.pair.target)  # unwrapped again
