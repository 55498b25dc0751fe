"""The policy registry is the one list: config validation, the command line, the page and the README
all read it."""

from __future__ import annotations

import dataclasses
import re

import pytest

from cascade.engine.config import GenerationConfig
from cascade.engine.policies import POLICIES, POLICY_TABLE, policy_list_markdown
from cascade.serving.settings import add_generation_flags
from cascade.ui.generate import SETTINGS

from .helpers import ROOT, cascade


def test_every_policy_has_a_label_and_a_description():
    for policy in POLICY_TABLE.values():
        assert policy.label.startswith(policy.name) and len(policy.description) > 20


@pytest.mark.parametrize("name", POLICIES)
def test_config_accepts_exactly_the_registrys_policies(name):
    assert GenerationConfig(policy=name).validate().policy == name


def test_config_refuses_a_policy_outside_the_registry():
    with pytest.raises(ValueError, match="unknown policy 'fastest'; choose one of target, draft"):
        GenerationConfig(policy="fastest").validate()


def test_the_docs_list_the_registry():
    """docs/how-it-works.md's list of policies is the registry's own words (`policy_list_markdown()`)."""
    doc = (ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    listed = re.search(r"<!-- policies:.*?-->\n(.*?)\n<!-- /policies -->", doc, re.S)
    assert listed, "docs/how-it-works.md has lost its <!-- policies: ... --> markers"
    assert listed.group(1) == policy_list_markdown(), \
        "docs/how-it-works.md's policies differ from the registry: paste policy_list_markdown() between the markers"


def test_the_command_lines_choices_are_the_registry():
    help_text = cascade("generate", "--help").stdout
    assert "{" + ",".join(POLICIES) + "}" in help_text


def test_the_pages_dropdown_offers_every_policy_but_the_baseline_loop(toy):
    from cascade.ui.layout import build_demo

    demo = build_demo(lambda progress: None)
    dropdown = next(b for b in demo.blocks.values() if getattr(b, "label", None) == "Who writes")
    offered = {value for _, value in dropdown.choices}
    assert offered == {p.name for p in POLICY_TABLE.values() if p.on_page} == set(POLICIES) - {"seed"}
    assert {label for label, _ in dropdown.choices} == {POLICY_TABLE[n].label for n in offered}


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
