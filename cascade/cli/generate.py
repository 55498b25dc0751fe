"""`python -m cascade generate ...`: stream a generation to the terminal, the target's tokens in red, or as
JSON lines; `--save` also keeps the run as one HTML file."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..engine.config import GenerationConfig, ModelConfig
from ..engine.events import Summary, TokenEvent, complete_events
from ..engine.numerics import numerics_words
from ..engine.policies import POLICY_TABLE
from ..serving.settings import add_generation_flags, add_model_flags, generation_config, model_config, model_flags
from .shared import Command, load_engine

RED, MAGENTA, DIM_STRIKE, RESET = "\033[91m", "\033[95m", "\033[2;9m", "\033[0m"


def add_arguments(gen: argparse.ArgumentParser) -> None:
    add_model_flags(gen)
    add_generation_flags(gen)
    gen.add_argument("--json", action="store_true", help="one JSON object per token event, then the summary")
    gen.add_argument("--show-discarded", action="store_true",
                     help="also print discarded draft tokens, struck through")
    gen.add_argument("--save", type=Path, default=None, metavar="FILE",
                     help="also keep the run in FILE: one HTML page that opens in any browser without a network "
                          "(coloured text, chart, numbers, settings; the run's data embedded as JSON)")
    gen.add_argument("prompt", help="the prompt")


def run(args: argparse.Namespace) -> int:
    config = generation_config(args)
    if args.save is not None and not args.save.parent.is_dir():
        raise ValueError(f"cannot save the run to {args.save}: its folder does not exist")
    models = model_config(model_flags(args))
    engine = load_engine(models, quiet=args.json)
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ or "FORCE_COLOR" in os.environ
    events: list[TokenEvent] = []
    summary: Summary | None = None
    if POLICY_TABLE[config.policy].steered:
        engine.calibrate()  # part of loading: auto's first (and only) request starts informed
    if POLICY_TABLE[config.policy].lossless and config.policy != "target" and not args.json:  # a batched check
        print(f"[{numerics_words(config.k, gpu=models.n_gpu_layers != 0)}]", file=sys.stderr)
    if config.answer_prefix and not args.json:  # given, not written: in the terminal's own colour
        print(config.answer_prefix, end="", flush=True)
    for event in engine.generate(args.prompt, config):
        if isinstance(event, TokenEvent):
            events.append(event)
        else:
            summary = event
        if args.json:
            record = event.to_dict() if isinstance(event, TokenEvent) else {"summary": event.to_dict()}
            print(json.dumps(record, ensure_ascii=False), flush=True)
        elif isinstance(event, TokenEvent):
            print(_render(event, color, args.show_discarded), end="", flush=True)
        else:
            print()
            print(describe(event), file=sys.stderr)
    if args.save is not None:
        save_run(args.save, args.prompt, config, events, summary, models, engine.pair.draft_path)
        if not args.json:
            print(f"[run saved to {args.save}]", file=sys.stderr)
    return 0


def describe(summary: Summary) -> str:
    c, work = summary.counts, summary.work
    acc = f", {c.acceptance_rate:.0%} of drafted tokens kept" if c.acceptance_rate is not None else ""
    given = (f" after {summary.n_given_tokens} given as the answer's start (read, not written)"
             if summary.n_given_tokens else "")
    return (f"{c.n_tokens} tokens{given}, {c.n_target_tokens} by the target "
            f"({c.target_share:.0%}){acc}; {summary.tokens_per_s:.1f} tokens/s over {summary.timings.wall_s:.2f} s "
            f"(draft {work.draft.seconds:.2f} s, target {work.target.seconds:.2f} s); "
            f"stopped: {summary.stop_reason}{describe_budget(summary)}")


def describe_budget(summary: Summary) -> str:
    """A token budget's account on a line of its own (empty without one): share asked and delivered, threshold."""
    budget = summary.budget
    if budget is None:
        return ""
    meant = ("no threshold (no position was judged)" if budget.threshold is None
             else f"a {summary.rule} threshold of {budget.threshold:.4g} (the median its positions met)")
    return (f"\nbudget {100 * budget.share:g}% of the tokens for the target: it wrote "
            f"{summary.counts.target_share:.1%}, at {meant}; where it started: {budget.source}")


def save_run(path: Path, prompt: str, config: GenerationConfig, events: list[TokenEvent], summary: Summary | None,
             models: ModelConfig, draft_path: Path | None = None) -> None:
    """Write the run as one self-contained HTML file (`ui.runfile`), as the page keeps it."""
    from ..routing.budget import calibration_for
    from ..ui.runfile import machine_info, model_names, now, run_html

    calibration = calibration_for(draft_path)[0] if draft_path is not None and config.budget is not None else None
    prior = calibration.prior(config.rule, config.chat) if calibration is not None else None
    document = run_html(prompt, config, complete_events(events, summary), summary, models=model_names(models),
                        machine=machine_info(models), created=now(), prior=prior)
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


COMMANDS = (Command("generate", "generate text, showing the target's tokens in red", add_arguments, run),)
