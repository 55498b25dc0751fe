"""The configurations the tasks are run with (a policy with the settings it reads, from `tasks`' flags), each
known by the settings that decide its answers only, so the target alone is written (and cached) once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..engine.config import GenerationConfig
from ..engine.policies import POLICY_TABLE
from ..routing.rules import RULE_TABLE
from .tasks import TasksError


@dataclass(frozen=True)
class Configuration:
    """One way of writing the answers: a policy with the settings it reads (rule, threshold or budget, k, span)."""

    config: GenerationConfig

    @property
    def policy(self) -> str:
        return self.config.policy

    @property
    def reads(self) -> tuple[str, ...]:
        return POLICY_TABLE[self.config.policy].text_settings

    @property
    def rule(self) -> str | None:
        return self.config.rule if "threshold" in self.reads else None

    @property
    def budget(self) -> float | None:
        return self.config.budget if "threshold" in self.reads else None

    @property
    def threshold(self) -> float | None:
        """The threshold given; None under a budget, which chooses its own as it writes."""
        return self.config.threshold if "threshold" in self.reads and self.budget is None else None

    @property
    def k(self) -> int | None:
        return self.config.k if "k" in self.reads else None

    @property
    def span(self) -> str | None:
        """The escalation grain, for a policy with a rule that asks for more than the seed's one token."""
        return self.config.span if "threshold" in self.reads and self.config.span != "token" else None

    @property
    def label(self) -> str:
        parts = [self.policy]
        if self.budget is not None:
            parts.append(f"{self.rule} budget {self.budget:g}")
        elif self.rule is not None:
            parts.append(f"{self.rule} {self.threshold:g}")
        if self.span is not None:
            parts.append(f"span={self.span}")
        if self.k is not None:
            parts.append(f"k={self.k}")
        return " ".join(parts)

    def settings(self) -> dict[str, Any]:
        """The settings that decide this configuration's answers, and no others (they key the cache)."""
        names = ["policy", "max_tokens", "temperature", "top_p", "top_k", "seed",
                 *(name for name in self.reads if name != "budget")]
        if "threshold" in self.reads:
            names.append("rule")
        if self.budget is not None:  # the threshold is not read; no budget adds no key, so cached keys hold
            names = [name for name in names if name != "threshold"] + ["budget"]
        if self.span is not None:  # the seed's one token adds no key either
            names.append("span")
        return {name: getattr(self.config, name) for name in sorted(set(names))}


def distinct(configs: Iterable[Configuration]) -> list[Configuration]:
    """Each configuration once, in order: two with the same settings write the same answers."""
    out: list[Configuration] = []
    for configuration in configs:
        if all(c.settings() != configuration.settings() for c in out):
            out.append(configuration)
    return out


def _per_rule(flag: str, items: Sequence[Any], rules: Sequence[str],
              check: Callable[[str, float], None]) -> dict[str, list[float]]:
    """A flag's values by rule: "1.5" for every rule given, or "margin:0.04,0.1" for one; each checked."""
    by_rule: dict[str, list[float]] = {rule: [] for rule in rules}
    for item in map(str, items):
        rule, sep, values = item.partition(":")
        targets = [rule] if sep else list(rules)
        if sep and rule not in RULE_TABLE:
            raise TasksError(f"{flag} {item!r}: unknown rule {rule!r}; choose one of {', '.join(RULE_TABLE)}")
        if sep and rule not in by_rule:
            raise TasksError(f"{flag} {item!r}: the rule {rule!r} is not among --rules")
        for text in (values if sep else item).split(","):
            try:
                value = float(text)
            except ValueError:
                raise TasksError(f"{flag} {item!r}: {text!r} is not a number") from None
            for target in targets:
                try:
                    check(target, value)
                except ValueError as e:
                    raise TasksError(f"{flag} {item!r}: {e}") from None
                by_rule[target].append(value)
    return by_rule


def parse_thresholds(items: Sequence[str], rules: Sequence[str]) -> dict[str, list[float]]:
    """--thresholds: "1.5" for every rule given, or "margin:0.04,0.1" for one; each checked in its rule's range."""
    return _per_rule("--thresholds", items, rules, lambda rule, value: RULE_TABLE[rule].check(value))


def _check_budget(_rule: str, budget: float) -> None:
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"a budget is a share of the tokens, from 0 to 1 (0.1: a tenth), not {budget:g}")


def configurations(policies: Sequence[str], rules: Sequence[str] = ("perplexity",), thresholds: Sequence[str] = (),
                   ks: Sequence[int] = (), max_tokens: int = 512, budgets: Sequence[float] = (),
                   spans: Sequence[str] = ("token",)) -> list[Configuration]:
    """Every configuration asked for (each policy at each setting it reads), the target alone first."""
    for policy in policies:
        if policy not in POLICY_TABLE:
            raise TasksError(f"unknown policy {policy!r}; choose among {', '.join(POLICY_TABLE)}")
    for rule in rules:
        if rule not in RULE_TABLE:
            raise TasksError(f"unknown rule {rule!r}; choose among {', '.join(RULE_TABLE)}")
    by_rule = parse_thresholds(thresholds, rules)
    budgets_by_rule = _per_rule("--budgets", budgets, rules, _check_budget)
    out: list[Configuration] = []
    base = GenerationConfig(max_tokens=max_tokens)
    for policy in ["target"] + [p for p in policies if p != "target"]:
        reads = POLICY_TABLE[policy].text_settings
        variants: list[dict[str, Any]] = [{}]
        if "threshold" in reads:
            # A rule given no threshold and no budget runs at its own threshold; given budgets only, at those.
            variants = [{"rule": r, "threshold": t} for r in rules
                        for t in by_rule[r] or ([] if budgets_by_rule[r] else [None])]
            variants += [{"rule": r, "threshold": None, "budget": b} for r in rules for b in budgets_by_rule[r]]
            variants = [{**v, "span": span} for v in variants for span in spans or ("token",)]
        if "k" in reads and ks:
            variants = [{**v, "k": k} for v in variants for k in ks]
        for v in variants:
            try:
                config = base.replace(policy=policy, **v).validate()  # threshold None: the rule's default
            except ValueError as e:
                raise TasksError(f"{policy}: {e}") from None
            out.append(Configuration(config))
    return distinct(out)
