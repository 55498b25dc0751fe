"""The learned rule's router on the lab's command line: `router corpus` and `router train` have both models
read texts (the standard library, or the target's own answers) into router data (`router_data.py`);
`router study` and `router train` fit routers on it; `routers` measures every rule on a prompt set."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cascade.serving.settings import add_model_flags, model_config, model_flags
from cascade.cli.shared import Command, load_engine, log
from lab.cli.flags import add_prompt_flags, prompt_items


def add_router_arguments(router: argparse.ArgumentParser) -> None:
    router_sub = router.add_subparsers(dest="router_command", required=True)
    train = router_sub.add_parser("train", help="fit a router on the target's own answers to a prompt set, read by "
                                                      "both models, and write it")
    add_model_flags(train)
    add_prompt_flags(train, default_split="train")
    train.add_argument("--out", type=Path, required=True, help="where to write the router (JSON)")
    train.add_argument("--c", default="1.0",
                       help="inverse regularisation strength, or 'auto': the best of a grid by ROC AUC out of fold, "
                            "folds split by prompt (default %(default)s)")
    train.add_argument("--hidden", action="store_true",
                       help="the router also reads the draft's final hidden state at each position (one input per "
                            "dimension; the draft returns it from the same decode)")
    corpus = router_sub.add_parser(
        "corpus", help="read Python's standard library with both models: a router's training data, sharing "
                       "nothing with any evaluation (functions from their signature and docstring; module "
                       "docstrings as chat answers)")
    add_model_flags(corpus)
    corpus.add_argument("--out-dir", type=Path, required=True,
                        help="folder for the data (shards; a stopped run goes on where it stopped)")
    corpus.add_argument("--positions", type=int, default=120_000, help="stop after this many (default %(default)s)")
    corpus.add_argument("--max-tokens", type=int, default=192, help="tokens read of each text (default %(default)s)")
    corpus.add_argument("--no-hidden", action="store_true", help="leave out the draft's hidden state")
    study = router_sub.add_parser(
        "study", help="fit routers on the corpus data's train modules (regularisation out of fold), judge them and "
                      "the rules on the held-out modules, draw the learning curve, and write the routers")
    study.add_argument("--data", type=Path, required=True, help="the folder `router corpus` wrote")
    study.add_argument("--out-dir", type=Path, required=True,
                       help="folder for the routers (top2.json, hidden.json, hidden-code.json) and results.json")


def train(args: argparse.Namespace) -> int:
    """`router train`: a router from the target's own answers to a prompt set, read by both models."""
    import tempfile

    from lab.router_data import cache_dir, collect, load, train_router, written

    if not args.out.parent.is_dir():
        raise ValueError(f"cannot write the router to {args.out}: its folder does not exist")
    items = prompt_items(args)
    engine = load_engine(model_config(model_flags(args)), router=False)
    c = _regularisation(args.c)
    texts, cached = written(engine, items, args.max_tokens, None if args.no_cache else cache_dir())
    with tempfile.TemporaryDirectory(prefix="router-data-") as folder:
        collect(engine, texts, Path(folder), positions=sys.maxsize, max_tokens=args.max_tokens, hidden=args.hidden)
        router = train_router(load(Path(folder)), c=c, split=str(args.prompts or args.split))
    router.save(args.out)
    d = router.data
    chosen = ""
    if "out_of_fold_roc_auc" in d:
        chosen = f"; C {d['c']:g} chosen out of fold (ROC AUC {d['out_of_fold_roc_auc'][format(d['c'], 'g')]:.3f})"
    print(f"router written to {args.out}: {d['positions']} positions from {d['prompts']} prompts, "
          f"{d['differs_share']:.1%} where the target differs; {len(router.features)} features"
          f"{f' ({router.n_hidden} of them the hidden state)' if router.n_hidden else ''}; training ROC AUC "
          f"{d['train_roc_auc']:.3f}{chosen}; {cached} of {len(texts)} of the target's texts came from the cache")
    return 0


def corpus(args: argparse.Namespace) -> int:
    """`router corpus`: both models read the standard-library corpus (`corpus.py`)."""
    from lab.corpus import stdlib_corpus
    from lab.router_data import collect

    items = stdlib_corpus()
    log(f"[{len(items)} texts in the standard-library corpus]")
    engine = load_engine(model_config(model_flags(args)), router=False)
    collect(engine, items, args.out_dir, args.positions, args.max_tokens, hidden=not args.no_hidden, log=log)
    return 0


def study(args: argparse.Namespace) -> int:
    """`router study`: routers from the corpus data, and how each does on modules it never read."""
    from lab.router_data import load
    from lab.study import markdown
    from lab.study import study as run_study

    data = load(args.data)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results, routers = run_study(data, log=log)
    for name, router in routers.items():
        router.save(args.out_dir / f"{name}.json")
    (args.out_dir / "results.json").write_text(json.dumps(results, indent=1))
    print(markdown(results))
    return 0


def _regularisation(value: str) -> float | None:
    """`--c`: a positive number, or None for 'auto' (chosen out of fold)."""
    if value.strip().lower() == "auto":
        return None
    try:
        c = float(value)
    except ValueError:
        raise ValueError(f"--c takes a positive number or 'auto', got {value!r}") from None
    if not c > 0:
        raise ValueError(f"--c must be above 0, got {value}")
    return c


def add_routers_arguments(routers: argparse.ArgumentParser) -> None:
    add_model_flags(routers)
    add_prompt_flags(routers, default_split="test")
    routers.add_argument("--share", type=float, default=0.10,
                         help="real runs: each rule at the threshold sending about this share to the target "
                              "(default %(default)s)")
    routers.add_argument("--no-real", action="store_true", help="teacher-forced curves only (no real cascade runs)")
    routers.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    routers.add_argument("--html", type=Path, default=None, help="write the curves chart here")


def measure(args: argparse.Namespace) -> int:
    """`routers`: each rule's curve, teacher-forced, and real runs at an equal share."""
    from lab.routers import evaluate
    from lab.routers_report import chart_html, markdown
    from cascade.serving.machine import describe_machine

    items = prompt_items(args)
    engine = load_engine(model_config(model_flags(args)))
    result = evaluate(engine, items, args.max_tokens, share=args.share, real=not args.no_real, log=log)
    if not args.no_real:
        from cascade.bench.costs import measure_costs

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


def router(args: argparse.Namespace) -> int:
    """`router`: its subcommands."""
    return {"train": train, "corpus": corpus, "study": study}[args.router_command](args)


COMMANDS = (
    Command("router", "the learned rule's router", add_router_arguments, router),
    Command("routers", "every rule's quality/cost picture on a prompt set, measured", add_routers_arguments, measure),
)
