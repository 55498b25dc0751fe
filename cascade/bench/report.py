"""Bench results as a Markdown table for the terminal and BENCHMARKS.md, and a Plotly chart."""

from __future__ import annotations

from pathlib import Path

from .run import BenchResult


def markdown_table(result: BenchResult) -> str:
    target_tps = result.target.total.tokens_per_s
    lines = ["| policy | tok/s | vs target | target share | draft kept | agreement | same text | big model's ppl of "
             "the text | overhead | vs bound | memory (RSS) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result.rows:
        d = r.to_dict(target_tps)
        acc = f"{d['acceptance']:.0%}" if d["acceptance"] is not None else "–"
        eff = f"{d['efficiency']:.2f}" if d["efficiency"] is not None else "–"
        ppl = f"{d['text_ppl_by_target']:.3f}" if d["text_ppl_by_target"] is not None else "–"
        lines.append(f"| {d['label']} | {d['tokens_per_s']:.2f} | {d['speedup']:.2f}× | {d['target_share']:.0%} | "
                     f"{acc} | {d['agreement']:.0%} | {d['same_text']}/{d['prompts']} | {ppl} | {d['overhead']:.1%} | "
                     f"{eff} | {d['rss_mb']:.0f} MB |")
    for r in (r for r in result.rows if r.config.policy == "auto"):
        modes = r.to_dict(target_tps)["modes"]
        lines.append(f"\n{r.label}: rounds by way of writing: " + ", ".join(f"{m} {n}" for m, n in modes.items()))
    if result.llama_cpp:
        lines += ["", "Writing speed after the first token (llama.cpp reports its \"decoded\" speed so):", "",
                  "| k | ours, speculative | llama.cpp speculative | ratio |", "|---|---|---|---|"]
        for peer in result.llama_cpp:
            row = result.row(f"speculative k={peer.k}")
            ours = row.writing_tokens_per_s if row else None
            if peer.error or ours is None:
                lines.append(f"| {peer.k} | {ours} | {peer.error or '?'} | – |")
            else:
                lines.append(f"| {peer.k} | {ours:.2f} | {peer.decode_tok_s:.2f} (accept {peer.accept:.0%}) | "
                             f"{ours / peer.decode_tok_s:.2f}× |")
        lines.append(f"| target alone | {result.target.writing_tokens_per_s:.2f} | | |")
    return "\n".join(lines)


def costs_table(result: BenchResult) -> str:
    c, b = result.costs, result.bounds
    variants = result.variant_costs
    lines = ["| tokens in one call | draft | target |" + "".join(f" draft · {name} |" for name in variants),
             "|---|---|---|" + "---|" * len(variants)]
    for n in c.target_batch_s:
        lines.append(f"| {n} | {c.draft_batch_s[n] * 1000:.1f} ms | {c.target_batch_s[n] * 1000:.1f} ms |"
                     + "".join(f" {v.draft_batch_s[n] * 1000:.1f} ms |" for v in variants.values()))
    lines.append("\nBest speed these costs allow, as a ratio to the target alone: cascade with a share s of "
                 "tokens escalated, evenly spread "
                 + ", ".join(f"s={s:.2f}: {v:.2f}×" for s, v in b.cascade_at_share.items())
                 + "; speculative if every draft were accepted "
                 + ", ".join(f"k={k}: {v:.2f}×" for k, v in b.speculative_best_case.items()) + ".")
    rows = ", ".join(f"{model} {v * 1000:.1f} ms" for model, v in c.extra_row_s.items())
    lines.append(f"\nEach logits row asked for beyond one a call (a check needs one per checked token) adds: {rows}.")
    lines.append("\n\"vs bound\": each row's measured speed over the best its own calls allow at these costs (the "
                 "time its runs' calls, by size and logits rows, would take at the costs above, over the time they "
                 "took).")
    return "\n".join(lines)


def headline(result: BenchResult, n_prompts: int, max_tokens: int) -> str:
    m = result.machine
    return (f"{m.draft} -> {m.target}; {m.device} on {m.cores} cores ({m.cpu}); "
            f"{n_prompts} prompts, {max_tokens} tokens each")


def chart_html(result: BenchResult, path: Path) -> None:
    import plotly.graph_objects as go

    target_tps = result.target.total.tokens_per_s
    rows = [r.to_dict(target_tps) for r in result.rows]
    fig = go.Figure()
    for family in ("cascade", "speculative", "bild", "target", "draft", "seed", "auto"):
        pts = [r for r in rows if r["policy"] == family]
        if pts:
            fig.add_trace(go.Scatter(x=[r["agreement"] for r in pts], y=[r["speedup"] for r in pts],
                                     mode="markers+text" if len(pts) < 2 else "lines+markers+text",
                                     text=[r["label"] for r in pts], textposition="top center", name=family))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="the target alone")
    fig.update_layout(title=f"Speed against agreement with the target ({result.machine.threads} threads, "
                            f"{result.machine.cpu})",
                      xaxis_title="share of tokens equal to the target's own greedy text",
                      yaxis_title="tokens/s relative to the target alone", template="plotly_white")
    fig.write_html(path, include_plotlyjs=True)  # readable offline
