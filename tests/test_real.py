"""The real-model tier: a real same-tokenizer pair (Qwen2.5-Coder 0.5B and 1.5B, Q4_K_M).

Runs where CASCADE_REAL_DRAFT and CASCADE_REAL_TARGET name the files (scripts/test fetches them with
../shared/models/get-real-pair where that exists); skipped elsewhere.

Quantized models give slightly different logits when a token is evaluated in a batch rather than
alone, so "lossless" here means: every token speculative decoding emits is the target's argmax as
the target computed it, and an independent recomputation agrees up to that numerical noise.
"""

from __future__ import annotations

import numpy as np
import pytest

from cascade import Engine, ModelConfig, load_pair
from cascade.engine.numerics import EXACT_INSTALL, batch_kernels

from .helpers import accepted_ids, run

pytestmark = pytest.mark.real

SEED_PROMPT = ("Write the following: \"The cat sat on the mat. The dog also came to sit on the mat.\" Then, in one "
               "sentence, propose a novel theory that unifies quantum physics and general relativity.")


@pytest.fixture(scope="module")
def engine(real_pair) -> Engine:
    draft, target = real_pair
    return Engine(load_pair(ModelConfig(draft=draft, target=target, n_threads=2, n_ctx=2048)))


def test_speculative_emits_the_targets_argmax_at_every_position(engine):
    events, s = run(engine, SEED_PROMPT, policy="speculative", k=4, max_tokens=48)
    out = accepted_ids(events)
    prompt = engine.encode(SEED_PROMPT, chat=True)
    # Recompute every position independently: the target reads prompt + output in one batch.
    with engine.pair.lock:
        rows = engine.pair.target.advance(prompt + out[:-1], len(out))
    gaps = np.array([row.max() - row[token] for row, token in zip(rows, out)])
    assert (gaps == 0).mean() >= 0.9, gaps
    assert gaps.max() < 1.0, "a token far from the target's choice: not a numerical near-tie"
    # And the target's perplexity reported with each event matches the recomputation.
    reported = np.array([e.target_ppl for e in events if e.accepted])
    recomputed = np.exp(-(rows[np.arange(len(out)), out] - [np.log(np.exp(r - r.max()).sum()) + r.max() for r in rows]))
    np.testing.assert_allclose(reported, recomputed, rtol=0.35)
    assert s.counts.n_draft_tokens > 0 and s.stop_reason in ("eos", "max_tokens")


def test_speculative_text_matches_the_target_alone_up_to_numerics(engine):
    _, target = run(engine, "Write a Python function that returns the n-th Fibonacci number.", policy="target",
                    max_tokens=40)
    _, spec = run(engine, "Write a Python function that returns the n-th Fibonacci number.", policy="speculative",
                  k=4, max_tokens=40)
    # Near-ties can flip under batched evaluation; a long shared prefix shows the two agree.
    common = next((i for i, (a, b) in enumerate(zip(target.text, spec.text)) if a != b), len(target.text))
    assert common >= min(len(target.text), 60), (target.text, spec.text)


def test_on_an_exact_build_speculative_writes_the_targets_own_text(engine):
    """Where this build has no batch-only kernels (`scripts/install-llama-cpp --exact`), k=4's checks see the
    big model's own logits: speculative decoding writes, token for token, what the big model alone writes.
    Skipped on the fast build, whose answers may differ at near ties (BENCHMARKS.md counts them)."""
    if batch_kernels():
        pytest.skip(f"this llama.cpp build has batch-only kernels ({', '.join(batch_kernels())}): the exact "
                    f"one ({EXACT_INSTALL}) runs this check")
    for prompt in ("Write a Python function that returns the n-th Fibonacci number.", SEED_PROMPT):
        _, target = run(engine, prompt, policy="target", max_tokens=64)
        _, spec = run(engine, prompt, policy="speculative", k=4, max_tokens=64)
        assert spec.text == target.text, prompt


def test_cascade_on_the_seed_prompt_is_sane(engine):
    events, s = run(engine, SEED_PROMPT, policy="cascade", threshold=5.0, max_tokens=64)
    assert len(s.text.split()) >= 8 and sum(c.isalpha() for c in s.text) > len(s.text) / 2
    assert 0 < s.counts.n_target_tokens < s.counts.n_draft_tokens
    escalated = [e for e in events if e.status == "escalated"]
    assert len(escalated) == s.counts.n_target_tokens and all(e.draft_ppl > 5.0 for e in escalated)
    assert s.work.target.tokens_evaluated <= s.prompt_tokens + s.counts.n_tokens
    assert s.work.draft.tokens_evaluated <= s.prompt_tokens + s.counts.n_tokens


