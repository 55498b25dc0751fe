"""Each rule's thresholds for equal big-model shares (`tasks --shares`), from teacher forcing on the big
model's own answers (no pass or fail looked at), kept beside the answers' cache."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Sequence

from ..routing.rules import RULE_TABLE, Rule
from .tasks import PromptStyle, Task, TasksError
from .tasks_cache import AnswerCache, Setup, cache_key
from .tasks_results import ConfigResult

SHARES_VERSION = 2  # part of the cached thresholds' key: bump when how they are chosen changes


def thresholds_for_shares(engine: Callable[[], Any], tasks: Sequence[Task], style: PromptStyle, target: ConfigResult,
                          rules: Sequence[str], shares: Sequence[float]) -> dict[str, list[float]]:
    """Each rule's thresholds sending about these shares to the big model (`rule_curves` over teacher forcing)."""
    from ..routing.curves import rule_curves

    positions = []
    for task, answer in zip(tasks, target.answers):
        prompt, framing = style.request(task)
        written = answer.answer[len(framing["answer_prefix"]):]
        llm = engine().pair.target.llm
        tokens = llm.tokenize(written.encode("utf-8"), add_bos=False, special=False) if written else []
        if tokens:
            positions += engine().teacher_force(prompt, framing["chat"], tokens, framing["system"],
                                                framing["answer_prefix"])
    curves = rule_curves(positions)
    missing = [rule for rule in rules if rule not in curves]
    if missing:
        raise TasksError(f"no teacher-forced curve for the {missing[0]} rule (the learned rule needs a router)")
    return {rule: sorted({readable_threshold(RULE_TABLE[rule], curves[rule].threshold_for_share(share),
                                             [RULE_TABLE[rule].score(p.reading) for p in positions])
                          for share in shares})
            for rule in rules}


def readable_threshold(rule: Rule, threshold: float, scores: Sequence[float]) -> float:
    """The threshold with the fewest significant digits (three at least) that escalates exactly the same positions."""
    sent = [rule.escalates(s, threshold) for s in scores]
    for digits in range(3, 13):
        rounded = float(f"{threshold:.{digits}g}")
        if [rule.escalates(s, rounded) for s in scores] == sent:
            return rounded
    return threshold


def share_thresholds(engine: Callable[[], Any], tasks: Sequence[Task], style: PromptStyle, target: ConfigResult,
                     setup: Setup, cache: AnswerCache, rules: Sequence[str], shares: Sequence[float],
                     log: Callable[[str], None]) -> list[str]:
    """`thresholds_for_shares` as --thresholds items ("margin:0.1"), cached beside the target alone's answers."""
    key = hashlib.sha256(json.dumps([SHARES_VERSION, cache_key(setup, target.configuration, style), setup.router,
                                     [t.task_id for t in tasks], list(rules), list(shares)]).encode()).hexdigest()[:24]
    path = cache.root / f"shares-{key}.json" if cache.root is not None else None
    if path is not None and path.is_file():
        found = json.loads(path.read_text())
    else:
        log("[choosing each rule's thresholds for the asked shares: the small model reads the big model's answers]")
        found = thresholds_for_shares(engine, tasks, style, target, rules, shares)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(found))
    log("[thresholds for shares " + ", ".join(f"{s:g}" for s in shares) + ": "
        + "; ".join(f"{rule} {', '.join(f'{t:.4g}' for t in ts)}" for rule, ts in found.items()) + "]")
    return [f"{rule}:{','.join(repr(t) for t in ts)}" for rule, ts in found.items()]
