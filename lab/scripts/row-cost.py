#!/usr/bin/env python3
"""What one more logits row costs the big model: a catch-up read of N tokens asking 1 row against N rows.

Each row asked runs the model's output layer (the whole vocabulary) for that position; the page keeps the rows of
the small model's tokens the big model reads while catching up (`Generation.catching_up`), so this is what that
costs the writing a token. Alternating order, medians, against one-token steps at the same place.

    python lab/scripts/row-cost.py TARGET.gguf [--threads 2] [--tokens 10] [--reps 16]

Nothing else should run beside it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import llama_cpp  # noqa: E402

from cascade.engine.runner import ModelRunner  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=10)
    parser.add_argument("--reps", type=int, default=16)
    args = parser.parse_args()
    llm = llama_cpp.Llama(args.target, n_ctx=2048, n_threads=args.threads, n_batch=512, verbose=False)
    runner, n = ModelRunner(llm), args.tokens
    base = list(range(1000, 1200))  # a 200-token context already read
    runner.advance(base, 1)
    seconds: dict[int, list[float]] = {1: [], n: []}
    steps = []
    for rep in range(args.reps):
        for rows in ((1, n) if rep % 2 else (n, 1)):
            runner.trim_to(base)
            started = time.perf_counter()
            runner.advance(base + list(range(3000 + rep * 20, 3000 + rep * 20 + n)), rows)
            seconds[rows].append(time.perf_counter() - started)
        runner.trim_to(base)
        started = time.perf_counter()
        runner.advance(base + [7 + rep], 1)
        steps.append(time.perf_counter() - started)
    one, every = statistics.median(seconds[1]), statistics.median(seconds[n])
    print(f"{n} tokens read asking 1 row: {one * 1e3:.1f} ms; asking {n}: {every * 1e3:.1f} ms; "
          f"{(every - one) / (n - 1) * 1e3:.2f} ms a further row; a one-token step: {statistics.median(steps) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