def test_seed_baseline_runs_and_routes_like_the_seed(engine):
    """The seed's own loop routes as the seed did: the draft writes a token unless its perplexity of it
    exceeds the threshold, and then the target writes that position. The engine's cascade decides by the
    same rule and threshold, so on a greedy run both write the same text, each position by the same model,
    with the same draft perplexities up to numerical noise (the seed re-reads the whole text per token)."""
    # On this prompt the draft's perplexities stay well away from 5, where evaluation order could tip one.
    prompt, threshold = "The cat sat on the mat. The dog", 5.0
    seed_events, seed = run(engine, prompt, policy="seed", chat=False, threshold=threshold, max_tokens=8)
    events, cascade = run(engine, prompt, policy="cascade", rule="perplexity", chat=False, threshold=threshold,
                          max_tokens=8)
    c = seed.counts
    assert c.n_tokens == 8 and seed.text == cascade.text
    assert 0 < c.n_target_tokens == c.n_escalated < c.n_tokens, "the run should take both branches"
    drafted = [e for e in seed_events if e.source == "draft"]
    assert all((e.draft_ppl > threshold) == (e.status == "escalated") for e in drafted)
    routes = [[(e.position, e.source, e.status) for e in run_events] for run_events in (seed_events, events)]
    assert routes[0] == routes[1]
    np.testing.assert_allclose([e.draft_ppl for e in drafted], [e.draft_ppl for e in events if e.source == "draft"],
                               rtol=0.05)


def test_five_humaneval_problems_target_alone_and_cascade(engine):
    """The task harness on real models: Qwen's prompt, the target alone and cascade; pass@1 reported."""
    from cascade.bench.tasks import STYLES, load_tasks
    from cascade.bench.tasks_cache import AnswerCache, Setup
    from cascade.bench.tasks_configs import configurations
    from cascade.bench.tasks_run import run_tasks
    from cascade.bench.tasks_report import markdown

    tasks = load_tasks()[:5]
    results = run_tasks(tasks, configurations(["cascade"], max_tokens=384), STYLES["qwen"], lambda: engine,
                        Setup("draft", "target"), AnswerCache(None))
    rows = [r.to_dict() for r in results]
    print("\n" + markdown(rows))
    target, cascade = rows
    assert target["n_tasks"] == cascade["n_tasks"] == 5
    assert target["passed"] >= 3, target["answers"]  # the published pass@1 of this model is 70.7%
    assert target["target_share"] == 1.0 and 0 <= cascade["target_share"] < 0.5
    assert cascade["vs_target"] > 0 and cascade["text_ppl_by_target"] >= 1


def test_one_streamed_chat_completion_through_the_api(real_pair):
    """The OpenAI-compatible API on the real pair: a streamed answer, every token with its writer."""
    import openai

    from cascade.api.server import ApiSettings, create_api
    from lab.local import serve_in_thread
    from cascade.serving.service import EngineService

    draft, target = real_pair
    service = EngineService(ModelConfig(draft=draft, target=target, n_threads=2, n_ctx=2048), warm=lambda e: None)
    service.engines()
    server, port = serve_in_thread(create_api(service, ApiSettings()))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        stream = client.chat.completions.create(model="cascade", max_tokens=32, stream=True,
                                                stream_options={"include_usage": True},
                                                messages=[{"role": "user", "content": "Name three colours."}])
        chunks = list(stream)
    finally:
        server.should_exit = True
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    writers = [t["writer"] for c in chunks if c.choices for t in (c.choices[0].model_extra or {})
               .get("cascade", {}).get("tokens", [])]
    usage = chunks[-1].usage
    assert len(text.split()) >= 3 and len(writers) == usage.completion_tokens <= 32
    assert set(writers) <= {"draft", "target"} and usage.model_extra["cascade"]["n_target_tokens"] == \
        writers.count("target")


def test_a_follow_up_reads_the_conversation_through_qwens_own_template(engine):
    from cascade.engine.prompt import render_chat

    question, follow_up = "Name one primary colour, in one word.", "And another one?"
    _, first = run(engine, question, policy="cascade", threshold=5.0, max_tokens=8)
    turns = (("user", question), ("assistant", first.text))
    llm = engine.pair.target.llm
    whole = render_chat(llm, follow_up, history=turns)
    # Qwen's template: the default system message, then each turn in its own <|im_start|> block, in order.
    blocks = whole.split("<|im_start|>")
    assert [b.split("\n", 1)[0] for b in blocks[1:]] == ["system", "user", "assistant", "user", "assistant"]
    assert blocks[2].startswith(f"user\n{question}<|im_end|>") and blocks[3].startswith(f"assistant\n{first.text}")
    expected = llm.tokenize(whole.encode(), add_bos=False, special=True)
    assert engine.encode(follow_up, True, history=turns) == expected
    _, second = run(engine, follow_up, policy="cascade", threshold=5.0, max_tokens=8, history=turns)
    assert second.prompt_tokens == len(expected) and second.counts.n_tokens > 0
