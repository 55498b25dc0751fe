"""The flags several lab commands share: a prompt set (reading the prompts they name) and a side-by-side
bench of the engine against a front end."""

from __future__ import annotations

import argparse
from pathlib import Path

from cascade.engine.policies import offered
from cascade.serving.settings import add_model_flags


def add_side_by_side_flags(parser: argparse.ArgumentParser, *, max_tokens: int, rounds: int, prompt: str) -> None:
    """The flags of a bench that runs one request through the engine and through a front end (the page,
    the API), alternating: the models, the policy, the request's length and prompt, rounds, and --json."""
    add_model_flags(parser)
    parser.add_argument("--policy", choices=[p.name for p in offered()], default="cascade",
                        help="(default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=max_tokens, help="(default %(default)s)")
    parser.add_argument("--rounds", type=int, default=rounds, help="requests each way, alternating (default %(default)s)")
    parser.add_argument("--prompt", default=prompt)
    parser.add_argument("--json", type=Path, default=None, help="write the timings here as JSON")


def add_prompt_flags(parser: argparse.ArgumentParser, default_split: str) -> None:
    """The prompt set the router is trained or measured on, and how much of the target's text to read."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--prompts", type=Path, default=None,
                       help='a JSON-lines file, one {"prompt": ..., "chat": true|false} a line')
    group.add_argument("--split", choices=["train", "test"], default=default_split,
                       help="the shipped prompt set's split (examples/router/; default %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens the target writes per prompt (default %(default)s)")
    parser.add_argument("--no-cache", action="store_true",
                        help="run the target even where its text for the prompt is cached (~/.cache/cascade/target-texts)")


def prompt_items(args: argparse.Namespace) -> list:
    """The prompts `add_prompt_flags` names, checked."""
    from lab.prompts import load_prompts, load_split

    items = load_prompts(args.prompts) if args.prompts else load_split(args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError("--limit must be at least 1")
        items = items[:args.limit]
    if args.max_tokens < 1:
        raise ValueError("--max-tokens must be at least 1")
    return items
