#!/usr/bin/env python3
"""Where greedy speculative decoding parts from the big model alone: both logits at the divergence.

Greedy, speculative decoding writes at each position the big model's likeliest token as its batched check
computes it; the big model alone writes the likeliest as its one-token steps compute it. Where the two texts
part, this script shows the two rows of logits that decided, as llama.cpp returned them to the engine (the
rows it was asked to keep, recorded as `ModelRunner.advance` hands them over): each row's two likeliest
tokens and the gap between them, and how far the two rows differ anywhere in the vocabulary. It also says,
for every position before the divergence, whether the two paths' rows were bit for bit the same, and the
size of the batch (tokens read in one decode) each speculative row came from.

    python lab/scripts/near-tie.py DRAFT.gguf TARGET.gguf [--threads 2] [--k 4] [--tasks HumanEval/0 ...]
        [--json OUT.json]

Without --tasks it takes the HumanEval problems whose cached answers (`python -m cascade tasks ...
--policies target speculative --ks K`, run with the same build and threads) differ between the two. It runs
whichever build of llama-cpp-python the Python running it imports (BENCHMARKS.md, "Speculative decoding's
numerics"). Models run here: nothing else should run beside it if its timings matter (they do not here).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository, as it is not installed

from cascade.bench.tasks import STYLES, load_tasks  # noqa: E402
from cascade.bench.tasks_cache import AnswerCache, cache_key, cache_root, setup_of  # noqa: E402
from cascade.bench.tasks_configs import configurations  # noqa: E402
from cascade.engine.config import GenerationConfig, ModelConfig  # noqa: E402
from cascade.engine.engine import Engine  # noqa: E402
from cascade.engine.events import TokenEvent  # noqa: E402
from cascade.engine.models import load_pair  # noqa: E402
from cascade.engine.numerics import batch_kernels  # noqa: E402


@dataclass
class Read:
    """The row of logits that predicted one generated position, and the decode it came from."""
    row: np.ndarray
    batch: int  # tokens read in that decode (the call's new tokens)
    index: int  # the row's place among them (0 = first)


@dataclass
class Recording:
    """Every row the big model's runner handed the engine in one generation, by the position it predicts
    and the text before it (a check also reads rows past the first token it refuses: those rows follow a
    prefix the output did not keep)."""
    n_prompt: int = 0
    reads: dict[tuple[int, ...], Read] = field(default_factory=dict)

    def deciding(self, tokens: list[int]) -> dict[int, Read]:
        """The row that predicted each position of the kept text, after the kept text before it."""
        out = {}
        for i in range(len(tokens)):
            read = self.reads.get(tuple(tokens[:i]))
            if read is not None:
                out[i] = read
        return out


def record(runner, recording: Recording) -> None:
    """Wrap one runner's `advance` so that each row it returns is kept, by the generated text before the
    position it predicts (the first read after a given text is the one that decided its next token)."""
    advance = runner.advance

    def recorded(context, n_rows=1):
        before = runner.stats.tokens_evaluated
        rows = advance(context, n_rows)
        batch = runner.stats.tokens_evaluated - before
        for i in range(n_rows):
            # Row i predicts the token after absolute position len(context) - n_rows + i.
            end = len(context) - n_rows + i + 1
            if end >= recording.n_prompt:
                prefix = tuple(context[recording.n_prompt:end])
                if prefix not in recording.reads:
                    recording.reads[prefix] = Read(rows[i].copy(), batch, batch - n_rows + i)
        return rows

    runner.advance = recorded


def written(engine: Engine, prompt: str, config: GenerationConfig) -> tuple[list[int], dict[int, Read]]:
    """One generation's kept tokens, and the big model's row that predicted each of them."""
    recording = Recording()
    runner = engine.pair.target
    record(runner, recording)
    recording.n_prompt = len(engine.encode(prompt, config.chat, config.system, config.answer_prefix, config.history))
    try:
        tokens = [e.token_id for e in engine.generate(prompt, config, score=False)
                  if isinstance(e, TokenEvent) and e.accepted]
    finally:
        del runner.advance  # the class's own again
    return tokens, recording.deciding(tokens)


def top2(row: np.ndarray) -> tuple[int, int]:
    first, second = np.argsort(row)[-2:][::-1]
    return int(first), int(second)


def side(row: np.ndarray, piece) -> dict:
    a, b = top2(row)
    return {"top": [[piece(a), float(row[a])], [piece(b), float(row[b])]], "gap": float(row[a] - row[b])}


def compare(alone: tuple[list[int], dict[int, Read]], spec: tuple[list[int], dict[int, Read]], piece) -> dict:
    """The first position where the texts part, both rows there, and how the rows compared before it."""
    (a_tokens, a_reads), (s_tokens, s_reads) = alone, spec
    n = min(len(a_tokens), len(s_tokens))
    at = next((i for i in range(n) if a_tokens[i] != s_tokens[i]), None)
    out: dict = {"n_alone": len(a_tokens), "n_speculative": len(s_tokens)}
    if at is None:
        return {**out, "same_text": a_tokens == s_tokens}
    before = [i for i in range(at) if i in a_reads and i in s_reads]
    deltas = [float(np.max(np.abs(a_reads[i].row - s_reads[i].row))) for i in before]
    differing = [i for i, d in zip(before, deltas) if d > 0]
    first = differing[0] if differing else None
    a, s = a_reads[at], s_reads[at]
    a_tok, s_tok = a_tokens[at], s_tokens[at]
    return {
        **out, "same_text": False, "position": at,
        "alone": {**side(a.row, piece), "batch": a.batch, "index": a.index},
        "speculative": {**side(s.row, piece), "batch": s.batch, "index": s.index},
        # The two tokens in each row: the alone's choice over the speculative's choice, and back.
        "alone_margin": float(a.row[a_tok] - a.row[s_tok]),
        "speculative_margin": float(s.row[s_tok] - s.row[a_tok]),
        "max_abs_diff": float(np.max(np.abs(a.row - s.row))),
        "positions_before": len(before),
        "identical_before": len(before) - len(differing),
        "max_abs_diff_before": max(deltas, default=0.0),
        "first_differing": None if first is None else {
            "position": first, "max_abs_diff": deltas[before.index(first)],
            "speculative_batch": s_reads[first].batch, "speculative_index": s_reads[first].index},
        "speculative_batches_before": sorted({s_reads[i].batch for i in before}),
    }


def cached_divergences(draft: str, target: str, threads: int, k: int) -> list[str]:
    """HumanEval problems whose cached answers differ between the target alone and speculative k (this
    build's cache; run `tasks` first)."""
    setup = setup_of(ModelConfig(draft=draft, target=target, n_threads=threads), None)
    style, cache = STYLES["qwen"], AnswerCache(cache_root())
    alone, spec = configurations(["speculative"], ks=[k])
    keys = cache_key(setup, alone, style), cache_key(setup, spec, style)
    out = []
    for task in load_tasks(None):
        a, s = (cache.get(key, task) for key in keys)
        if a is not None and s is not None and a["answer"] != s["answer"]:
            out.append(task.task_id)
    return out


def line(task_id: str, r: dict) -> str:
    if r["same_text"]:
        return f"{task_id}: same text ({r['n_alone']} tokens)"
    a, s = r["alone"], r["speculative"]
    fd = r["first_differing"]
    where = "every row before it bit for bit the same" if fd is None else (
        f"rows differ from position {fd['position']} (max {fd['max_abs_diff']:.3g}, speculative row "
        f"{fd['speculative_index'] + 1} of a {fd['speculative_batch']}-token read)")
    return (f"{task_id} @ {r['position']}: alone {a['top'][0][0]!r} by {r['alone_margin']:.4f} over "
            f"{s['top'][0][0]!r} (1 of {a['batch']}); speculative {s['top'][0][0]!r} by "
            f"{r['speculative_margin']:.4f} (row {s['index'] + 1} of {s['batch']}); rows differ by up to "
            f"{r['max_abs_diff']:.3g}; before it: {r['identical_before']}/{r['positions_before']} rows identical, "
            f"{where}; speculative reads before it: {r['speculative_batches_before']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("draft")
    parser.add_argument("target")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--tasks", nargs="*", help="HumanEval task ids (default: the cached divergences)")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ids = args.tasks or cached_divergences(args.draft, args.target, args.threads, args.k)
    if not ids:
        sys.exit("no divergences: name --tasks, or run `python -m cascade tasks ... --policies target "
                 "speculative` first with this build")
    tasks = {t.task_id: t for t in load_tasks(None)}
    engine = Engine(load_pair(ModelConfig(draft=args.draft, target=args.target, n_threads=args.threads)))
    piece = engine.pair.piece
    print(f"build's batch-only kernels: {list(batch_kernels()) or 'none'}; {len(ids)} problems", flush=True)
    results = {}
    for task_id in ids:
        prompt, framing = STYLES["qwen"].request(tasks[task_id])
        base = GenerationConfig(max_tokens=args.max_tokens).replace(**framing)
        alone = written(engine, prompt, base.replace(policy="target"))
        spec = written(engine, prompt, base.replace(policy="speculative", k=args.k))
        results[task_id] = compare(alone, spec, piece)
        print(line(task_id, results[task_id]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"batch_kernels": list(batch_kernels()), "k": args.k,
                                         "threads": args.threads, "results": results}, indent=1))


if __name__ == "__main__":
    main()
