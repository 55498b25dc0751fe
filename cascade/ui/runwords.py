"""A run file's tables as (label, value) rows of plain text: the settings its policy read, the measured
numbers, and when, with what models, on what machine; `runfile` escapes and lays them out."""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..engine.config import GenerationConfig
from ..engine.events import Summary
from ..engine.policies import POLICY_TABLE
from ..routing.rules import RULE_TABLE
from . import rulewords
from .style import fmt_threshold


def settings_rows(config: GenerationConfig) -> list[tuple[str, str]]:
    """The settings of a run in words: the ones its policy reads, then length and sampling."""
    policy = POLICY_TABLE.get(config.policy)
    rows = [("Way of writing (policy)", rulewords.policy_label(config.policy))]
    reads = policy.settings if policy else ()
    if "threshold" in reads:
        rule = RULE_TABLE.get(config.rule)
        if rule is not None:
            rows.append(("How the small model judged its own token", f"{rulewords.label(rule)}: {rule.description}"))
        if config.budget is not None and policy.uses_rule:
            rows.append(("How much the big model writes", f"{rulewords.share(config.budget)} of the tokens, asked: "
                                                          f"the threshold moved as the answer was written to "
                                                          f"keep that share (the summary says which it meant)"))
        else:
            rule = rule or RULE_TABLE["perplexity"]
            rows.append(("Threshold", f"{fmt_threshold(config.threshold)}: the big model writes a token when "
                                      f"{rulewords.WORDS[rule.name].number} of it is "
                                      f"{'below' if rule.below else 'above'} this"))
    if "k" in reads:
        rows.append(("k", f"{config.k} tokens proposed at most per check by the big model" if policy.looks_up
                     else f"{config.k} tokens drafted by the small model per check by the big model"))
    if "lookup_ngram" in reads:
        rows.append(("Longest n-gram looked up", f"{config.lookup_ngram}: the text's last tokens, this many at "
                                                 f"most, are looked for earlier in the text"))
    if "rollback_threshold" in reads:
        rows.append(("Rollback threshold", f"{fmt_threshold(config.rollback_threshold)}: the big model rolls "
                                           f"back a small model's token it finds more unlikely than this"))
    if "bild_window" in reads:
        rows.append(("Most unchecked tokens", str(config.bild_window)))
    rows.append(("Prompt used as", "a chat message (the model's chat template)" if config.chat
                 else "raw text, which the models continue"))
    if config.system:
        rows.append(("System message", config.system))
    if config.answer_prefix:
        rows.append(("The answer started with", f"{config.answer_prefix!r}: given, read by both models, written "
                                                f"by neither"))
    rows.append(("Most tokens", str(config.max_tokens)))
    if config.temperature == 0:
        rows.append(("Temperature", "0: always the likeliest token (the run is reproducible)"))
    else:
        rows.append(("Temperature", f"{config.temperature:g}"))
        rows.append(("Seed", str(config.seed)))
    if config.top_p < 1:
        rows.append(("Top-p", f"{config.top_p:g}"))
    if config.top_k:
        rows.append(("Top-k", str(config.top_k)))
    if config.stop:
        rows.append(("Stop strings", ", ".join(repr(s) for s in config.stop)))
    return rows


def about_rows(models: Mapping[str, str], machine: Mapping[str, Any] | None, created: str) -> list[tuple[str, str]]:
    rows = [("Date", created),
            ("Small model (draft)", str(models.get("draft", "unknown"))),
            ("Big model (target)", str(models.get("target", "unknown")))]
    if machine:
        parts = [str(machine.get("cpu") or "unknown processor")]
        if machine.get("cores"):
            parts.append(f"{machine['cores']} cores")
        if machine.get("threads"):
            parts.append(f"{machine['threads']} threads per model")
        if machine.get("device") and not str(machine["device"]).startswith("CPU"):
            parts.append(str(machine["device"]))
        rows.append(("Machine", ", ".join(parts)))
    return rows


def numbers_rows(summary: Summary) -> list[tuple[str, str]]:
    """The measured numbers of a finished run."""
    speed = lambda v: "–" if v is None else f"{v:.1f} tokens/s"  # noqa: E731
    c, timings, quality = summary.counts, summary.timings, summary.quality
    rows = [("Tokens written", str(c.n_tokens)),
            ("… by the big model (target)", f"{c.n_target_tokens} ({c.target_share:.0%})"),
            ("… by the small model (draft)", str(c.n_draft_tokens)),
            *([("… copied from the text (prompt lookup)", str(c.n_lookup_tokens))] if c.n_lookup_proposed else []),
            ("Speed (reading the prompt included)", speed(summary.tokens_per_s)),
            ("Writing speed (after the first token)", speed(summary.writing_tokens_per_s)),
            ("Time", f"{timings.wall_s:.2f} s (loading the models not included)")]
    if timings.first_token_s is not None:
        rows.append(("First token after", f"{timings.first_token_s:.2f} s"))
    rows.append(("Prompt tokens", str(summary.prompt_tokens)))
    if c.n_drafted:
        rows.append(("Small model's proposals kept", f"{c.n_draft_tokens} of {c.n_drafted}"))
    if c.n_lookup_proposed:
        rows.append(("Prompt lookup's proposals kept", f"{c.n_lookup_tokens} of {c.n_lookup_proposed}"))
    for name, stats in (("small", summary.work.draft), ("big", summary.work.target)):
        rows.append((f"Time inside the {name} model", f"{stats.seconds:.2f} s in {stats.calls} calls, "
                                                     f"{stats.tokens_evaluated} tokens read"))
    if c.modes:
        rows.append(("Rounds, by way of writing", ", ".join(f"{k}: {v}" for k, v in c.modes.items())))
    if summary.stop_reason != "cancelled" and quality is not None:
        agreement, ppl = quality.target_agreement, quality.text_ppl_by_target
        if math.isfinite(agreement):
            rows.append(("Tokens the big model would have written itself", f"{agreement:.0%}"))
        if math.isfinite(ppl):
            rows.append(("The big model's perplexity of this text", f"{ppl:.2f}" if ppl < 100 else f"{ppl:,.0f}"))
    return rows
