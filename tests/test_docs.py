"""The docs' blocks that mirror the code (the policies, the rules, the page's guide) are as
scripts/gen-docs writes them."""

from __future__ import annotations

import runpy

import pytest

from .helpers import ROOT

GEN_DOCS = runpy.run_path(str(ROOT / "scripts" / "gen-docs"))


def test_the_generated_blocks_are_current():
    assert GEN_DOCS["stale"]() == [], "run scripts/gen-docs"


def test_the_generator_rewrites_only_between_its_markers():
    doc = "before\n<!-- rules: old words -->\nstale list\n<!-- /rules -->\nafter\n"
    written = GEN_DOCS["generated"](doc, "rules", "cascade/routing/rules.py", "- fresh\n")
    assert written == ("before\n<!-- rules: written by scripts/gen-docs from cascade/routing/rules.py -->\n"
                       "- fresh\n<!-- /rules -->\nafter\n")
    with pytest.raises(ValueError, match="markers"):
        GEN_DOCS["generated"]("no markers", "rules", "cascade/routing/rules.py", "- fresh\n")
