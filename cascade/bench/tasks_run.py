"""Running every configuration over the tasks: pass@1 beside the big model's share and the speed.

`python -m cascade tasks` asks each configuration (a policy, with its rule, threshold or k) to solve every
task (HumanEval's 164 problems by default), checks each answer by running its tests in a sandboxed process
(`sandbox.py`: THIS RUNS MODEL-WRITTEN CODE), and reports pass@1 (greedy) beside the big model's share of
the tokens and the speed against the big model alone, measured in the same run.

Tasks run in order, and within a task every configuration in turn, so each configuration's speed is
measured on the same machine state as the target's it is divided by. Every answer is cached under its
(model files, configuration, prompt style, task) in `~/.cache/cascade/tasks`: an interrupted run resumes
where it stopped, and a sweep over thresholds reuses the target's and the draft's answers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..engine.config import GenerationConfig, ModelConfig
from ..engine.events import Summary
from ..engine.policies import POLICY_TABLE
from ..routing.rules import RULE_TABLE, Rule
from . import sandbox
from .tasks import CHECK_VERSION, PromptStyle, Task, TasksError, check_answer

CACHE_VERSION = 1  # bump when a change to the engine or the prompts makes cached answers stale


# ---- configurations -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Configuration:
    """One way of writing the answers: a policy with the settings it reads (its rule, threshold, k)."""

    config: GenerationConfig

    @property
    def policy(self) -> str:
        return self.config.policy

    @property
    def reads(self) -> tuple[str, ...]:
        return POLICY_TABLE[self.config.policy].settings

    @property
    def rule(self) -> str | None:
        return self.config.rule if "threshold" in self.reads else None

    @property
    def threshold(self) -> float | None:
        return self.config.threshold if "threshold" in self.reads else None

    @property
    def k(self) -> int | None:
        return self.config.k if "k" in self.reads else None

    @property
    def label(self) -> str:
        parts = [self.policy]
        if self.rule is not None:
            parts.append(f"{self.rule} {self.threshold:g}")
        if self.k is not None:
            parts.append(f"k={self.k}")
        return " ".join(parts)

    def settings(self) -> dict[str, Any]:
        """The settings that decide this configuration's answers (the others are left out, so that, say,
        the target alone is one configuration whatever threshold was asked)."""
        names = ["policy", "max_tokens", "temperature", "top_p", "top_k", "seed", *self.reads]
        if "threshold" in self.reads:
            names.append("rule")
        return {name: getattr(self.config, name) for name in sorted(set(names))}


def parse_thresholds(items: Sequence[str], rules: Sequence[str]) -> dict[str, list[float]]:
    """--thresholds: "1.5" for every rule given, or "margin:0.04,0.1" for one; each checked in its rule's range."""
    by_rule: dict[str, list[float]] = {rule: [] for rule in rules}
    for item in items:
        rule, sep, values = item.partition(":")
        targets = [rule] if sep else list(rules)
        if sep and rule not in RULE_TABLE:
            raise TasksError(f"--thresholds {item!r}: unknown rule {rule!r}; choose one of {', '.join(RULE_TABLE)}")
        if sep and rule not in by_rule:
            raise TasksError(f"--thresholds {item!r}: the rule {rule!r} is not among --rules")
        for text in (values if sep else item).split(","):
            try:
                value = float(text)
            except ValueError:
                raise TasksError(f"--thresholds {item!r}: {text!r} is not a number") from None
            for target in targets:
                try:
                    RULE_TABLE[target].check(value)
                except ValueError as e:
                    raise TasksError(f"--thresholds {item!r}: {e}") from None
                by_rule[target].append(value)
    return by_rule


def configurations(policies: Sequence[str], rules: Sequence[str] = ("perplexity",), thresholds: Sequence[str] = (),
                   ks: Sequence[int] = (), max_tokens: int = 512) -> list[Configuration]:
    """Every configuration asked for: each policy with each rule and threshold it reads, or each k; a
    policy given none runs at its defaults. The target alone comes first (every speed is divided by its)."""
    for policy in policies:
        if policy not in POLICY_TABLE:
            raise TasksError(f"unknown policy {policy!r}; choose among {', '.join(POLICY_TABLE)}")
    for rule in rules:
        if rule not in RULE_TABLE:
            raise TasksError(f"unknown rule {rule!r}; choose among {', '.join(RULE_TABLE)}")
    by_rule = parse_thresholds(thresholds, rules)
    out: list[Configuration] = []
    base = GenerationConfig(max_tokens=max_tokens)
    for policy in ["target"] + [p for p in policies if p != "target"]:
        reads = POLICY_TABLE[policy].settings
        variants: list[dict[str, Any]] = [{}]
        if "threshold" in reads:
            variants = [{"rule": r, "threshold": t} for r in rules for t in (by_rule[r] or [None])]
        if "k" in reads and ks:
            variants = [{**v, "k": k} for v in variants for k in ks]
        for v in variants:
            try:
                config = base.replace(policy=policy, **v).validate()  # threshold None: the rule's default
            except ValueError as e:
                raise TasksError(f"{policy}: {e}") from None
            configuration = Configuration(config)
            if all(c.settings() != configuration.settings() for c in out):
                out.append(configuration)
    return out


