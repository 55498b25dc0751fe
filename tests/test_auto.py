"""The auto policy's decisions, from synthetic costs, and its runs on the toy pair."""

from __future__ import annotations

import copy

import pytest

from cascade.engine.auto import AutoTuner
from cascade.engine.events import TokenEvent
from cascade.engine.policies import POLICY_TABLE, Mode

from .helpers import TOY_THREADS, run


def tuner_with(d: float, t1: float, b: float, escalation: float, alpha: float) -> AutoTuner:
    tuner = AutoTuner()
    for _ in range(50):
        tuner.model_called("target", 1, t1)
        tuner.model_called("target", 5, t1 + 4 * b)
        tuner.model_called("draft", 1, d)
        tuner.proposed(doubtful=False)
    tuner.escalation.value, tuner.alpha.value = escalation, alpha
    return tuner


def emitted() -> TokenEvent:
    return TokenEvent(0, 1, "a", "target", "accepted", None, 1.0, 0.0)


def test_a_long_prompt_read_does_not_count_as_a_verification_batch():
    tuner = tuner_with(d=0.01, t1=0.05, b=0.03, escalation=0.3, alpha=0.5)
    b = tuner.target_extra.value
    tuner.model_called("target", 500, 0.5)  # the prompt: 1 ms a token, far cheaper than verifying
    assert tuner.target_extra.value == b


def test_first_it_measures_the_target_then_the_draft():
    tuner = AutoTuner()
    assert tuner.choose().policy.name == "target"
    tuner.model_called("target", 1, 0.05)
    choice = tuner.choose()
    assert choice.policy.name == "speculative" and choice.k == 2


def test_an_expensive_draft_leaves_the_target_alone():
    tuner = tuner_with(d=0.045, t1=0.05, b=0.03, escalation=0.3, alpha=0.5)
    assert tuner.choose().policy.name == "target"


def test_a_cheap_agreeing_draft_speculates():
    # GPU-like costs: checking a token is nearly free, the draft is 10x cheaper, and usually right.
    choice = tuner_with(d=0.005, t1=0.05, b=0.001, escalation=0.3, alpha=0.8).choose()
    assert choice.policy.name == "speculative" and choice.k >= 3


def test_a_confident_draft_cascades():
    choice = tuner_with(d=0.02, t1=0.05, b=0.015, escalation=0.05, alpha=0.3).choose()
    assert choice.policy.name == "cascade"


def test_it_switches_only_for_a_clear_gain():
    tuner = tuner_with(d=0.045, t1=0.05, b=0.03, escalation=0.3, alpha=0.5)
    assert tuner.choose().policy.name == "target"
    tuner.escalation.value = 0.02  # cascade now predicted at about 0.045 + catch-ups: not clearly faster
    assert tuner.choose().policy.name == "target"


def test_while_the_target_writes_alone_it_probes_the_draft_now_and_then():
    tuner = tuner_with(d=0.045, t1=0.05, b=0.03, escalation=0.3, alpha=0.5)
    names = []
    for _ in range(3 * tuner.probe_every):
        choice = tuner.choose(horizon=1000, draft_lag=10)
        names.append(choice.policy.name)
        for _ in range(1 if choice.policy.name == "target" else 3):
            tuner.told(emitted())
    probes = names.count("speculative")
    assert 2 <= probes <= 4  # about one per probe_every tokens: a few percent of the work


@pytest.mark.parametrize("kind", ["agrees", "partly", "rarely"])
def test_auto_runs_and_its_counts_add_up(pair_engines, kind):
    engine = pair_engines[kind]
    for _ in range(2):  # the second request starts from what the first learned
        events, s = run(engine, "My name is A", policy="auto", max_tokens=60, threshold=4.0)
        accepted = [e for e in events if e.accepted]
        assert s.policy == "auto" and s.counts.n_tokens == len(accepted) == 60
        assert s.text == "".join(e.text for e in accepted)
        assert s.counts.modes and sum(s.counts.modes.values()) >= 1


def test_no_probe_when_the_drafts_catch_up_costs_too_much():
    tuner = tuner_with(d=0.045, t1=0.05, b=0.03, escalation=0.3, alpha=0.5)
    names = [tuner.choose(horizon=40, draft_lag=200).policy.name for _ in range(3 * tuner.probe_every)]
    assert set(names) == {"target"}


def test_after_calibration_the_first_request_writes_the_predicted_way_from_its_first_round(toy):
    from cascade import Engine, ModelConfig, load_pair

    # Two threads, not TOY_THREADS: on one the toy pair's ways nearly tie, and the costs the request measures
    # before choosing tipped its first way in one run of six.
    engine = Engine(load_pair(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=2, n_ctx=512)))
    engine.calibrate()
    tuner = engine.tuner
    assert None not in (tuner.draft_step.value, tuner.target_step.value, tuner.target_extra.value,
                        tuner.alpha.value, tuner.escalation.value), "calibration measures every estimate"
    # The engine's first choice counts what the draft has still to read of the prompt, as this does.
    lag = max(len(engine.encode("My name is A", chat=False)) - len(engine.pair.draft.tokens), 0)
    expected = copy.deepcopy(tuner).choose(horizon=40, draft_lag=lag)
    _, s = run(engine, "My name is A", policy="auto", max_tokens=40, chat=False)
    first_mode = next(iter(s.counts.modes))
    # No round spent measuring: the first one is the chosen way, or a way the tuner predicted as cheap within
    # 10% (at a near tie, the costs the request itself measures before choosing can tip it).
    predicted = copy.deepcopy(tuner).predictions(40, lag)
    near = {Mode(POLICY_TABLE[name], k).label for (name, k), cost in predicted.items()
            if name != "cascade" and cost <= 1.1 * min(predicted.values())}
    assert first_mode == expected.label or first_mode in near, (first_mode, expected.label, predicted)
    assert s.counts.n_tokens == 40


def test_without_calibration_the_first_rounds_measure(toy):
    from cascade import Engine, ModelConfig, load_pair

    engine = Engine(load_pair(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=512)))
    _, s = run(engine, "My name is A", policy="auto", max_tokens=40, chat=False)
    assert list(s.counts.modes)[:2] == ["target", "speculative k=2"]
