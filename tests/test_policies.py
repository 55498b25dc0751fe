"""The policy registry is the one list: config validation, the command line, the page and the README
all read it."""

from __future__ import annotations

import dataclasses

import pytest

from cascade.engine.config import GenerationConfig
from cascade.engine.policies import POLICIES, POLICY_TABLE
from cascade.serving.settings import add_generation_flags
from cascade.ui.generate import SETTINGS
from cascade.ui.rulewords import policy_label

from .helpers import ENGINE_LOOP_POLICIES, cascade, run


def test_every_policy_has_a_description_and_the_pages_words():
    for policy in POLICY_TABLE.values():
        assert policy_label(policy.name).startswith(policy.name + ": ") and len(policy.description) > 20


@pytest.mark.parametrize("name", POLICIES)
def test_config_accepts_exactly_the_registrys_policies(name):
    assert GenerationConfig(policy=name).validate().policy == name


def test_config_refuses_a_policy_outside_the_registry():
    with pytest.raises(ValueError, match="unknown policy 'fastest'; choose one of target, draft"):
        GenerationConfig(policy="fastest").validate()


def test_the_command_lines_choices_are_the_registry():
    help_text = cascade("generate", "--help").stdout
    assert "{" + ",".join(POLICIES) + "}" in help_text


def test_the_pages_dropdown_offers_every_policy_but_the_baseline_loop(toy):
    from cascade.ui.layout import build_demo

    demo = build_demo(lambda progress: None)
    dropdown = next(b for b in demo.blocks.values() if getattr(b, "label", None) == "Who writes")
    offered = {value for _, value in dropdown.choices}
    assert offered == {p.name for p in POLICY_TABLE.values() if p.on_page} == set(POLICIES) - {"seed"}
    assert {label for label, _ in dropdown.choices} == {policy_label(n) for n in offered}


def test_every_setting_a_page_policy_reads_has_a_flag_and_a_control():
    import argparse

    parser = argparse.ArgumentParser()
    add_generation_flags(parser)
    flags = {a.dest for a in parser._actions}
    fields = {f.name for f in dataclasses.fields(GenerationConfig)}
    used = {name for p in POLICY_TABLE.values() for name in p.settings}
    sampling = {"max_tokens", "temperature", "top_p", "top_k", "seed"}
    assert used <= fields and sampling <= fields
    assert used | sampling | {"policy", "chat", "stop"} <= flags
    assert used | sampling | {"policy"} <= set(SETTINGS)


# What each policy does with a drafted token its rule doubts: the target writes that position (cascade and
# BiLD by design; speculative decoding and lookup+draft end their round there) or it does not (nothing is
# drafted, or the draft writes alone). A new policy must say which, here.
DOUBTED_TOKEN_GOES_TO_THE_TARGET = {"target": False, "draft": False, "cascade": True, "bild": True,
                                    "speculative": True, "lookup": False, "lookup+draft": True}


@pytest.mark.parametrize("policy", [p for p in ENGINE_LOOP_POLICIES if not POLICY_TABLE[p].steered])
def test_where_the_rule_doubts_a_drafted_token_the_target_writes_it_in_every_policy_that_escalates(
        pair_engines, policy):
    """A doubted draft token's position goes to the target exactly in the policies that say so, and the
    Summary names the rule that judged. (`auto` chooses its way round by round: not one answer.)"""
    assert policy in DOUBTED_TOKEN_GOES_TO_THE_TARGET, f"say what {policy} does with a doubted draft token"
    expected = DOUBTED_TOKEN_GOES_TO_THE_TARGET[policy]
    events, summary = run(pair_engines["partly"], "The cat sat on the mat.", policy=policy, threshold=1.5,
                          max_tokens=40)
    escalated = [e for e in events if e.status == "escalated"]
    assert bool(escalated) == expected == (POLICY_TABLE[policy].escalates and POLICY_TABLE[policy].drafts)
    written = {e.position: e for e in events if e.accepted}
    assert all(written[e.position].source == "target" for e in escalated)
    assert summary.rule == ("perplexity" if POLICY_TABLE[policy].escalates else "")
