import math

import pytest

from cascade.engine.config import GenerationConfig, ModelConfig, limits


@pytest.mark.parametrize("changes, message", [
    ({"policy": "fastest"}, "unknown policy"),
    ({"threshold": math.nan}, "threshold must be a finite"),
    ({"threshold": -1.0}, "threshold must be between"),
    ({"k": 0}, "k must be between"),
    ({"k": 10_000}, "k must be between"),
    ({"max_tokens": 0}, "max_tokens must be between"),
    ({"max_tokens": 1_000_000}, "max_tokens must be between"),
    ({"temperature": -0.5}, "temperature must be between"),
    ({"top_p": 1.5}, "top_p must be between"),
    ({"stop": ("",)}, "stop strings"),
])
def test_bad_settings_are_refused_with_a_message(changes, message):
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**changes).validate()


def test_defaults_are_valid_and_match_the_seed():
    config = GenerationConfig().validate()
    assert config.policy == "cascade" and config.threshold == 5.0 and config.temperature == 0.0


def test_limits_expose_default_range_and_help():
    meta = limits(GenerationConfig, "threshold")
    assert meta["default"] is None and "rule" in meta["help"]  # each rule has its own (rules.py)
    assert limits(ModelConfig, "n_ctx")["default"] == 4096


def test_each_rule_brings_its_own_default_threshold():
    from cascade.routing.rules import RULE_TABLE

    for name, rule in RULE_TABLE.items():
        config = GenerationConfig(rule=name).validate()
        assert config.threshold == rule.default and rule.low <= rule.default <= rule.high
    # Another rule named without a threshold takes that rule's default, not the old rule's value.
    assert GenerationConfig.parse({"rule": "margin"}, GenerationConfig(threshold=3.0)).threshold == RULE_TABLE["margin"].default
    assert GenerationConfig.parse({"rule": "entropy", "threshold": "2.5"}).threshold == 2.5
