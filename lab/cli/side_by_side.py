"""The front ends' speed against the engine's: `api-bench` and `page-bench` run one request through the
engine and through the API or the page, alternating; `at-once` sends N requests at once to N slots, N engines,
and one at a time."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from cascade.engine.config import GenerationConfig
from cascade.engine.policies import POLICY_TABLE
from cascade.serving.settings import add_model_flags, model_config, model_flags
from cascade.cli.shared import Command, load_engine, log
from lab.cli.flags import add_side_by_side_flags


def add_api_bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_side_by_side_flags(parser, max_tokens=128, rounds=3, prompt="Explain in a few sentences how a bicycle stays upright.")


def api_bench(args: argparse.Namespace) -> int:
    from lab.api_speed import measure_api

    _check_rounds(args)
    result = measure_api(model_config(model_flags(args)), args.prompt, args.policy, args.max_tokens, args.rounds,
                         log=log)
    print(f"{args.policy}, {args.max_tokens} tokens, {args.rounds} rounds: the API streams at {result.ratio:.3f}x the "
          f"engine's tokens/s; its first token arrives {result.first_token_delay_ms:+.1f} ms after the engine's "
          f"(medians)")
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=1))
    return 0


def add_page_bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_side_by_side_flags(parser, max_tokens=64, rounds=4, prompt="Explain to a ten-year-old why the sky is blue.")
    parser.add_argument("--alternatives-cost", action="store_true",
                        help="instead: the engine with no alternatives and with the top 5, alternating")


def page_bench(args: argparse.Namespace) -> int:
    from lab.page_speed import alternatives_cost, measure_page

    _check_rounds(args)
    engine = load_engine(model_config(model_flags(args)))
    if args.alternatives_cost:
        costs = alternatives_cost(engine, args.prompt, policy=args.policy, max_tokens=args.max_tokens,
                                  rounds=args.rounds)
        for c in costs:
            print(f"{c.policy}, alternatives {c.alternatives}: routing_s {1000 * c.routing_s:.1f} ms over "
                  f"{c.n_events} events, wall {c.wall_s:.2f} s (medians of {args.rounds})")
        record = {"alternatives_cost": [dataclasses.asdict(c) for c in costs]}
    else:
        result = measure_page(engine, args.prompt, policy=args.policy, max_tokens=args.max_tokens, rounds=args.rounds,
                              log=log)
        print(f"{args.policy}, {args.max_tokens} tokens, {args.rounds} rounds, {result.n_threads} threads: the page "
              f"streams at {result.ratio:.3f}x the engine's tokens/s (median); its own threads took "
              f"{result.page_cpu_share:.1%} of its time in CPU")
        record = result.to_dict()
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return 0


def _check_rounds(args: argparse.Namespace) -> None:
    if args.rounds < 1 or args.max_tokens < 1:
        raise ValueError("--rounds and --max-tokens must be at least 1")


def add_at_once_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    parser.add_argument("--prompts", type=Path, default=None, help="a JSON list of {name, prompt, chat}")
    parser.add_argument("-n", "--requests", type=int, default=4,
                        help="requests sent at once: the first N prompts (default %(default)s)")
    parser.add_argument("--policy", choices=list(POLICY_TABLE), default="cascade", help="(default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per generation (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of each arrangement (default %(default)s)")
    parser.add_argument("--no-engines", action="store_true", help="leave out N engines (N loaded pairs)")
    parser.add_argument("--memory", type=int, nargs="*", default=[], metavar="SLOTS",
                        help="also measure the resident memory with these numbers of slots, each in a fresh process")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here as JSON")


def at_once(args: argparse.Namespace) -> int:
    from lab.at_once import at_once_table, measure_at_once, memory_mb, memory_table, record
    from cascade.serving.examples import load_examples

    examples = load_examples(args.prompts) if args.prompts else load_examples()
    if not 1 <= args.requests <= len(examples):
        raise ValueError(f"--requests must be between 1 and {len(examples)} (the prompts given)")
    _check_rounds(args)
    models = model_config(model_flags(args))
    rows = measure_at_once(models, examples[:args.requests], GenerationConfig(policy=args.policy,
                           max_tokens=args.max_tokens), rounds=args.rounds, engines=not args.no_engines, log=log)
    print(f"{args.requests} requests at once, {args.policy}, {args.max_tokens} tokens each, {models.n_threads} threads, "
          f"greedy, means of {args.rounds} rounds:")
    print(at_once_table(rows))
    memory = {n: memory_mb(models, n) for n in args.memory}
    if memory:
        print(memory_table(memory))
    if args.json:
        args.json.write_text(record(rows, memory))
    return 0


COMMANDS = (
    Command("api-bench", "the same request through the engine and through the API, side by side: tokens/s and "
                         "when the first token arrives", add_api_bench_arguments, api_bench),
    Command("page-bench", "the same request through the engine and through the page, side by side (a client in "
                          "its own process), and what recording both models' alternatives costs",
            add_page_bench_arguments, page_bench),
    Command("at-once", "N requests at once: N slots over one pair (taking turns, batched) against N engines and "
                       "one at a time (throughput, per-request speed, first token, same text, memory)",
            add_at_once_arguments, at_once),
)