# ---- the cache ------------------------------------------------------------------------------------

def cache_root() -> Path:
    return Path(os.environ.get("CASCADE_CACHE", Path.home() / ".cache" / "cascade")) / "tasks"


def file_identity(path: Path) -> str:
    """A model file by its name, size and the hash of its first and last MiB: renaming a copy keeps
    nothing, and a file changed in place is not mistaken for the old one."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read(1 << 20))
    return f"{path.name}:{size}:{digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class Setup:
    """What, besides a configuration, decides its answers and their timing: the models and how they run."""

    draft: str  # file identities
    target: str
    router: str = ""  # the learned rule's router (its file's hash), where a configuration uses it
    n_threads: int = 0
    n_ctx: int = 0
    n_gpu_layers: int = 0


def cache_key(setup: Setup, configuration: Configuration, style: PromptStyle) -> str:
    uses_draft = configuration.policy != "target"
    raw = {"version": CACHE_VERSION, "style": style.to_dict(), "settings": configuration.settings(),
           "target": setup.target, "draft": setup.draft if uses_draft else "",
           "router": setup.router if configuration.rule == "learned" else "",
           "threads": setup.n_threads, "n_ctx": setup.n_ctx, "gpu_layers": setup.n_gpu_layers}
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:24]


class AnswerCache:
    """Answers on disk, one JSON-lines file per (setup, configuration, style): a run resumes from them."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._loaded: dict[str, dict[str, dict]] = {}

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.jsonl"

    def get(self, key: str, task: Task) -> dict | None:
        if self.root is None:
            return None
        if key not in self._loaded:
            records: dict[str, dict] = {}
            try:
                for line in self._path(key).read_text(encoding="utf-8").splitlines():
                    try:
                        record = json.loads(line)
                        records[record["task_id"]] = record
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut short by an interruption
            except OSError:
                pass
            self._loaded[key] = records
        record = self._loaded[key].get(task.task_id)
        return record if record is not None and record.get("task_digest") == task.digest else None

    def put(self, key: str, record: dict) -> None:
        self._loaded.setdefault(key, {})[record["task_id"]] = record
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self._path(key), "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


# ---- running --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """One configuration's answer to one task, and how its check went."""

    task_id: str
    answer: str  # the whole answer: the given prefix, then what the models wrote
    n_tokens: int
    n_target_tokens: int
    wall_s: float
    stop_reason: str
    text_ppl_by_target: float | None
    target_agreement: float | None
    check: sandbox.Check
    cached: bool = False
    measured_at: str = ""

    @classmethod
    def from_summary(cls, task: Task, summary: Summary, check: sandbox.Check) -> "Answer":
        return cls(task.task_id, summary.answer, summary.n_tokens, summary.n_target_tokens, summary.wall_s,
                   summary.stop_reason, summary.text_ppl_by_target, summary.target_agreement, check,
                   measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"))

    def record(self, task: Task) -> dict:
        d = dataclasses.asdict(self)
        d.pop("cached")
        ppl = d["text_ppl_by_target"]
        d.update(task_digest=task.digest, check_version=CHECK_VERSION,
                 text_ppl_by_target=ppl if ppl is None or math.isfinite(ppl) else None)
        return d

    @classmethod
    def from_record(cls, record: dict) -> "Answer":
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in record.items() if k in fields}
        values["check"] = sandbox.Check(**record["check"])
        return cls(**{**values, "cached": True})


