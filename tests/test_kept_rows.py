"""The big model keeps the rows it computes while catching up and checking: the scoring step after the answer
reads only the positions it never read, and the scores are those of a full re-read."""

from __future__ import annotations

import pytest

from cascade import GenerationConfig
from cascade.engine.events import Summary, TokenEvent, Written
from cascade.engine.scoring import target_view, text_quality, unread

from .helpers import accepted_ids

PROMPT = "My name is A"
# The drafting policies (and the target alone), each with its knobs set so that both models write.
POLICIES = {"cascade": {"threshold": 2.0}, "speculative": {"k": 4}, "lookup+draft": {"k": 3},
            "bild": {"threshold": 2.0, "k": 4}, "target": {}, "draft": {}}


def written_and_scored(engine, policy: str, **settings):
    """(token events, the `Written` summary, the final summary, the target's tokens read while scoring)."""
    config = GenerationConfig(policy=policy, max_tokens=40, alternatives=3, **POLICIES[policy], **settings)
    events, before, stats = [], None, None
    for event in engine.generate(PROMPT, config, mark_written=True):
        if isinstance(event, Written):
            before, stats = event.summary, engine.pair.target.stats
        elif isinstance(event, TokenEvent):
            events.append(event)
        else:
            final = event
    assert isinstance(final, Summary) and before is not None
    return events, before, final, (engine.pair.target.stats - stats).tokens_evaluated


def full_reread(engine, events):
    """The scores and tops of the answer as the target reads it afresh, the whole of it, in one pass."""
    pair = engine.pair
    prompt = engine.encode_request(PROMPT, True, "", "", ()).tokens
    out = accepted_ids(events)
    pair.target.clear()
    tops: dict = {}
    view = target_view(pair.target, prompt, out, alternatives=3, tops=tops)
    return text_quality(view[i] for i in range(len(out))), tops


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_scores_are_a_full_re_reads_and_the_scoring_reads_only_the_unread_tail(pair_engines, policy):
    engine = pair_engines["partly"]
    events, before, final, read_while_scoring = written_and_scored(engine, policy)
    accepted = [e for e in events if e.accepted]
    last_read = max((e.position for e in accepted if e.target_ppl is not None), default=-1)  # its last row
    # The target read everything up to its last own token while writing; scoring reads only what came after.
    # (A target that read nothing reads the prompt too.)
    unread_tail = len(accepted) - 1 - last_read if last_read >= 0 else final.prompt_tokens + len(accepted) - 1
    assert read_while_scoring == unread_tail
    (ppl, agreement), tops = full_reread(engine, events)
    quality = final.quality
    # Equal up to how a batch's rows round against another batch's on this build (`engine.numerics`).
    assert quality.text_ppl_by_target == pytest.approx(ppl, rel=1e-4)
    assert quality.target_agreement == agreement
    # Every position's tops reach the page, from the writing, the catching up or the scoring.
    named = {e.position: e.target_top for e in events if e.accepted and e.target_top is not None}
    named.update(quality.scored_top)
    assert sorted(named) == sorted(tops)
    for position, top in tops.items():
        assert [p for _, p in named[position]] == pytest.approx([p for _, p in top], abs=1e-3)


def test_only_a_run_someone_waits_on_pays_for_the_rows_it_catches_up_on(pair_engines):
    """A page (`mark_written`) keeps the caught-up rows; the bench, the command line and the API, whose writing
    time is what they measure, ask one row a call and read the rest when scoring, if they score."""
    engine = pair_engines["partly"]
    config = GenerationConfig(policy="cascade", threshold=2.0, max_tokens=40)
    plain, scored, watched = ([e for e in engine.generate(PROMPT, config, **how) if isinstance(e, Summary)][0]
                              for how in ({"score": False}, {}, {"mark_written": True}))
    assert plain.text == scored.text == watched.text and plain.counts == scored.counts == watched.counts
    assert plain.work.extra_rows.get("target", 0) == scored.work.extra_rows.get("target", 0) == 0
    assert watched.work.extra_rows["target"] > 0


def test_the_unread_stretches_are_the_gaps_in_what_was_seen():
    assert unread(0, []) == []
    assert unread(5, []) == [(0, 5)]
    assert unread(5, range(5)) == []
    assert unread(6, [0, 1, 3]) == [(2, 3), (4, 6)]
    assert unread(4, [1, 2]) == [(0, 1), (3, 4)]
