"""`python -m cascade where-it-pays`: for each size of big model, on this machine, measured and predicted
speed of sharing the writing with the small model, as a table, a JSON file and a picture."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

from ..engine.catalog import SIZES, Size, size
from ..engine.config import DEFAULT_DRAFT, ModelConfig
from .shared import Command, log

DEFAULT_SIZES = ("1.5B", "3B", "7B")
BUDGETS = (0.05, 0.1, 0.2, 0.3)
DEFAULT_PROMPTS = ("Code", "Explain to a child", "A short poem")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), metavar="SIZE",
                   help=f"big models to measure, of {', '.join(SIZES)} (default: {' '.join(DEFAULT_SIZES)})")
    p.add_argument("--draft", default=os.environ.get("CASCADE_DRAFT") or DEFAULT_DRAFT,
                   help="the small model: a local .gguf path or repo_id/filename on the Hub (env CASCADE_DRAFT)")
    p.add_argument("--real", action="append", default=[], metavar="SIZE=PATH",
                   help="a big model's real file for a size (repeatable); without one, the Hub's cache is looked "
                        "in, and else a stand-in of its shapes with random weights runs")
    p.add_argument("--stand-ins", action="store_true",
                   help="run every size as a stand-in, even where the real file is here")
    p.add_argument("--rebuild", action="store_true", help="build the stand-ins again")
    p.add_argument("--budgets", type=float, nargs="+", default=list(BUDGETS),
                   help="shares of tokens for the big model (default %(default)s)")
    p.add_argument("--prompts", nargs="+", default=list(DEFAULT_PROMPTS), metavar="NAME",
                   help="names of examples/prompts.json entries to run (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per answer (default %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads per model (default: all cores)")
    p.add_argument("--no-speculative", action="store_true",
                   help="skip speculative decoding on the first, real pair (its calls feed the other sizes' "
                        "predictions)")
    p.add_argument("--replay", type=Path, default=None, metavar="FILE",
                   help="run nothing: recompute a results file's predictions and sentence from the runs and costs "
                        "it recorded, and write them to --json")
    p.add_argument("--json", type=Path, default=Path("where-it-pays.json"), help="results file (default %(default)s)")
    p.add_argument("--html", type=Path, default=Path("where-it-pays.html"), help="the picture (default %(default)s)")


class _Written:
    """A stand-in's progress on stderr, once per half gigabyte written (and at the end)."""

    def __init__(self) -> None:
        self.step = -1

    def __call__(self, done: int, total: int) -> None:
        step = int(done / 5e8)
        if step != self.step or done == total:
            self.step = step
            log(f"  [{done / 1e9:.1f} of {total / 1e9:.1f} GB written]")


def _check_fits(s: Size, draft_path: Path, models: ModelConfig) -> None:
    """Refuse a size this machine cannot hold beside the small model (ModelError), from the catalog's bytes."""
    from ..engine.models import Located, check_memory, locate, parse_model_spec

    target = Located(s.spec, "target", parse_model_spec(s.spec), (s.file_bytes,))
    check_memory(models, locate(str(draft_path), "draft"), target)


def _real_files(specs: list[str]) -> dict[str, Path]:
    files = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not path:
            raise ValueError(f"--real takes SIZE=PATH, got {spec!r}")
        if not Path(path).expanduser().is_file():
            raise ValueError(f"--real {spec}: no such file")
        files[size(name).name] = Path(path).expanduser()
    return files


def replay(args: argparse.Namespace) -> int:
    """`--replay FILE`: the file's rows and sentence again, from its own runs and costs, by today's cost model."""
    from ..bench import where

    try:
        data = json.loads(args.replay.read_text())
        stand_in = {r["target"]: r["stand_in"] for r in data["rows"]}
        results = [where.SizeResult.from_dicts(where.BigModel(size(name), Path(name), stand_in[name]),
                                               data["costs"][name], runs) for name, runs in data["runs"].items()]
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"--replay {args.replay}: not a where-it-pays file with its runs ({e})") from e
    rows = _rows(results)
    data.update(rows=[r.to_dict() for r in rows], sentence=where.break_even_sentence(rows) if rows else None)
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    _show(rows, args)
    return 0


