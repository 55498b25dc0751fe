"""Every configuration over the tasks (`python -m cascade tasks`), each answer checked in the sandbox (THIS RUNS
MODEL-WRITTEN CODE) and cached; all configurations in turn within a task, so speeds share the machine's state."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..engine.config import ModelConfig
from ..engine.policies import POLICY_TABLE
from . import sandbox
from .summaries import written
from .tasks import CHECK_VERSION, PromptStyle, Task, TasksError, check_answer
from .tasks_cache import AnswerCache, Setup, cache_key, cache_root, setup_of
from .tasks_configs import Configuration, configurations, distinct
from .tasks_results import Answer, ConfigResult, with_speed_ratios
from .tasks_shares import share_thresholds


def run_tasks(tasks: Sequence[Task], configurations: Sequence[Configuration], style: PromptStyle,
              engine: Callable[[], Any], setup: Setup, cache: AnswerCache,
              timeout_s: float = sandbox.DEFAULT_TIMEOUT_S, memory_mb: int = sandbox.DEFAULT_MEMORY_MB,
              bar: Any = None) -> list[ConfigResult]:
    """Every configuration's answer to every task, cached or written by `engine()` and checked; `bar`: tqdm's."""
    results = [ConfigResult(c) for c in configurations]
    keys = [cache_key(setup, c, style) for c in configurations]
    for task in tasks:
        prompt, framing = style.request(task)
        for result, key in zip(results, keys):
            if bar is not None:
                bar.set_postfix_str(f"{task.task_id} · {result.configuration.label}", refresh=False)
            record = cache.get(key, task)
            if record is not None:
                answer = Answer.from_record(record)
                if record.get("check_version") != CHECK_VERSION:
                    answer = dataclasses.replace(answer, check=check_answer(task, style, answer.answer, timeout_s,
                                                                            memory_mb))
                    cache.put(key, answer.record(task))
            else:
                _tokens, summary = written(engine(), prompt, result.configuration.config.replace(**framing))
                answer = Answer.from_summary(task, summary, check_answer(task, style, summary.answer, timeout_s,
                                                                         memory_mb))
                cache.put(key, answer.record(task))
            result.answers.append(answer)
            if bar is not None:
                bar.update(1)
    return with_speed_ratios(results)


class LazyEngine:
    """The engine, loaded when an answer is first not in the cache; calibrated at load for `auto`."""

    def __init__(self, models: ModelConfig, router: Any, calibrate: bool, log: Callable[[str], None]) -> None:
        self.models, self.router, self.calibrate, self.log = models, router, calibrate, log
        self.engine = None

    def __call__(self) -> Any:
        if self.engine is None:
            from ..engine.engine import Engine
            from ..engine.models import load_pair

            self.engine = Engine(load_pair(self.models, progress=lambda m: self.log(f"[{m}]")), router=self.router)
            if self.calibrate:
                self.engine.calibrate()
        return self.engine


def run_and_report(models: ModelConfig, tasks: Sequence[Task], configs: Sequence[Configuration],
                   style: PromptStyle, *, source: str, cache: bool = True,
                   timeout_s: float = sandbox.DEFAULT_TIMEOUT_S, memory_mb: int = sandbox.DEFAULT_MEMORY_MB,
                   command: Sequence[str] = (), log: Callable[[str], None] = lambda _m: None,
                   shares: Sequence[float] = (), share_rules: Sequence[str] = ("perplexity",)) -> dict[str, Any]:
    """Every configuration on the tasks, as `tasks --json` writes it; `shares` adds cascade with `share_rules` at
    the thresholds sending about these shares to the big model (`tasks_shares.py`)."""
    from tqdm import tqdm

    from ..engine.models import resolve_model
    from ..engine.numerics import batch_kernels
    from ..routing.router import load_router
    from ..serving.machine import cpu_name

    uses_learned = any(c.config.needs_router for c in configs) or (shares and "learned" in share_rules)
    router = load_router(models.router, resolve_model(models.draft, "draft")) if uses_learned else None
    if uses_learned and router is None:
        raise TasksError("the learned rule needs a router, and none is loaded (--router)")
    setup = setup_of(models, router)
    answers = AnswerCache(cache_root() if cache else None)
    engine = LazyEngine(models, router, calibrate=any(POLICY_TABLE[c.policy].steered for c in configs), log=log)
    max_tokens = configs[0].config.max_tokens if configs else 512
    if shares:  # the thresholds are read off the target alone's answers, so those are written first
        (target,) = run_tasks(tasks, configurations(["target"], max_tokens=max_tokens), style, engine, setup, answers)
        chosen = share_thresholds(engine, tasks, style, target, setup, answers, share_rules, shares, log)
        configs = distinct([*configs, *configurations(["cascade"], share_rules, chosen, max_tokens=max_tokens)])
    started = time.perf_counter()
    with tqdm(total=len(tasks) * len(configs), unit="answer", desc="tasks", dynamic_ncols=True,
              mininterval=1.0) as bar:
        results = run_tasks(tasks, configs, style, engine, setup, answers, timeout_s, memory_mb, bar)
    isolation = sandbox.isolation().describe(timeout_s, memory_mb)
    return {
        "title": f"{source}, {len(tasks)} tasks, prompt style {style.name}: {Path(models.draft).name} → "
                 f"{Path(models.target).name}",
        "results": [r.to_dict() for r in results],
        "tasks": {"source": source, "n": len(tasks), "task_ids": [t.task_id for t in tasks]},
        "prompt_style": style.to_dict(),
        "models": {"draft": Path(models.draft).name, "target": Path(models.target).name,
                   "draft_file": setup.draft, "target_file": setup.target},
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count() or 1, "threads": models.n_threads,
                    "device": models.device, "batch_kernels": ", ".join(batch_kernels()) or "none"},
        "checking": isolation,
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": time.perf_counter() - started,
        "loaded_models": engine.engine is not None,
        "command": list(command),
    }
