"""The learned rule where no router is loaded: refused by type, naming the rule, wherever a policy judges the
draft's doubt (the library, the command line, the API); a policy that judges nothing runs."""

from __future__ import annotations

import subprocess
import sys
from contextlib import nullcontext

import pytest

from cascade import GenerationConfig, RouterMissing, SettingError
from cascade.engine.policies import POLICIES, POLICY_TABLE, offered

from .helpers import ROOT, TOY_THREADS, AnsweringService, cascade, engine_for, run


def _refused(policy: str) -> bool:
    return POLICY_TABLE[policy].judges


@pytest.mark.parametrize("policy", POLICIES)
def test_a_policy_judges_exactly_where_a_doubted_token_goes_to_the_target(policy):
    p = POLICY_TABLE[policy]
    assert p.judges == (p.escalates and p.drafts)
    assert p.judges == ({"rule", "threshold"} <= set(p.settings))
    assert GenerationConfig(policy=policy, rule="learned").needs_router == p.judges


@pytest.mark.parametrize("policy", POLICIES)
def test_the_library_refuses_by_type_or_runs(toy, policy):
    engine = engine_for(toy.small, toy.related)
    assert engine.router is None
    if _refused(policy):
        with pytest.raises(SettingError) as refused:
            run(engine, "Say hi.", policy=policy, rule="learned", max_tokens=4)
        assert refused.value.name == "rule"
        assert isinstance(refused.value, RouterMissing) or POLICY_TABLE[policy].refusal("learned") is not None
    else:
        events, summary = run(engine, "Say hi.", policy=policy, rule="learned", max_tokens=4)
        assert summary.counts.n_tokens == sum(e.accepted for e in events) > 0 and summary.rule == ""


@pytest.mark.parametrize("policy", POLICIES)
def test_the_command_line_exits_2_in_one_line_or_runs(toy, policy):
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--policy", policy,
                "--rule", "learned", "--router", "none", "--max-tokens", "4", "--threads", str(TOY_THREADS),
                "Say hi.")
    if _refused(policy):
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("error: "), r.stderr  # one line, after the progress
    else:
        assert r.returncode == 0, r.stderr


class _Service(AnsweringService):
    """A service over one real engine on the toy pair, with no router."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def lease(self, progress=None, asker=None):
        return nullcontext(self.engine)


@pytest.fixture(scope="module")
def api(toy):
    from fastapi.testclient import TestClient

    from cascade.api.server import ApiSettings, create_api

    return TestClient(create_api(_Service(engine_for(toy.small, toy.related)), ApiSettings()))


@pytest.mark.parametrize("policy", [p.name for p in offered()])
@pytest.mark.parametrize("stream", [False, True])
def test_the_api_answers_400_naming_cascade_rule_or_runs(api, policy, stream):
    r = api.post("/v1/chat/completions", json={"model": policy, "messages": [{"role": "user", "content": "Say hi."}],
                                               "max_tokens": 4, "stream": stream, "cascade": {"rule": "learned"}})
    if _refused(policy):
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "cascade.rule"
    else:
        assert r.status_code == 200, r.text


def test_a_budget_makes_the_threshold_irrelevant():
    """The page's request: a share by the learned rule, with the threshold a visitor left in another rule's units."""
    config = GenerationConfig(policy="cascade", rule="learned", threshold=5.0, budget=0.1).validate()
    assert config.budget == 0.1
    with pytest.raises(SettingError) as refused:  # without a budget the threshold decides, and is judged
        GenerationConfig(policy="cascade", rule="learned", threshold=5.0).validate()
    assert refused.value.name == "threshold"
    with pytest.raises(SettingError):  # speculative decoding reads the threshold, budget or not
        GenerationConfig(policy="speculative", rule="learned", threshold=5.0, budget=0.1).validate()


def test_the_seed_judges_by_perplexity_alone():
    GenerationConfig(policy="seed").validate()
    with pytest.raises(SettingError) as refused:
        GenerationConfig(policy="seed", rule="entropy").validate()
    assert refused.value.name == "rule"


def test_a_config_imports_without_the_native_library():
    code = ("import sys; from cascade.engine.config import GenerationConfig; GenerationConfig().validate(); "
            "assert 'llama_cpp' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
