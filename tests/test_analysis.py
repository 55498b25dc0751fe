"""Reading a run's events: who wrote each position, what the draft had proposed there, and what-ifs."""

from __future__ import annotations

import pytest

from cascade.engine.analysis import Decision, Routing, asked_decision, slots

from .helpers import replay
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
    assert Routing(SPECULATIVE).at_threshold(1.2).counts == (3, 4, 5)
    assert Routing(CASCADE).at_threshold(1.5).counts == (3, 5, 5)
    assert Routing(TARGET_ONLY).at_threshold(1.5).counts == (0, 0, 3)


def test_routing_reads_who_wrote_each_position_once():
    routing = Routing(CASCADE)
    assert routing.slots == slots(CASCADE) and routing.n_by_target == 1
    assert Routing(SPECULATIVE).n_by_target == 2 and Routing(TARGET_ONLY).n_by_target == 3
    # Each accepted event finds its slot by identity (a run can hold equal events at one position).
    assert [routing.slot_of[id(e)].token for e in accepted(CASCADE)] == accepted(CASCADE)
    assert not any(id(e) in routing.slot_of for e in CASCADE if not e.accepted)


def test_a_what_if_needs_another_threshold_and_a_run_the_draft_scored():
    assert Routing(CASCADE).has_whatif and Routing(SPECULATIVE).has_whatif and not Routing(TARGET_ONLY).has_whatif
    run = Decision("perplexity", 5.0)
    assert Routing(CASCADE).whatif(asked_decision(run, 2.5)).counts == Routing(CASCADE).at_threshold(2.5).counts
    assert asked_decision(run, 5.0) is None  # the run's own threshold: the run as it was
    assert asked_decision(run, None) is None
    assert Routing(TARGET_ONLY).whatif(asked_decision(run, 2.5)) is None  # nothing to re-read


def test_an_empty_run_has_no_positions_and_no_what_if():
    routing = Routing([])
    assert routing.slots == [] and not routing.has_whatif and routing.at_threshold(5.0).counts == (0, 0, 0)
    assert Routing([ev(0, " q", status="rolled_back", draft_ppl=1.5)]).slots == []  # nothing accepted yet


# ---- a share of the tokens (a budget) decides -------------------------------------------------------

@pytest.mark.parametrize("threshold, rule, budget, asked", [
    (None, None, None, None),  # nothing asked: the run as it happened
    (5.0, "perplexity", None, None),  # the run's own threshold
    (2.5, None, None, Decision("perplexity", 2.5)),
    (None, None, 0.2, Decision("perplexity", 5.0, 0.2)),  # a share: its threshold is not read
    (None, "margin", None, Decision("margin", 5.0)),  # another rule alone: the run's way, by that rule
])
def test_a_what_if_is_asked_by_a_share_else_a_threshold_else_another_rule(threshold, rule, budget, asked):
    assert asked_decision(Decision("perplexity", 5.0), threshold, rule, budget) == asked


def test_a_run_a_share_decided_is_shown_again_at_that_share_whatever_the_threshold():
    run = Decision("perplexity", 5.0, 0.2)
    assert asked_decision(run, 3.0, "perplexity", 0.2) is None  # a share's run never read its threshold
    assert asked_decision(run, 5.0, "perplexity", None) == Decision("perplexity", 5.0)  # a threshold now decides
    assert asked_decision(run, 5.0, "perplexity", 0.3) == Decision("perplexity", 5.0, 0.3)


def test_a_share_is_replayed_over_the_recorded_positions_as_the_engine_would_have():
    routing = Routing(CASCADE)  # perplexities 1.2, 2.0, 7.0, 3.0, 1.1
    scores = [s.score("perplexity") for s in routing.slots]
    for budget in (0.0, 0.2, 0.4, 1.0):
        whatif = routing.whatif(Decision("perplexity", 5.0, budget))
        assert list(whatif.verdicts) == replay("perplexity", budget, scores)
        assert len(whatif.thresholds) == 5 and whatif.counts[1:] == (5, 5)
    assert routing.whatif(Decision("perplexity", 5.0, 0.0)).counts[0] == 0
    assert routing.whatif(Decision("perplexity", 5.0, 1.0)).counts[0] == 5
    # By a threshold: one threshold for all, as `would_escalate` says.
    fixed = routing.whatif(Decision("perplexity", 1.5))
    assert list(fixed.verdicts) == [s.would_escalate(1.5) for s in routing.slots] and fixed.thresholds == (1.5,) * 5
    assert Routing(TARGET_ONLY).whatif(Decision("perplexity", 5.0, 0.5)) is None  # nothing to re-read


def test_a_position_the_draft_never_proposed_for_is_passed_over_by_a_share():
    whatif = Routing(SPECULATIVE).whatif(Decision("perplexity", 5.0, 0.5))
    assert whatif.verdicts[-1] is None and whatif.counts[1:] == (4, 5)