@dataclass
class ConfigResult:
    """One configuration over the tasks: pass@1, the big model's share, speed, and failures by kind."""

    configuration: Configuration
    answers: list[Answer] = field(default_factory=list)
    vs_target: float | None = None  # tokens/s over the target alone's on the same tasks, this run

    @property
    def n_tasks(self) -> int:
        return len(self.answers)

    @property
    def passed(self) -> int:
        return sum(a.check.passed for a in self.answers)

    @property
    def pass_at_1(self) -> float:
        return self.passed / self.n_tasks if self.answers else 0.0

    @property
    def n_tokens(self) -> int:
        return sum(a.n_tokens for a in self.answers)

    @property
    def target_share(self) -> float:
        return sum(a.n_target_tokens for a in self.answers) / self.n_tokens if self.n_tokens else 0.0

    @property
    def wall_s(self) -> float:
        return sum(a.wall_s for a in self.answers)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mean_tokens(self) -> float:
        return self.n_tokens / self.n_tasks if self.answers else 0.0

    @property
    def text_ppl_by_target(self) -> float | None:
        """The big model's perplexity of all the answers' tokens together (token-weighted)."""
        scored = [a for a in self.answers if a.n_tokens and a.text_ppl_by_target is not None]
        if not scored or len(scored) < sum(1 for a in self.answers if a.n_tokens):
            return None
        nll = sum(a.n_tokens * math.log(a.text_ppl_by_target) for a in scored)
        return math.exp(nll / sum(a.n_tokens for a in scored))

    @property
    def target_agreement(self) -> float | None:
        scored = [a for a in self.answers if a.n_tokens and a.target_agreement is not None]
        n = sum(a.n_tokens for a in scored)
        return sum(a.n_tokens * a.target_agreement for a in scored) / n if n else None

    @property
    def failures(self) -> dict[str, int]:
        return {kind: sum(a.check.kind == kind for a in self.answers) for kind in sandbox.FAILURE_KINDS}

    def to_dict(self) -> dict[str, Any]:
        c = self.configuration
        return {"label": c.label, "policy": c.policy, "rule": c.rule, "threshold": c.threshold, "k": c.k,
                "n_tasks": self.n_tasks, "passed": self.passed, "pass_at_1": self.pass_at_1,
                "target_share": self.target_share, "tokens_per_s": self.tokens_per_s, "vs_target": self.vs_target,
                "text_ppl_by_target": self.text_ppl_by_target, "target_agreement": self.target_agreement,
                "mean_tokens": self.mean_tokens, "n_tokens": self.n_tokens, "wall_s": self.wall_s,
                "failures": self.failures, "cached": sum(a.cached for a in self.answers),
                "settings": c.settings(),
                "answers": [{"task_id": a.task_id, "kind": a.check.kind, "detail": a.check.detail[:200],
                             "n_tokens": a.n_tokens, "n_target_tokens": a.n_target_tokens,
                             "wall_s": round(a.wall_s, 4), "stop_reason": a.stop_reason,
                             "measured_at": a.measured_at} for a in self.answers]}


def with_speed_ratios(results: list[ConfigResult]) -> list[ConfigResult]:
    """Each configuration's tokens/s over the target alone's on the same tasks."""
    target = next((r for r in results if r.configuration.policy == "target"), None)
    if target is None:
        return results
    by_task = {a.task_id: a for a in target.answers}
    for r in results:
        common = [by_task[a.task_id] for a in r.answers if a.task_id in by_task]
        tokens, wall = sum(a.n_tokens for a in common), sum(a.wall_s for a in common)
        if common and wall > 0 and r.tokens_per_s > 0:
            r.vs_target = r.tokens_per_s / (tokens / wall)
    return results


Progress = Callable[[str], None]


def run_tasks(tasks: Sequence[Task], configurations: Sequence[Configuration], style: PromptStyle,
              engine: Callable[[], Any], setup: Setup, cache: AnswerCache,
              timeout_s: float = sandbox.DEFAULT_TIMEOUT_S, memory_mb: int = sandbox.DEFAULT_MEMORY_MB,
              bar: Any = None) -> list[ConfigResult]:
    """Every configuration's answer to every task, from the cache where it has one, else written now by
    `engine()` (asked for only then: a warm cache loads no model) and checked in the sandbox.

    `bar`: a tqdm-like progress bar (update, set_postfix_str), or None."""
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
                summary = _generate(engine(), prompt, result.configuration.config.replace(**framing))
                answer = Answer.from_summary(task, summary, check_answer(task, style, summary.answer, timeout_s,
                                                                         memory_mb))
                cache.put(key, answer.record(task))
            result.answers.append(answer)
            if bar is not None:
                bar.update(1)
    return with_speed_ratios(results)


def _generate(engine: Any, prompt: str, config: GenerationConfig) -> Summary:
    summary = None
    for event in engine.generate(prompt, config):
        if isinstance(event, Summary):
            summary = event
    if summary is None:
        raise RuntimeError("the generation ended without a summary")
    return summary


