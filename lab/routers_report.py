"""The rules' picture in words, as a table and as a chart (`python -m lab routers`)."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from cascade.ui.style import RULE_COLOURS
from lab.routers import AGREEMENTS, RoutersResult


def _pct(x: float | None) -> str:
    return "never" if x is None else f"{x:.1%}"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "—" if x is None else format(x, fmt)


def markdown(result: RoutersResult) -> str:
    lines = [f"{result.prompts} prompts, {result.positions} teacher-forced positions "
             f"({result.max_tokens} tokens at most per prompt).", ""]
    head = "| rule | AUC | ROC AUC | " + " | ".join(f"share for {a:.0%} agreement" for a in AGREEMENTS) + " |"
    lines += [head, "|" + "---|" * (3 + len(AGREEMENTS))]
    for name, c in result.curves.items():
        lines.append(f"| {name} | {c.auc:.4f} | {_num(result.roc.get(name), '.3f')} | "
                     + " | ".join(_pct(c.share_at(a)) for a in AGREEMENTS) + " |")
    if result.real:
        lines += ["", "Real cascade runs at each rule's threshold nearest the asked share:", "",
                  "| rule | threshold | share (teacher-forced) | share (real) | agreement (teacher-forced) | "
                  "agreement (real) | gap, points | big model's ppl of the text | tokens/s | × target alone | "
                  "rule's time | router's time |",
                  "|" + "---|" * 12]
        for name, r in result.real.items():
            lines.append(f"| {name} | {r.threshold:.4g} | {r.forced_share:.1%} | {r.share:.1%} | "
                         f"{r.forced_agreement:.1%} | {r.agreement:.1%} | {100 * (r.forced_agreement - r.agreement):+.1f} | "
                         f"{_num(r.text_ppl_by_target, '.3f')} | {r.tokens_per_s:.2f} | {r.speedup:.2f} | "
                         f"{r.routing_share:.2%} | {r.router_share:.2%} |")
    if result.baselines:
        lines += ["", "| alone | tokens/s | big model's ppl of the text | agreement |", "|---|---|---|---|"]
        for b in result.baselines.values():
            lines.append(f"| {b.policy} | {b.tokens_per_s:.2f} | {_num(b.text_ppl_by_target, '.3f')} | "
                         f"{_pct(b.agreement) if b.agreement is not None else '—'} |")
    if result.break_even_share is not None:
        lines += ["", f"Break-even: cascade beats the target alone on this machine below "
                      f"{result.break_even_share:.1%} of tokens written by the target (measured per-call costs)."]
    return "\n".join(lines)


def figure(result: RoutersResult) -> go.Figure:
    fig = go.Figure()
    for name, c in result.curves.items():
        fig.add_trace(go.Scatter(x=[100 * s for s in c.shares], y=[100 * a for a in c.agreements], mode="lines",
                                 name=f"{name} (teacher-forced, AUC {c.auc:.3f})",
                                 line={"color": RULE_COLOURS.get(name), "shape": "hv"}))
    for name, r in result.real.items():
        fig.add_trace(go.Scatter(x=[100 * r.share], y=[100 * r.agreement], mode="markers",
                                 name=f"{name}, real cascade at {r.threshold:.3g}",
                                 marker={"color": RULE_COLOURS.get(name), "size": 11, "symbol": "diamond"}))
    if result.break_even_share is not None:
        fig.add_vline(x=100 * result.break_even_share, line_dash="dash", line_color="#555",
                      annotation_text="sharing pays left of here on this machine")
    fig.update_layout(title="Which rule decides best? Agreement with the big model against its share of tokens",
                      xaxis_title="tokens the big model writes (%)", yaxis_title="tokens equal to the big model's (%)",
                      template="plotly_white", legend={"orientation": "h", "y": -0.2})
    return fig


def chart_html(result: RoutersResult, path: Path) -> None:
    figure(result).write_html(path, include_plotlyjs=True, full_html=True)

