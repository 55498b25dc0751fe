#!/usr/bin/env python3
"""What the page's scoring and its estimate of the big model alone cost and miss, on the page's example prompts.

For each example, at the page's start settings (cascade, perplexity, a 10% share, 128 tokens at most), in
alternating order: the run as the page makes it (`mark_written`: the big model keeps the rows it reads while
catching up, so the scoring after the answer reads only the unread tail) and as the bench makes it (one row a
call, the whole answer read after). It reports the writing time of each (to the answer's last token), the
seconds from the answer's end to the final summary, and whether the two texts are the same. Then the big model
alone on the same request, against what the engine estimated just before it ran
(`Engine.estimate_target_alone_s`'s costs, for the alone's own token count, so that lengths do not count).

    python lab/scripts/page-scoring.py DRAFT.gguf TARGET.gguf [--threads 2] [--rounds 2] [--json OUT.json]

Models run here: nothing else should run beside it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cascade import Engine, ModelConfig, load_pair  # noqa: E402
from cascade.engine.costmodel import target_alone_s  # noqa: E402
from cascade.engine.events import Summary, Written  # noqa: E402
from cascade.serving.examples import load_examples  # noqa: E402
from cascade.ui.controls import PAGE_START  # noqa: E402


def timed(engine: Engine, prompt: str, config, kept: bool) -> dict:
    """One run: its writing seconds, the seconds from its last token to the final Summary, its text."""
    written_at, final = None, None
    for event in engine.generate(prompt, config, mark_written=kept):
        if isinstance(event, Written):
            written_at = time.perf_counter()
        elif isinstance(event, Summary):
            final = event
    after = time.perf_counter() - written_at if kept else final.quality.scoring_s
    return {"write_s": final.timings.wall_s, "after_s": after, "text": final.text, "n": final.counts.n_tokens,
            "extra_rows": final.work.extra_rows.get("target", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("draft")
    parser.add_argument("target")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    engine = Engine(load_pair(ModelConfig(draft=args.draft, target=args.target, n_threads=args.threads)))
    engine.calibrate()
    rows = []
    for round_ in range(args.rounds):
        for example in load_examples(page=True):
            config = PAGE_START.replace(max_tokens=128, chat=example.chat)
            runs = {}
            for kept in ((True, False) if round_ % 2 == 0 else (False, True)):
                runs[kept] = timed(engine, example.prompt, config, kept)
            costs = engine.tuner.alone_costs()  # what the page's estimate reads, before the alone run teaches it
            *_, alone = engine.generate(example.prompt, config.replace(policy="target"), mark_written=True)
            estimate = target_alone_s(*costs, alone.prompt_tokens, alone.counts.n_tokens)
            row = {"example": example.name, "n": runs[True]["n"], "kept_write_s": runs[True]["write_s"],
                   "full_write_s": runs[False]["write_s"], "kept_after_s": runs[True]["after_s"],
                   "full_after_s": runs[False]["after_s"], "kept_rows": runs[True]["extra_rows"],
                   "same_text": runs[True]["text"] == runs[False]["text"], "alone_s": alone.timings.wall_s,
                   "alone_n": alone.counts.n_tokens, "estimate_s": estimate}
            rows.append(row)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    write = sum(r["kept_write_s"] for r in rows) / sum(r["full_write_s"] for r in rows)
    long = [r for r in rows if r["n"] >= 100]
    ratios = [r["estimate_s"] / r["alone_s"] for r in rows]
    summary = {
        "writing_kept_over_full": write,
        "after_kept_median_s": statistics.median(r["kept_after_s"] for r in rows),
        "after_kept_max_s_long": max((r["kept_after_s"] for r in long), default=None),
        "after_full_median_s_long": statistics.median(r["full_after_s"] for r in long) if long else None,
        "same_text": sum(r["same_text"] for r in rows), "runs": len(rows),
        "estimate_over_measured_median": statistics.median(ratios),
        "estimate_within_10pct": sum(0.9 <= x <= 1.1 for x in ratios),
        "threads": args.threads, "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
