"""The token budget on the command line: `calibrate` writes the calibration a budget starts from for the
loaded draft (`routing/budget.py`); `budget-check` measures the share a budget delivers on other prompts."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from cascade.serving.settings import add_model_flags, model_config, model_flags
from cascade.cli.shared import Command, load_engine, log
from lab.cli.flags import add_prompt_flags, prompt_items


def add_every_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--every", type=int, default=1,
                        help="every N-th prompt of the set (the set's kinds of text stay mixed; default %(default)s)")


def every_item(args: argparse.Namespace) -> list:
    """The prompts the flags name, every `--every`-th of them."""
    if args.every < 1:
        raise ValueError("--every must be at least 1")
    return prompt_items(args)[::args.every]


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_prompt_flags(parser, default_split="train")
    parser.set_defaults(max_tokens=96)
    parser.add_argument("--out", type=Path, required=True,
                        help="where to write the calibration (JSON; cascade/routing/calibrations/ ships with the project)")
    parser.add_argument("--name", required=True, help="the pair, in words, as a Summary names the calibration")
    add_every_flag(parser)


def run_calibrate(args: argparse.Namespace) -> int:
    from lab.calibration import calibrate, save

    if not args.out.parent.is_dir():
        raise ValueError(f"cannot write the calibration to {args.out}: its folder does not exist")
    items = every_item(args)
    engine = load_engine(model_config(model_flags(args)))
    source = str(args.prompts) if args.prompts else f"examples/router/{args.split}.jsonl"
    which = f"every {args.every}th of the prompts" if args.every > 1 else "the prompts"
    text = (f"the draft's own greedy answers ({args.max_tokens} tokens at most) to {which} of {source} "
            f"({len(items)}), which no evaluation uses")
    calibration = calibrate(engine, items, args.max_tokens, args.name, text, log)
    save(calibration, args.out)
    print(f"calibration written to {args.out}: {dict(calibration.positions)} positions, rules "
          f"{sorted({r for q in calibration.quantiles.values() for r in q})}")
    return 0


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_prompt_flags(parser, default_split="test")
    parser.set_defaults(max_tokens=128)
    parser.add_argument("--budgets", default="0.05,0.1,0.2,0.3", help="shares to ask for (default %(default)s)")
    parser.add_argument("--rule", default="margin", help="the rule that ranks the positions (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="write every run here as JSON")
    add_every_flag(parser)


def run_check(args: argparse.Namespace) -> int:
    from lab.calibration import budget_table, check_budgets

    try:
        budgets = [float(b) for b in args.budgets.split(",")]
    except ValueError:
        raise ValueError(f"--budgets takes shares such as 0.05,0.1, got {args.budgets!r}") from None
    items = every_item(args)
    engine = load_engine(model_config(model_flags(args)))
    runs = check_budgets(engine, items, budgets, args.rule, args.max_tokens, log)
    print(budget_table(runs))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n")
    return 0


COMMANDS = (
    Command("calibrate", "write the calibration a token budget starts from, for the loaded draft",
            add_calibrate_arguments, run_calibrate),
    Command("budget-check", "measure the share of tokens the big model writes at several budgets",
            add_check_arguments, run_check),
)
