"""What serving several visitors at once does: N engines (CASCADE_WORKERS) against one, on the same
requests, measured in one process (`python -m cascade workers`).

Each setting runs the same requests, `workers` at a time, through the page's own `EngineService`
leases; throughput is all tokens over the whole wall time, per-request speed the mean of each
request's own tokens/s.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

from ..engine.config import GenerationConfig, ModelConfig
from ..serving.examples import Example
from ..serving.service import EngineService


@dataclass(frozen=True)
class WorkersRow:
    workers: int
    threads_per_model: int
    requests: int
    tokens: int
    wall_s: float
    throughput_tok_s: float
    per_request_tok_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def measure_workers(models: ModelConfig, examples: Sequence[Example], config: GenerationConfig,
                    settings: Sequence[tuple[int, int]] = ((1, 2), (2, 2), (2, 1)),
                    log: Callable[[str], None] = print) -> list[WorkersRow]:
    """One row per (workers, threads per model), in the order given."""
    rows = []
    for workers, threads in settings:
        service = EngineService(replace(models, workers=workers, n_threads=threads))
        service.engines()

        def one(example: Example) -> tuple[int, float]:
            with service.lease() as engine:
                *_, summary = engine.generate(example.prompt, config.replace(chat=example.chat))
                return summary.n_tokens, summary.wall_s

        one(examples[0])  # warm-up: the weights paged in
        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(one, examples))
        wall = time.perf_counter() - started
        tokens = sum(n for n, _ in results)
        rows.append(WorkersRow(workers, threads, len(results), tokens, wall, tokens / wall,
                               sum(n / w for n, w in results) / len(results)))
        log(f"  {workers} worker(s), {threads} thread(s) per model: {rows[-1].throughput_tok_s:.2f} tok/s in all, "
            f"{rows[-1].per_request_tok_s:.2f} tok/s per request")
    return rows


def workers_table(rows: Sequence[WorkersRow]) -> str:
    base = rows[0]
    lines = ["| engines (CASCADE_WORKERS) | threads per model | throughput | vs first row | per request | vs first row |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.workers} | {r.threads_per_model} | {r.throughput_tok_s:.2f} tok/s | "
                     f"{r.throughput_tok_s / base.throughput_tok_s:.2f}× | {r.per_request_tok_s:.2f} tok/s | "
                     f"{r.per_request_tok_s / base.per_request_tok_s:.2f}× |")
    return "\n".join(lines)
