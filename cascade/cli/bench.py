"""`python -m cascade bench ...`: every policy on the same models and prompts, side by side, as a table in
the terminal and, on request, JSON and a speed/agreement chart."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from ..engine.config import ModelConfig
from ..engine.engine import Engine
from ..engine.policies import POLICY_TABLE
from ..serving.settings import add_model_flags, model_config, model_flags
from .shared import Command, load_engine, log


def add_arguments(bench: argparse.ArgumentParser) -> None:
    add_model_flags(bench)
    bench.add_argument("--prompts", type=Path, default=None,
                       help="a JSON list of {name, prompt, chat} (default: examples/prompts.json)")
    bench.add_argument("--examples", choices=["all", "plain", "copy"], default="all",
                       help="which of the prompts: all, the ones whose answers copy from the prompt, or the others")
    bench.add_argument("--max-tokens", type=int, default=96, help="tokens per generation (default %(default)s)")
    bench.add_argument("--thresholds", type=float, nargs="+", default=[2, 3, 5, 10, 20],
                       help="cascade thresholds to try (default %(default)s)")
    bench.add_argument("--rules", nargs="*", default=None, metavar="RULE", choices=["entropy", "margin", "learned"],
                       help="cascade with these rules too, each at its default threshold (default: entropy, margin, "
                            "and learned when a router is loaded; none with an empty list)")
    bench.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8], help="speculative k values to try")
    bench.add_argument("--only", nargs="+", default=None, metavar="POLICY", choices=list(POLICY_TABLE),
                       help="run only these policies (the target always runs: every figure is relative to it)")
    bench.add_argument("--no-seed", action="store_true", help="skip the seed's slow reference loop")
    bench.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp's own speculative decoding")
    bench.add_argument("--draft-variant", action="append", default=[], metavar="NAME=PATH",
                       help="also run every case with this draft (the same target), side by side (repeatable)")
    bench.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    bench.add_argument("--html", type=Path, default=None, help="write the speed/agreement chart here")


def run(args: argparse.Namespace) -> int:
    from ..bench import default_cases, report, run_bench
    from ..bench.peer import llama_cpp_peer
    from ..bench.run import with_draft_variants
    from ..serving.examples import load_examples

    examples = load_examples(args.prompts) if args.prompts else load_examples()
    if args.examples != "all":
        examples = [e for e in examples if e.copy == (args.examples == "copy")]
    models = model_config(model_flags(args))
    engine = load_engine(models)
    variants = _draft_variants(args.draft_variant, models)
    cases = default_cases(args.max_tokens, args.thresholds, args.ks, seed_loop=not args.no_seed,
                          rules=args.rules if args.rules is not None else
                          ("entropy", "margin") + (("learned",) if engine.router is not None else ()))
    if args.only:
        cases = [c for c in cases if c.config.policy in args.only]
    result = run_bench(engine, examples, with_draft_variants(cases, list(variants)), args.max_tokens, log=log,
                       variants=variants)
    if not args.no_llama_cpp:
        result.llama_cpp = llama_cpp_peer(engine.pair, examples, args.ks, args.max_tokens, log=log)
    print(report.headline(result, len(examples), args.max_tokens) + "\n")
    print(report.markdown_table(result) + "\n")
    print(report.costs_table(result))
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=1))
    if args.html:
        report.chart_html(result, args.html)
    return 0


def _draft_variants(specs: list[str], models: ModelConfig) -> dict[str, Engine]:
    """`--draft-variant NAME=PATH`: an engine for each, that draft beside the same target (no router)."""
    variants = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--draft-variant takes NAME=PATH, got {spec!r}")
        variants[name] = load_engine(dataclasses.replace(models, draft=path), router=False)
    return variants


COMMANDS = (Command("bench", "run every policy on the same models and prompts, side by side", add_arguments, run),)
