"""Property-based: random prompts, policies and settings; the engine's invariants must always hold."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade import GenerationConfig, PromptError
from cascade.engine.policies import POLICY_TABLE

from .helpers import ENGINE_LOOP_POLICIES, accepted_ids, run

prompts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from(list("🐱猫é\u202eא ")),
    min_size=1, max_size=40)
# Every policy the engine's loop writes. A policy with a loop of its own (the seed's) writes with its own
# copies of the models and reports text pieces, not token ids: the KV-cursor invariants are not its.


configs = st.builds(
    GenerationConfig,
    policy=st.sampled_from(ENGINE_LOOP_POLICIES),
    threshold=st.floats(0.0, 50.0),
    rollback_threshold=st.floats(1.0, 100.0),
    k=st.integers(1, 8),
    lookup_ngram=st.integers(1, 4),
    max_tokens=st.integers(1, 30),
    temperature=st.sampled_from([0.0, 0.7, 1.3]),
    top_k=st.sampled_from([0, 5]),
    top_p=st.sampled_from([1.0, 0.9]),
    seed=st.integers(0, 2**16),
    chat=st.booleans(),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=prompts, config=configs)
def test_engine_invariants(pair_engines, prompt, config):
    engine = pair_engines["partly"]
    try:
        events, s = run(engine, prompt, **vars(config))
    except PromptError:
        assert not prompt.strip()  # the only prompts refused here are blank ones
        return
    accepted = [e for e in events if e.accepted]
    # counts in the summary are the events' counts
    c = s.counts
    assert c.n_tokens == len(accepted) == c.n_draft_tokens + c.n_target_tokens + c.n_lookup_tokens
    assert [e.position for e in accepted] == list(range(c.n_tokens))
    assert (c.n_escalated, c.n_rejected, c.n_rolled_back) == tuple(
        sum(e.status == kind for e in events) for kind in ("escalated", "rejected", "rolled_back"))
    assert s.text == "".join(e.text for e in accepted)
    assert 1 <= c.n_tokens <= config.max_tokens
    assert (s.stop_reason == "max_tokens") == (c.n_tokens == config.max_tokens and s.stop_reason != "eos"
                                               and s.stop_reason != "stop_string")
    # each model's KV cursor is a prefix of the text, and llama.cpp's cache agrees with it
    text_tokens = engine.encode(prompt, config.chat) + accepted_ids(events)
    for runner in (engine.pair.draft, engine.pair.target):
        assert runner.tokens == text_tokens[: len(runner.tokens)]
        assert runner.cache_end() == len(runner.tokens)
    # on the f32 pair, greedy speculative decoding (lookup's too) is the target's own greedy text
    if POLICY_TABLE[config.policy].lossless and config.temperature == 0:  # greedy: the target's own text
        target_events, _ = run(engine, prompt, **{**vars(config), "policy": "target"})
        assert accepted_ids(target_events) == accepted_ids(events)
