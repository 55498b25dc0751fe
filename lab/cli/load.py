"""`python -m lab api-load --url URL ...`: N streaming clients at once against a running API (`serve`,
or `serve --ray` in front of replicas): lost answers, first token, tokens/s in all, answers per replica."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from cascade.cli.shared import Command, log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the API's base URL (default %(default)s)")
    parser.add_argument("-c", "--concurrency", type=int, default=20, help="clients at once (default %(default)s)")
    parser.add_argument("-n", "--requests", type=int, default=None,
                        help="answers asked for in all (default: one a client)")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="instead: every client asks again and again for S seconds (to watch replicas added)")
    parser.add_argument("--policy", default="cascade", help="the model each request names (default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=64, help="(default %(default)s)")
    parser.add_argument("--prompt", default="Explain in a few sentences how tides work.",
                        help="each request's question, numbered so no two are the same")
    parser.add_argument("--beside", type=int, default=None, metavar="TOKENS",
                        help="instead: one streamed request alone, then sent 0.5 s after a non-streamed request of "
                             "TOKENS tokens (a chat app's title request): both first tokens")
    parser.add_argument("--quiet", action="store_true", help="no line per answer on stderr")
    parser.add_argument("--json", type=Path, default=None, help="write every answer's figures here as JSON")


def run(args: argparse.Namespace) -> int:
    from lab.api_load import first_token_beside, run_load

    if args.beside is not None:
        beside = first_token_beside(args.url, args.beside, model=args.policy, key=os.environ.get("CASCADE_API_KEY", ""))
        print(f"first token alone {beside.alone_first_token_s:.2f} s; sent 0.5 s after a non-streamed request of "
              f"{beside.background_tokens} tokens ({beside.background_wall_s:.1f} s): {beside.first_token_s:.2f} s")
        if args.json:
            args.json.write_text(json.dumps(beside.to_dict(), indent=1))
        return 0
    load = run_load(args.url, args.concurrency, requests=args.requests, duration_s=args.duration, model=args.policy,
                    max_tokens=args.max_tokens, prompt=args.prompt, key=os.environ.get("CASCADE_API_KEY", ""),
                    log=(lambda _m: None) if args.quiet else log)
    print("\n".join(load.lines()))
    if args.json:
        args.json.write_text(json.dumps(load.to_dict(), indent=1))
    return 1 if load.lost else 0


COMMANDS = (Command("api-load", "N streaming clients at once against a running API (one server, or replicas on "
                                "Ray Serve): lost answers, first token, tokens/s, answers per replica",
                    add_arguments, run),)
