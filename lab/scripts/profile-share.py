#!/usr/bin/env python3
"""Where cascade's time goes at a 10% share (a budget of 0.1: margin, perplexity, and the learned rule when a
shipped router was trained with this draft file) against the target and
the draft alone, on the last four code prompts of examples/budget/code.jsonl, in turn: each model's calls and
seconds, the target's call sizes, the time choosing who writes, and the cost model's prediction from the
per-call costs this run measured (`engine/costmodel.py`).

    python lab/scripts/profile-share.py DRAFT.gguf TARGET.gguf [THREADS]
"""
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository, as it is not installed
from cascade.engine.config import GenerationConfig, ModelConfig
from cascade.engine.costmodel import cascade_cost
from cascade.engine.engine import Engine
from cascade.engine.events import Summary
from cascade.engine.models import load_pair
from cascade.routing.router import load_router

D, T = sys.argv[1], sys.argv[2]
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
pair = load_pair(ModelConfig(draft=D, target=T, n_threads=THREADS))
engine = Engine(pair, router=load_router("", pair.draft_path))  # the shipped router, if trained with this draft
prompts = [json.loads(line)["prompt"] for line in (ROOT / "examples/budget/code.jsonl").open()][8:12]
configs = {"target": GenerationConfig(policy="target", max_tokens=128),
           "draft": GenerationConfig(policy="draft", max_tokens=128),
           "cascade margin 10%": GenerationConfig(rule="margin", budget=0.1, max_tokens=128),
           "cascade perplexity 10%": GenerationConfig(rule="perplexity", budget=0.1, max_tokens=128)}
if engine.router is not None:
    configs["cascade learned 10%"] = GenerationConfig(rule="learned", budget=0.1, max_tokens=128)
for name, c in configs.items():  # warm-up
    list(engine.generate(prompts[0], c.replace(max_tokens=16), score=False))
rows = collections.defaultdict(list)
for p in prompts:
    for name, c in configs.items():
        s = next(e for e in engine.generate(p, c, score=False) if isinstance(e, Summary))
        rows[name].append(s)
for name, ss in rows.items():
    n = sum(s.counts.n_tokens for s in ss); wall = sum(s.timings.wall_s for s in ss)
    dr = sum(s.work.draft.seconds for s in ss); tg = sum(s.work.target.seconds for s in ss)
    rt = sum(s.timings.routing_s for s in ss); rs = sum(s.timings.router_s for s in ss)
    sizes = collections.Counter()
    for s in ss:
        for k, v in s.work.call_sizes.get("target", {}).items(): sizes[int(k)] += v
    calls_t = sum(s.work.target.calls for s in ss); calls_d = sum(s.work.draft.calls for s in ss)
    share = sum(s.counts.n_target_tokens for s in ss) / n
    print(f"{name}: {n} tokens, {wall:.2f} s ({n/wall:.1f} tok/s), share {share:.1%}; draft {dr:.2f} s in {calls_d} calls, "
          f"target {tg:.2f} s in {calls_t} calls, routing {rt:.2f} s (router {rs:.2f}), other {wall-dr-tg-rt:.2f} s")
    small = {k: v for k, v in sorted(sizes.items()) if k < 64}
    print(f"   target call sizes (<64 tokens): {small}")
t = rows["target"]; tw = sum(s.timings.wall_s for s in t) / sum(s.counts.n_tokens for s in t)
for name in configs:
    w = sum(s.timings.wall_s for s in rows[name]) / sum(s.counts.n_tokens for s in rows[name])
    print(f"{name}: {tw / w:.2f}x the target alone (per token, prompt reading included)")
# The cost model's prediction from this run's own per-call costs
dr = rows["draft"]; d = sum(s.work.draft.seconds for s in dr) / sum(s.work.draft.calls for s in dr)
t1 = sum(s.work.target.seconds for s in t) / sum(s.work.target.calls for s in t)
for name in [n for n in configs if n.startswith("cascade")]:
    ss = rows[name]
    calls = sum(s.work.target.calls for s in ss); ev = sum(s.work.target.tokens_evaluated for s in ss) - sum(s.prompt_tokens for s in ss)
    tsec = sum(s.work.target.seconds for s in ss)
    # b from the catch-ups: seconds beyond t1 per further token (prompt calls counted at t1 + reading)
    b = max((tsec - calls * t1) / max(ev - calls, 1), 0)
    e = sum(s.counts.n_target_tokens for s in ss) / sum(s.counts.n_tokens for s in ss)
    pred = cascade_cost(d, t1, b, e, 128)
    meas = sum(s.timings.wall_s for s in ss) / sum(s.counts.n_tokens for s in ss)
    print(f"{name}: d {d*1e3:.1f} ms, t1 {t1*1e3:.1f} ms, b {b*1e3:.1f} ms, e {e:.3f}: predicted {t1/pred:.2f}x, measured {tw/meas:.2f}x")