def setup_of(models: ModelConfig, router: Any) -> Setup:
    """The models' identities (resolving, and if need be downloading, their files) and how they run."""
    from ..engine.models import resolve_model

    router_id = "" if router is None else hashlib.sha256(
        json.dumps(router.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
    return Setup(draft=file_identity(resolve_model(models.draft, "draft")),
                 target=file_identity(resolve_model(models.target, "target")), router=router_id,
                 n_threads=models.n_threads, n_ctx=models.n_ctx, n_gpu_layers=models.n_gpu_layers)


class LazyEngine:
    """The engine, loaded the first time an answer is not in the cache (a warm cache loads no model);
    calibrated at load when a configuration is `auto`, as the command line's generate does."""

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


def thresholds_for_shares(engine: Callable[[], Any], tasks: Sequence[Task], style: PromptStyle,
                          target: "ConfigResult", rules: Sequence[str], shares: Sequence[float]) -> dict[str, list[float]]:
    """For each rule, the thresholds that send about these shares of the tokens to the big model on these
    tasks, from teacher forcing: the small model reads the big model's own answers (no pass or fail is
    looked at), and each rule's curve gives the threshold nearest each share (`teacher.rule_curves`)."""
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


SHARES_VERSION = 2  # 2: thresholds rounded only as far as they send the same positions


def readable_threshold(rule: Rule, threshold: float, scores: Sequence[float]) -> float:
    """The threshold with the fewest significant digits (three at least) that escalates exactly the
    positions it does. On code most of the draft's perplexities lie within a thousandth of 1, so three
    digits are not always enough: 1.00043 rounded to 1 would send nearly every token to the big model."""
    sent = [rule.escalates(s, threshold) for s in scores]
    for digits in range(3, 13):
        rounded = float(f"{threshold:.{digits}g}")
        if [rule.escalates(s, rounded) for s in scores] == sent:
            return rounded
    return threshold


def _share_thresholds(engine: Callable[[], Any], tasks: Sequence[Task], style: PromptStyle, setup: Setup,
                      cache: AnswerCache, rules: Sequence[str], shares: Sequence[float], max_tokens: int,
                      log: Callable[[str], None]) -> list[str]:
    """`thresholds_for_shares` as --thresholds items ("margin:0.1"), kept in the cache beside the answers."""
    (target_config,) = configurations(["target"], max_tokens=max_tokens)
    (target,) = run_tasks(tasks, [target_config], style, engine, setup, cache)
    key = hashlib.sha256(json.dumps([SHARES_VERSION, cache_key(setup, target_config, style), setup.router,
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


def run_and_report(models: ModelConfig, tasks: Sequence[Task], configs: Sequence[Configuration],
                   style: PromptStyle, *, source: str, cache: bool = True,
                   timeout_s: float = sandbox.DEFAULT_TIMEOUT_S, memory_mb: int = sandbox.DEFAULT_MEMORY_MB,
                   command: Sequence[str] = (), log: Callable[[str], None] = lambda _m: None,
                   shares: Sequence[float] = (), share_policies: Sequence[str] = ("cascade",),
                   share_rules: Sequence[str] = ("perplexity",)) -> dict[str, Any]:
    """Run (or read from the cache) every configuration on the tasks, with a progress bar; the results as
    the JSON `tasks --json` writes: `results`, one object per configuration, and what they were measured on.
    `shares`: also each of `share_policies` with each of `share_rules` at the thresholds sending about
    these shares of tokens to the big model (`thresholds_for_shares`)."""
    from tqdm import tqdm

    from ..routing.router import load_router
    from ..serving.machine import cpu_name

    uses_learned = any(c.rule == "learned" for c in configs) or (shares and "learned" in share_rules)
    router = load_router(models.router) if uses_learned else None
    if uses_learned and router is None:
        raise TasksError("the learned rule needs a router, and none is loaded (--router)")
    setup = setup_of(models, router)
    answers = AnswerCache(cache_root() if cache else None)
    engine = LazyEngine(models, router, calibrate=any(POLICY_TABLE[c.policy].steered for c in configs), log=log)
    max_tokens = configs[0].config.max_tokens if configs else 512
    if shares:
        chosen = _share_thresholds(engine, tasks, style, setup, answers, share_rules, shares, max_tokens, log)
        extra = configurations(share_policies, share_rules, chosen, max_tokens=max_tokens)
        configs = list(configs) + [c for c in extra if all(c.settings() != d.settings() for d in configs)]
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
                    "device": models.device},
        "checking": isolation,
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": time.perf_counter() - started,
        "loaded_models": engine.engine is not None,
        "command": list(command),
    }
