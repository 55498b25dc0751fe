"""Pass rates in words, as a table and as two charts (`python -m cascade tasks`): pass@1 against the big
model's share of the tokens, and against the speed relative to the big model alone."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..ui.style import RULE_COLOURS

# The big and the small model alone: (colour, symbol, name in the legend).
ENDPOINTS = {"target": ("#000", "star", "the big model alone"), "draft": ("#555", "square", "the small model alone")}
# The other policies' colours, apart from the rules' (cascade's runs are coloured by their rule).
POLICY_COLOURS = {"bild": "#d62728", "speculative": "#17becf", "lookup": "#8c564b", "lookup+draft": "#e377c2",
                  "auto": "#7f7f7f", "seed": "#bcbd22"}
FAILURE_WORDS = {"wrong_answer": "wrong answer", "exception": "exception", "timeout": "timeout",
                 "no_code": "no code"}


def _num(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def flips(r: Mapping[str, Any]) -> str:
    """Against the target alone: "+2 −5 (p 0.45)", problems gained and lost, McNemar's p; "—" without a pairing."""
    paired = r.get("paired")
    if not paired:
        return "—"
    return f"+{len(paired['gained'])} −{len(paired['lost'])} (p {paired['mcnemar_p']:.2g})"


def same_text(r: Mapping[str, Any]) -> str:
    """How many answers are the target alone's word for word ("160/164"); "—" without a comparison."""
    paired = r.get("paired")
    if not paired or "same_text" not in paired:
        return "—"
    return f"{paired['same_text']}/{paired['same_text'] + len(paired['differing'])}"


def spread(r: Mapping[str, Any]) -> str:
    """The big model's share of each answer, 10th to 90th percentile ("5–18%"); "—" for all, none or unknown."""
    p = r.get("share_spread")
    if not p or r["policy"] in ("target", "draft"):
        return "—"
    return f"{100 * p[0]:.0f}–{100 * p[2]:.0f}%"


def markdown(results: Sequence[Mapping[str, Any]]) -> str:
    """One row per configuration: pass@1, flips against the target alone, same texts, share, speed, failures."""
    lines = ["| configuration | pass@1 | passed | vs target alone: gained −lost (McNemar p) | same text as target | "
             "big-model share | share per answer (10th–90th pct) | tokens/s | × target alone | "
             "big model's ppl of the answers | mean tokens | " + " | ".join(FAILURE_WORDS.values()) + " |",
             "|" + "---|" * (11 + len(FAILURE_WORDS))]
    for r in results:
        lines.append(f"| {r['label']} | {r['pass_at_1']:.1%} | {r['passed']}/{r['n_tasks']} | {flips(r)} | "
                     f"{same_text(r)} | {r['target_share']:.1%} | {spread(r)} | "
                     f"{r['tokens_per_s']:.2f} | {_num(r['vs_target'], '.2f')} | "
                     f"{_num(r['text_ppl_by_target'], '.3f')} | {r['mean_tokens']:.0f} | "
                     + " | ".join(str(r["failures"][k]) for k in FAILURE_WORDS) + " |")
    return "\n".join(lines)


def head_to_head(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rules against each other at the same budget, policy and grain: problems only one solved, McNemar's p."""
    from .tasks_results import flips, mcnemar_exact

    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for r in results:
        if r.get("budget") is not None and r["rule"] is not None:
            groups[(r["policy"], r["budget"], (r.get("settings") or {}).get("span"))].append(r)
    pairs = []
    for (_policy, budget, _span), rows in groups.items():
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                only_a, only_b, n = flips(_solved(b), _solved(a).items())
                pairs.append({"budget": budget, "a": a["label"], "b": b["label"], "n": n, "only_a": sorted(only_a),
                              "only_b": sorted(only_b), "mcnemar_p": mcnemar_exact(len(only_a), len(only_b))})
    return pairs


def _solved(row: Mapping[str, Any]) -> dict[str, bool]:
    """A report row's answers: task id: solved."""
    return {x["task_id"]: x["kind"] == "passed" for x in row["answers"]}


def head_to_head_markdown(results: Sequence[Mapping[str, Any]]) -> str:
    """`head_to_head` as a table ("" when no two rules shared a budget)."""
    pairs = head_to_head(results)
    if not pairs:
        return ""
    lines = ["| same budget | A | B | solved by A only | solved by B only | McNemar p |", "|---|---|---|---|---|---|"]
    lines += [f"| {p['budget']:.0%} | {p['a']} | {p['b']} | {len(p['only_a'])} | {len(p['only_b'])} | "
              f"{p['mcnemar_p']:.2g} |" for p in pairs]
    return "\n".join(lines)


def _series(results: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The charts' curves: one per policy and rule, a rule's budgets apart from its thresholds."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in results:
        name = r["policy"] if r["rule"] is None else f"{r['policy']}, {r['rule']}"
        if r.get("budget") is not None:
            name += ", budgets"
        groups[name].append(r)
    return groups


def _colour(r: Mapping[str, Any]) -> str | None:
    if r["policy"] == "cascade" and r["rule"] is not None:
        return RULE_COLOURS.get(r["rule"])
    return POLICY_COLOURS.get(r["policy"], "#333")


def figure(results: Sequence[Mapping[str, Any]], title: str) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("pass@1 against the big model's share of the tokens",
                                        "pass@1 against speed (× the big model alone, same run)"))
    for name, group in _series(results).items():
        group = sorted(group, key=lambda r: r["target_share"])
        first = group[0]
        colour, symbol, label = ENDPOINTS.get(first["policy"], (_colour(first), "circle", name))
        marker = {"size": 14 if first["policy"] in ENDPOINTS else 9, "color": colour, "symbol": symbol}
        hover = [f"{r['label']}: {r['passed']}/{r['n_tasks']} passed, {r['target_share']:.1%} of tokens by the big "
                 f"model, {r['tokens_per_s']:.1f} tokens/s" + (f" ({r['vs_target']:.2f}×)" if r["vs_target"] else "")
                 + (f"; against the big model alone {flips(r)}, same text in {same_text(r)}" if r.get("paired") else "")
                 for r in group]
        mode = "markers" if len(group) == 1 else "lines+markers"
        for col, xs in ((1, [100 * r["target_share"] for r in group]),
                        (2, [r["vs_target"] for r in group])):
            fig.add_trace(go.Scatter(x=xs, y=[100 * r["pass_at_1"] for r in group], mode=mode, name=label,
                                     legendgroup=name, showlegend=col == 1, marker=marker,
                                     line={"color": marker["color"]}, text=hover, hoverinfo="text"),
                          row=1, col=col)
    fig.update_xaxes(title_text="tokens the big model wrote (%)", row=1, col=1)
    fig.update_xaxes(title_text="tokens/s over the big model alone's", row=1, col=2)
    fig.update_yaxes(title_text="problems solved, pass@1 (%)", row=1, col=1)
    fig.add_vline(x=1.0, line_dash="dot", line_color="#888", row=1, col=2)
    fig.update_layout(title=title, template="plotly_white", legend={"orientation": "h", "y": -0.25},
                      height=560)
    return fig


def chart_html(results: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    figure(results, title).write_html(path, include_plotlyjs=True, full_html=True)
