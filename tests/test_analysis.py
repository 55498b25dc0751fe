"""Reading a run's events: who wrote each position, what the draft had proposed there, and what-ifs."""

from __future__ import annotations

import pytest

from cascade.engine.analysis import Routing, slots

from .recorded import CASCADE, SPECULATIVE, TARGET_ONLY, accepted, ev


def test_each_target_token_is_paired_with_the_drafts_own_proposal_at_its_position():
    found = slots(SPECULATIVE)
    assert [s.token.text for s in found] == ["A", " b", " z", " w", " v"]
    assert found[2].proposal.text == " x"  # rejected at position 2, where the target then wrote
    assert found[3].proposal is None  # " y" was rejected at 3, but the draft's later " w" was kept
    assert found[4].proposal is None  # the target's extra token: the draft proposed nothing there
    assert [s.routing_ppl for s in found] == [1.1, 1.4, 1.5, 2.5, None]
    assert slots(CASCADE)[2].routing_ppl == 7.0  # the escalated token's, not 9.0 (of " lay")


@pytest.mark.parametrize("threshold, verdicts", [
    (1.5, [False, True, True, True, False]),  # 1.2, 2.0, 7.0, 3.0, 1.1 against 1.5
    (2.0, [False, False, True, True, False]),  # equal to the threshold is not above it: the draft keeps it
    (50.0, [False] * 5),
])
def test_a_position_would_escalate_where_the_drafts_recorded_perplexity_is_above_the_threshold(threshold, verdicts):
    assert [s.would_escalate(threshold) for s in slots(CASCADE)] == verdicts


def test_a_position_the_draft_never_scored_has_no_what_if_verdict():
    assert [s.would_escalate(0.5) for s in slots(SPECULATIVE)][-1] is None
    assert [s.would_escalate(0.5) for s in slots(TARGET_ONLY)] == [None, None, None]


def test_routing_counts_what_would_have_gone_to_the_target_among_the_positions_the_draft_scored():
    # SPECULATIVE's draft perplexities by position: 1.1, 1.4, 1.5, 2.5, and none for the last one.
    assert Routing(SPECULATIVE).whatif_counts(1.2) == (3, 4, 5)
    assert Routing(CASCADE).whatif_counts(1.5) == (3, 5, 5)
    assert Routing(TARGET_ONLY).whatif_counts(1.5) == (0, 0, 3)


def test_routing_reads_who_wrote_each_position_once():
    routing = Routing(CASCADE)
    assert routing.slots == slots(CASCADE) and routing.n_by_target == 1
    assert Routing(SPECULATIVE).n_by_target == 2 and Routing(TARGET_ONLY).n_by_target == 3
    # Each accepted event finds its slot by identity (a run can hold equal events at one position).
    assert [routing.slot_of[id(e)].token for e in accepted(CASCADE)] == accepted(CASCADE)
    assert not any(id(e) in routing.slot_of for e in CASCADE if not e.accepted)


def test_a_what_if_needs_another_threshold_and_a_run_the_draft_scored():
    assert Routing(CASCADE).has_whatif and Routing(SPECULATIVE).has_whatif and not Routing(TARGET_ONLY).has_whatif
    assert Routing(CASCADE).whatif_threshold(5.0, 2.5) == 2.5
    assert Routing(CASCADE).whatif_threshold(5.0, 5.0) is None  # the run's own threshold: the run as it was
    assert Routing(CASCADE).whatif_threshold(5.0, None) is None
    assert Routing(TARGET_ONLY).whatif_threshold(5.0, 2.5) is None  # nothing to re-read


def test_an_empty_run_has_no_positions_and_no_what_if():
    routing = Routing([])
    assert routing.slots == [] and not routing.has_whatif and routing.whatif_counts(5.0) == (0, 0, 0)
    assert Routing([ev(0, " q", status="rolled_back", draft_ppl=1.5)]).slots == []  # nothing accepted yet