def _show(rows: list, args: argparse.Namespace) -> None:
    """The table and the sentence on stdout, the picture to --html."""
    from ..bench.where import break_even_sentence
    from ..ui.paysmap import map_figure

    print(table(rows) + "\n")
    print(break_even_sentence(rows))
    args.html.write_text(map_figure([r.to_dict() for r in rows]).to_html(include_plotlyjs="cdn"))
    log(f"[wrote {args.json} and {args.html}]")


def run(args: argparse.Namespace) -> int:
    if args.replay is not None:
        return replay(args)
    from ..bench import where
    from ..bench.standin import StandInError, stand_in
    from ..engine.models import local_model, resolve_model
    from ..serving.examples import load_examples

    sizes: list[Size] = sorted({size(name).name: size(name) for name in args.sizes}.values(),
                               key=lambda s: s.params_b)
    if any(not 0 < b < 1 for b in args.budgets):
        raise ValueError("--budgets are shares between 0 and 1, e.g. 0.1")
    examples = {e.name: e for e in load_examples()}
    unknown = [n for n in args.prompts if n not in examples]
    if unknown:
        raise ValueError(f"unknown prompt {unknown[0]!r}; choose among: {', '.join(examples)}")
    chosen = [examples[n] for n in args.prompts]
    real = _real_files(args.real)
    models = ModelConfig(draft=args.draft, n_threads=args.threads or os.cpu_count() or 1).validate()
    draft_path = resolve_model(models.draft, "draft")
    models = dataclasses.replace(models, draft=str(draft_path))
    for s in sizes:  # every size, before building or loading anything
        _check_fits(s, draft_path, models)

    started = time.strftime("%Y-%m-%d %H:%M")
    results: list[where.SizeResult] = []
    interrupted, failed = False, False
    try:
        for s in sizes:
            real_path = None if args.stand_ins else real.get(s.name) or local_model(s.spec)
            if real_path is None:
                log(f"[{s.name}: a stand-in of its shapes with random weights (built once, then cached)]")
            path = real_path or stand_in(s, draft_path, rebuild=args.rebuild, progress=_Written())
            model = where.BigModel(s, Path(path), stand_in=real_path is None)
            log(f"{s.name}: {model.path.name}{' (stand-in)' if model.stand_in else ''}")
            speculative = not model.stand_in and not args.no_speculative and not results
            results.append(where.measure_size(model, models, chosen, args.budgets, args.max_tokens,
                                              speculative=speculative, log=log))
            _write(args.json, results, models, chosen, args, started, interrupted=False)
    except KeyboardInterrupt:
        interrupted = True
        log("\n[stopped: the sizes finished so far are kept]")
    except StandInError as e:
        log(f"error: {e}")
        failed = True
    _write(args.json, results, models, chosen, args, started, interrupted or failed)
    rows = _rows(results)
    if rows:
        _show(rows, args)
    return 130 if interrupted else 2 if failed else 0


def _rows(results: list) -> list:
    from ..bench import where

    return [row for r in results for row in where.rows_for(r, results[0])]


def _write(path: Path, results: list, models: ModelConfig, examples: list, args: argparse.Namespace,
           started: str, interrupted: bool) -> None:
    from ..bench.where import break_even_sentence
    from ..serving.machine import cpu_name

    rows = _rows(results)
    data = {
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": models.n_threads},
        "date": started, "draft": Path(models.draft).name, "prompts": [e.name for e in examples],
        "max_tokens": args.max_tokens, "budgets": args.budgets, "interrupted": interrupted,
        "pattern": results[0].model.size.name if results else None,
        "sentence": break_even_sentence(rows) if rows else None,
        "rows": [r.to_dict() for r in rows],
        "costs": {r.model.size.name: r.costs.to_dict() for r in results},
        "runs": {r.model.size.name: r.runs_dict() for r in results},
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def table(rows: list) -> str:
    """The map as a Markdown table: one row per size and way of sharing."""
    lines = ["| big model | weights | big alone tok/s | way | measured | predicted | small/big cost | read/step |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        way = r.policy if r.budget is None else f"cascade {r.budget:.0%}"
        lines.append(f"| {r.target} | {'stand-in' if r.stand_in else 'real'} | {r.target_tok_s:.2f} | {way} | "
                     f"{_x(r.measured_vs_target)} | {_x(r.predicted_vs_target)} | {r.draft_cost_ratio:.2f} | "
                     f"{r.catchup_cost_ratio:.2f} |")
    return "\n".join(lines)


COMMANDS = (Command("where-it-pays", "measure, for bigger big models, where sharing with the small model saves time",
                    add_arguments, run),)
