#!/usr/bin/env python3
"""Speculative decoding (k=4) against the target alone, greedy, 128 tokens: the same text? how fast? With
whichever build of llama-cpp-python the Python running it imports (the project's, or one built with
-DGGML_CPU_REPACK=OFF -DGGML_LLAMAFILE=OFF, whose batches of up to 7 tokens give one-token logits exactly:
BENCHMARKS.md, "Speculative decoding's numerics"). Prompts: examples/budget/code.jsonl and every 10th of the
router's test split.

    python lab/scripts/same-text.py DRAFT.gguf TARGET.gguf [THREADS]
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository, as it is not installed
import llama_cpp

from cascade.engine.config import GenerationConfig, ModelConfig
from cascade.engine.engine import Engine
from cascade.engine.events import Summary
from cascade.engine.models import load_pair

D, T = sys.argv[1], sys.argv[2]
engine = Engine(load_pair(ModelConfig(draft=D, target=T, n_threads=int(sys.argv[3]) if len(sys.argv) > 3 else 2)))
prompts = [json.loads(line)["prompt"] for line in (ROOT / "examples/budget/code.jsonl").open()]
prompts += [json.loads(line)["prompt"] for line in (ROOT / "examples/router/test.jsonl").open()][::10]


def run(p, c):
    s = next(e for e in engine.generate(p, c, score=False) if isinstance(e, Summary))
    return s.text, s.timings.wall_s, s.counts.n_tokens


target, spec4 = (GenerationConfig(policy="target", max_tokens=128),
                 GenerationConfig(policy="speculative", k=4, max_tokens=128))
for warm_up in (target, spec4):
    run(prompts[0], warm_up.replace(max_tokens=8))
same4 = 0
tt = t4 = 0.0
n = 0
for p in prompts:
    a, wa, na = run(p, target)
    b, wb, nb = run(p, spec4)
    same4 += a == b
    tt += wa
    t4 += wb
    n += na
    print(f"{a == b} target {na / wa:.1f} tok/s, spec k=4 {nb / wb:.1f}", flush=True)
print(f"llama-cpp-python {llama_cpp.__version__} at {llama_cpp.__file__}")
print(f"{len(prompts)} prompts: speculative k=4 wrote the target's text on {same4}; "
      f"target alone {n / tt:.1f} tok/s; k=4 {tt / t4:.2f}x the target alone")
