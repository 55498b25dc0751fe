#!/usr/bin/env python3
"""What reading the draft's hidden state costs: the draft alone with the shipped router loaded (which reads
it at every position) and without, alternating, on the last four prompts of examples/budget/code.jsonl,
twice, 128 tokens each; the draft's milliseconds per token each way.

    python lab/scripts/hidden-state-cost.py DRAFT.gguf TARGET.gguf
"""
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
pair = load_pair(ModelConfig(draft=D, target=T, n_threads=2))
with_router = Engine(pair, router=load_router("", pair.draft_path))
without = Engine(pair)
if with_router.router is None or with_router.router.n_hidden == 0:
    sys.exit("no shipped router that reads the hidden state was trained with this draft file")
prompts = [json.loads(l)["prompt"] for l in (ROOT / 'examples/budget/code.jsonl').open()][8:12]
c = GenerationConfig(policy="draft", max_tokens=128)
for e in (with_router, without):
    list(e.generate(prompts[0], c.replace(max_tokens=16), score=False))
tot = {"hidden": [0, 0.0], "plain": [0, 0.0]}
for r in range(2):
    for p in prompts:
        for name, e in (("hidden", with_router), ("plain", without)):
            s = next(x for x in e.generate(p, c, score=False) if isinstance(x, Summary))
            tot[name][0] += s.counts.n_tokens; tot[name][1] += s.work.draft.seconds
for k, (n, sec) in tot.items():
    print(k, n, f"{1000*sec/n:.2f} ms per draft token")
print("hidden/plain", (tot["hidden"][1]/tot["hidden"][0])/(tot["plain"][1]/tot["plain"][0]))
