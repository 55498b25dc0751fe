"""How many at once: the same N requests through N slots of one pair of models (CASCADE_PARALLEL), taking turns
(the default: batch-invariant) and batched (`--batch-slots`), through N engines that each load the pair (how the
project served several visitors before slots), and one at a time (one slot of the same server, nobody else
writing), measured in one process, in alternating rounds (`python -m lab at-once`).

Throughput is all tokens over the wall time from the first request sent to the last answer; per request,
the mean of each request's own tokens/s; the first token, the mean time from sending a request to its
first written token. Each greedy text is compared with the same request's text one at a time.
Memory (`memory_mb`) is measured in a fresh process per number of slots: its resident memory after loading
and one short generation.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

from cascade.engine.config import GenerationConfig, ModelConfig
from cascade.engine.engine import Engine
from cascade.engine.events import Summary, TokenEvent
from cascade.engine.models import load_pair
from cascade.serving.examples import Example
from cascade.serving.machine import rss_mb


@dataclass(frozen=True)
class AtOnceRow:
    arrangement: str  # "one at a time", "N slots", "N engines"
    requests: int
    tokens: int
    wall_s: float
    throughput_tok_s: float
    per_request_tok_s: float
    first_token_s: float
    same_text: int  # requests whose text is the one-at-a-time text
    same_run: int = 0  # requests whose tokens, writers and draft perplexities are the one-at-a-time run's

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Answer:
    text: str
    tokens: int
    first_token_s: float
    wall_s: float
    run: tuple = ()  # each token event's (token, writer, fate, draft perplexity)


def answer(engine: Engine, example: Example, config: GenerationConfig) -> Answer:
    """One request to its end, as the API runs it (no scoring pass)."""
    sent = time.perf_counter()
    first = None
    run = []
    for event in engine.generate(example.prompt, config.replace(chat=example.chat), score=False):
        if isinstance(event, TokenEvent):
            run.append((event.token_id, event.source, event.status, event.draft_ppl))
        if first is None and isinstance(event, TokenEvent) and event.accepted:
            first = time.perf_counter() - sent
        if isinstance(event, Summary):
            wall = time.perf_counter() - sent
            return Answer(event.text, event.counts.n_tokens, first if first is not None else wall, wall, tuple(run))
    raise RuntimeError("the generation ended without a summary")


def together(engines: Sequence[Engine], examples: Sequence[Example], config: GenerationConfig) -> tuple[list[Answer], float]:
    """Each example on its own engine (slot), all sent at once; the answers and the wall time."""
    answers: list[Answer | None] = [None] * len(examples)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            answers[i] = answer(engines[i], examples[i], config)
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the caller's thread
            errors.append(e)

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(examples))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [a for a in answers if a is not None], time.perf_counter() - started


def one_at_a_time(engine: Engine, examples: Sequence[Example], config: GenerationConfig) -> tuple[list[Answer], float]:
    started = time.perf_counter()
    answers = [answer(engine, e, config) for e in examples]
    return answers, time.perf_counter() - started


def _row(name: str, answers: Sequence[Answer], wall: float, reference: Sequence[Answer]) -> AtOnceRow:
    tokens = sum(a.tokens for a in answers)
    return AtOnceRow(name, len(answers), tokens, wall, tokens / wall,
                     sum(a.tokens / a.wall_s for a in answers) / len(answers),
                     sum(a.first_token_s for a in answers) / len(answers),
                     sum(a.text == r.text for a, r in zip(answers, reference)),
                     sum(a.run == r.run for a, r in zip(answers, reference)))


def measure_at_once(models: ModelConfig, examples: Sequence[Example], config: GenerationConfig,
                    rounds: int = 2, engines: bool = True,
                    log: Callable[[str], None] = print) -> list[AtOnceRow]:
    """Rows for one at a time, N slots taking turns, N slots batched and (with `engines`) N engines,
    N = len(examples): the mean of `rounds` alternating rounds."""
    n = len(examples)
    config = config.replace(temperature=0.0)
    slots = Engine(load_pair(replace(models, parallel=n, batch_slots=False))).slots()
    batched = Engine(load_pair(replace(models, parallel=n, batch_slots=True))).slots()
    apart = [Engine(load_pair(replace(models, parallel=1))) for _ in range(n)] if engines else []
    for engine in [slots[0], batched[0], *apart]:
        answer(engine, examples[0], config.replace(max_tokens=4))  # the weights paged in
    runs: dict[str, list[tuple[list[Answer], float]]] = {}
    arrangements = [("one at a time", lambda: one_at_a_time(slots[0], examples, config)),
                    (f"{n} slots, taking turns", lambda: together(slots, examples, config)),
                    (f"{n} slots, batched", lambda: together(batched, examples, config))]
    if apart:
        arrangements.append((f"{n} engines", lambda: together(apart, examples, config)))
    for r in range(rounds):
        for name, run in arrangements:
            runs.setdefault(name, []).append(run())
            answers, wall = runs[name][-1]
            log(f"  round {r + 1}, {name}: {sum(a.tokens for a in answers) / wall:.2f} tok/s in all")
    reference = runs["one at a time"][0][0]
    rows = []
    for name, _ in arrangements:
        measured = [_row(name, answers, wall, reference) for answers, wall in runs[name]]
        rows.append(_mean(measured))
    return rows


def _mean(rows: Sequence[AtOnceRow]) -> AtOnceRow:
    first = rows[0]
    k = len(rows)
    wall = sum(r.wall_s for r in rows) / k
    return AtOnceRow(first.arrangement, first.requests, first.tokens, wall,
                     sum(r.throughput_tok_s for r in rows) / k, sum(r.per_request_tok_s for r in rows) / k,
                     sum(r.first_token_s for r in rows) / k, min(r.same_text for r in rows),
                     min(r.same_run for r in rows))


def at_once_table(rows: Sequence[AtOnceRow]) -> str:
    base = rows[0]
    lines = ["| arrangement | tokens/s in all | vs one at a time | per request | first token | same text "
             "| same tokens, writers, scores |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.arrangement} | {r.throughput_tok_s:.2f} | {r.throughput_tok_s / base.throughput_tok_s:.2f}× | "
                     f"{r.per_request_tok_s:.2f} tok/s | {r.first_token_s:.2f} s | {r.same_text} of {r.requests} "
                     f"| {r.same_run} of {r.requests} |")
    return "\n".join(lines)


# ---- memory, in a fresh process per setting ----------------------------------------------------------

def _memory_child(models: ModelConfig, slots: int, out) -> None:
    before = rss_mb()
    engines = Engine(load_pair(replace(models, parallel=slots))).slots()
    answer(engines[0], Example("memory", "Say hello.", True), GenerationConfig(max_tokens=4))
    out.put(rss_mb() - before)


def memory_mb(models: ModelConfig, slots: int) -> float:
    """Resident memory a process gains by loading the pair with `slots` slots and writing a few tokens."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_memory_child, args=(models, slots, out))
    child.start()
    try:
        return float(out.get(timeout=600))
    finally:
        child.join(timeout=60)


def memory_table(figures: dict[int, float]) -> str:
    lines = ["| slots | resident memory |", "|---|---|"]
    lines += [f"| {n} | {mb:,.0f} MB |" for n, mb in figures.items()]
    return "\n".join(lines)


def record(rows: Sequence[AtOnceRow], memory: dict[int, float]) -> str:
    return json.dumps({"rows": [r.to_dict() for r in rows], "memory_mb": memory}, indent=1)
