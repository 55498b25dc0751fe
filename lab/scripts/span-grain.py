#!/usr/bin/env python3
"""The escalation grain measured: cascade at a 10% budget writing one token, a span while the big model is
unsure ("sure") or the rest of the line ("line") once the rule escalates, beside the target alone, in turn
on each prompt (code: every 2nd prompt of examples/budget/code.jsonl; chat: every 10th prompt of the router's test
split, none of them an evaluation set). For each: speed against the target alone in the same run, the big model's share,
and the share of tokens the big model would have written itself after the same prefix (target_agreement,
read by its scoring pass).

    python lab/scripts/span-grain.py DRAFT.gguf TARGET.gguf [THREADS] [RULE] [ROUTER]
"""
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository, as it is not installed
from cascade.engine.config import GenerationConfig, ModelConfig
from cascade.engine.engine import Engine
from cascade.engine.events import Summary
from cascade.engine.models import load_pair
from cascade.routing.router import load_router

D, T = sys.argv[1], sys.argv[2]
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
RULE = sys.argv[4] if len(sys.argv) > 4 else "perplexity"
ROUTER = sys.argv[5] if len(sys.argv) > 5 else ""
pair = load_pair(ModelConfig(draft=D, target=T, n_threads=THREADS))
engine = Engine(pair, router=load_router(ROUTER, pair.draft_path))
code = [(json.loads(line)["prompt"], True) for line in (ROOT / "examples/budget/code.jsonl").open()][::2]
test = [json.loads(line) for line in (ROOT / "examples/router/test.jsonl").open()][::10]
chat = [(t["prompt"], t.get("chat", True)) for t in test]
configs = {"target": GenerationConfig(policy="target", max_tokens=128)}
for span in ("token", "sure", "line"):
    configs[f"{span}"] = GenerationConfig(rule=RULE, budget=0.1, span=span, max_tokens=128)
for c in configs.values():  # warm-up
    list(engine.generate(code[0][0], c.replace(max_tokens=16), score=False))
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for kind, prompts in (("code", code), ("chat", chat)):
    for prompt, is_chat in prompts:
        for name, c in configs.items():
            s = next(e for e in engine.generate(prompt, c.replace(chat=is_chat)) if isinstance(e, Summary))
            rows[kind][name].append(s)
        print(f"[{kind}] {prompt[:50]!r} done", file=sys.stderr)
print(f"rule {RULE}, budget 10%, {THREADS} threads, 128 tokens; router: {engine.router.trained_on if engine.router else 'none'}")
print("| prompts | grain | tokens | share | agreement with the big model | tok/s | x target alone |")
print("|---|---|---|---|---|---|---|")
for kind, by in rows.items():
    target_speed = sum(s.counts.n_tokens for s in by["target"]) / sum(s.timings.wall_s for s in by["target"])
    for name, ss in by.items():
        n = sum(s.counts.n_tokens for s in ss)
        speed = n / sum(s.timings.wall_s for s in ss)
        share = sum(s.counts.n_target_tokens for s in ss) / n
        agree = sum((s.quality.target_agreement if s.quality else 0) * s.counts.n_tokens for s in ss) / n
        print(f"| {kind} ({len(ss)}) | {name} | {n} | {share:.1%} | {agree:.1%} | {speed:.1f} | {speed / target_speed:.2f} |")
