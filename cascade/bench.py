"""`python -m cascade bench`: every policy on the same loaded models and prompts, side by side.

Speeds on a shared machine drift, so every figure is a ratio to the target alone measured in the
same run, and the target is run before and after the other policies on each prompt.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .config import GenerationConfig
from .costs import Costs, measure_costs
from .engine import Engine
from .events import Summary, TokenEvent
from .examples import Example


@dataclass(frozen=True)
class Case:
    label: str
    config: GenerationConfig


@dataclass
class Row:
    label: str
    policy: str
    n_tokens: int = 0
    wall_s: float = 0.0
    target_tokens: int = 0
    draft_tokens: int = 0
    drafted: int = 0
    model_s: float = 0.0
    agree_tokens: int = 0  # positions equal to the target's own greedy text
    ref_tokens: int = 0
    same_text: int = 0
    prompts: int = 0
    rss_mb: float = 0.0  # resident memory right after its runs (the largest over prompts)
    decode_tok_s: float | None = None  # prompt processing taken off: comparable with llama.cpp's "decoded" speed

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.wall_s if self.wall_s else 0.0

    @property
    def target_share(self) -> float:
        return self.target_tokens / self.n_tokens if self.n_tokens else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.draft_tokens / self.drafted if self.drafted else None

    @property
    def agreement(self) -> float:
        return self.agree_tokens / self.ref_tokens if self.ref_tokens else 0.0

    @property
    def overhead(self) -> float:
        return max(0.0, 1 - self.model_s / self.wall_s) if self.wall_s else 0.0

    def add(self, summary: Summary, tokens: list[int], reference: list[int]) -> None:
        self.n_tokens += summary.n_tokens
        self.wall_s += summary.wall_s
        self.target_tokens += summary.n_target_tokens
        self.draft_tokens += summary.n_draft_tokens
        self.drafted += summary.n_drafted
        self.model_s += summary.draft.seconds + summary.target.seconds
        n = max(len(tokens), len(reference))
        self.agree_tokens += sum(a == b for a, b in zip(tokens, reference))
        self.ref_tokens += n
        self.same_text += tokens == reference
        self.prompts += 1
        self.rss_mb = max(self.rss_mb, rss_mb())

    def to_dict(self, target_tps: float) -> dict:
        d = asdict(self)
        d.update(tokens_per_s=self.tokens_per_s, speedup=self.tokens_per_s / target_tps if target_tps else None,
                 target_share=self.target_share, acceptance=self.acceptance, agreement=self.agreement,
                 overhead=self.overhead)
        return d


def rss_mb() -> float:
    """Resident memory now (the process's peak only grows, so it cannot tell policies apart)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def default_cases(max_tokens: int, thresholds: Sequence[float] = (2, 3, 5, 10, 20),
                  ks: Sequence[int] = (1, 2, 4, 8), seed_loop: bool = True) -> list[Case]:
    base = GenerationConfig(max_tokens=max_tokens)
    cases = [Case("draft", base.replace(policy="draft"))]
    cases += [Case(f"cascade {t:g}", base.replace(policy="cascade", threshold=float(t))) for t in thresholds]
    cases.append(Case("bild 5 / 20", base.replace(policy="bild", threshold=5.0, rollback_threshold=20.0)))
    cases += [Case(f"speculative k={k}", base.replace(policy="speculative", k=k, threshold=1e6)) for k in ks]
    cases.append(Case("auto", base.replace(policy="auto")))
    if seed_loop:
        # Last: its models hold logits for every position, and peak memory only ever grows.
        cases.append(Case("seed (threshold 5)", base.replace(policy="seed", threshold=5.0)))
    return cases


def _run(engine: Engine, example: Example, config: GenerationConfig) -> tuple[Summary, list[int]]:
    tokens, summary = [], None
    for event in engine.generate(example.prompt, config.replace(chat=example.chat)):
        if isinstance(event, TokenEvent):
            if event.accepted:
                tokens.append(event.token_id)
        else:
            summary = event
    return summary, tokens


def _decode_only(engine: Engine, example: Example, config: GenerationConfig) -> float:
    """Tokens/s after the prompt is processed, as llama.cpp reports its "decoded" speed.

    Every request reads its prompt afresh, so the time of the same request stopped after one token
    (prompt processing plus that token) is taken off: (n - 1) tokens in (wall_n - wall_1) seconds.
    """
    first, _ = _run(engine, example, config.replace(max_tokens=1))
    full, _ = _run(engine, example, config)
    return (full.n_tokens - 1) / max(full.wall_s - first.wall_s, 1e-9)


def run_bench(engine: Engine, examples: Iterable[Example], cases: list[Case], max_tokens: int,
              log=print) -> dict:
    examples = list(examples)
    target_cfg = GenerationConfig(policy="target", max_tokens=max_tokens)
    rows = {"target": Row("target", "target")}
    rows.update({c.label: Row(c.label, c.config.policy) for c in cases})
    # One short warm-up so first-call costs (page faults of the mmapped weights) land nowhere.
    _run(engine, examples[0], GenerationConfig(policy="speculative", max_tokens=4))
    for example in examples:
        log(f"prompt: {example.name}")
        first, reference = _run(engine, example, target_cfg)
        rows["target"].add(first, reference, reference)
        for case in cases:
            summary, tokens = _run(engine, example, case.config)
            rows[case.label].add(summary, tokens, reference)
            engine.pair.release_seed_models()
            log(f"  {case.label:22s} {summary.tokens_per_s:6.2f} tok/s  {summary.n_tokens} tokens")
        last, tokens = _run(engine, example, target_cfg)
        rows["target"].add(last, tokens, reference)
    for case in cases:
        if case.config.policy == "speculative":
            tps = [_decode_only(engine, ex, case.config) for ex in examples]
            rows[case.label].decode_tok_s = sum(tps) / len(tps)
    rows["target"].decode_tok_s = sum(_decode_only(engine, ex, target_cfg) for ex in examples) / len(examples)
    target_tps = rows["target"].tokens_per_s
    context = engine.encode(examples[0].prompt, examples[0].chat)
    costs = measure_costs(engine.pair, context)
    return {"rows": [r.to_dict(target_tps) for r in rows.values()], "costs": costs.to_dict(),
            "bounds": bounds(costs, rows), "machine": machine(engine)}


def bounds(costs: Costs, rows: dict[str, Row]) -> dict:
    """What the measured per-call costs allow, as speed ratios to the target alone."""
    t1 = costs.target_step_s
    horizon = max(r.n_tokens // max(r.prompts, 1) for r in rows.values())
    out = {"cascade_at_share": {f"{share:.2f}": t1 / costs.cascade_s_per_token(share, horizon)
                                for share in (0.0, 0.05, 0.1, 0.2, 0.3)},
           "speculative_best_case_k": {str(k): t1 / costs.speculative_s_per_token(k, 1.0) for k in (1, 2, 4, 8)}}
    for label, row in rows.items():
        if row.policy == "speculative" and row.acceptance:
            k = int(label.split("=")[1])
            # per-token acceptance a from the kept fraction of drafted tokens is an estimate
            out.setdefault("speculative_at_measured_acceptance", {})[label] = \
                t1 / costs.speculative_s_per_token(k, min(row.acceptance, 0.999))
    return out


def machine(engine: Engine) -> dict:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "threads": engine.pair.config.n_threads,
            "draft": engine.pair.draft_path.name, "target": engine.pair.target_path.name,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}


# ---- the llama.cpp peer ---------------------------------------------------------------------------

def llama_cpp_tools() -> Path | None:
    found = shutil.which("llama-speculative-simple")
    if found:
        return Path(found).parent
    default = Path(os.environ.get("CASCADE_LLAMA_TOOLS", Path.home() / ".cache/cascade/llama.cpp-tools"))
    hits = sorted(default.glob("*/bin/llama-speculative-simple"))
    return hits[-1].parent if hits else None


def run_llama_cpp_speculative(tools: Path, engine: Engine, example: Example, k: int, max_tokens: int,
                              threads: int) -> dict | None:
    from .prompt import render_chat

    prompt = render_chat(engine.pair.target.llm, example.prompt) if example.chat else example.prompt
    cmd = [str(tools / "llama-speculative-simple"), "-m", str(engine.pair.target_path),
           "-md", str(engine.pair.draft_path), "-p", prompt, "-n", str(max_tokens), "-t", str(threads),
           "-td", str(threads), "--temp", "0", "--spec-type", "draft-simple", "--spec-draft-n-max", str(k),
           "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-c", "2048", "--seed", "0", "-ngl", "0"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    log = r.stdout + r.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    acc = re.search(r"accept\s+=\s+([\d.]+)%", log)
    if r.returncode != 0 or not m:
        return {"error": f"exit {r.returncode}: {log[-300:]}"}
    return {"tokens": int(m.group(1)), "seconds": float(m.group(2)), "tok_s": float(m.group(3)),
            "accept": float(acc.group(1)) / 100 if acc else None}


def llama_cpp_peer(engine: Engine, examples: list[Example], ks: Sequence[int], max_tokens: int,
                   log=print) -> dict:
    tools = llama_cpp_tools()
    if tools is None:
        log("llama.cpp peer skipped: build it with scripts/build-llama-cpp-tools")
        return {"skipped": "llama-speculative-simple not built (scripts/build-llama-cpp-tools)"}
    out = {}
    for k in ks:
        runs = [run_llama_cpp_speculative(tools, engine, ex, k, max_tokens, engine.pair.config.n_threads)
                for ex in examples]
        ok = [r for r in runs if r and "error" not in r]
        if not ok:
            out[str(k)] = {"error": runs[0]["error"] if runs and runs[0] else "no result"}
            continue
        out[str(k)] = {"decode_tok_s": sum(r["tok_s"] for r in ok) / len(ok),
                       "accept": sum(r["accept"] or 0 for r in ok) / len(ok)}
        log(f"  llama.cpp speculative k={k}: {out[str(k)]['decode_tok_s']:.2f} tok/s (decode)")
    return out


# ---- rendering ------------------------------------------------------------------------------------

def markdown_table(result: dict) -> str:
    head = ("| policy | tok/s | vs target | target share | draft kept | agreement | same text | "
            "overhead | memory (RSS) |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in result["rows"]:
        acc = f"{r['acceptance']:.0%}" if r["acceptance"] is not None else "–"
        lines.append(f"| {r['label']} | {r['tokens_per_s']:.2f} | {r['speedup']:.2f}× | {r['target_share']:.0%} | "
                     f"{acc} | {r['agreement']:.0%} | {r['same_text']}/{r['prompts']} | {r['overhead']:.1%} | "
                     f"{r['rss_mb']:.0f} MB |")
    peer = result.get("llama_cpp")
    if peer and "skipped" not in peer:
        lines.append("\nDecode speed with the prompt already processed (how llama.cpp reports it):\n")
        lines.append("| k | ours, speculative | llama.cpp speculative | ratio |\n|---|---|---|---|")
        by_label = {r["label"]: r for r in result["rows"]}
        for k, p in peer.items():
            ours = by_label.get(f"speculative k={k}", {}).get("decode_tok_s")
            if "error" in p or ours is None:
                lines.append(f"| {k} | {ours} | {p.get('error', '?')} | – |")
            else:
                lines.append(f"| {k} | {ours:.2f} | {p['decode_tok_s']:.2f} (accept {p['accept']:.0%}) | "
                             f"{ours / p['decode_tok_s']:.2f}× |")
        lines.append(f"| target alone | {by_label['target']['decode_tok_s']:.2f} | | |")
    return "\n".join(lines)


def costs_table(result: dict) -> str:
    c = result["costs"]
    lines = ["| tokens in one call | draft | target |", "|---|---|---|"]
    for n in c["target_batch_s"]:
        lines.append(f"| {n} | {c['draft_batch_s'][n] * 1000:.1f} ms | {c['target_batch_s'][n] * 1000:.1f} ms |")
    b = result["bounds"]
    lines.append("\nBest speed these costs allow, as a ratio to the target alone: cascade with a share s of "
                 "tokens escalated, evenly spread " + ", ".join(f"s={s}: {v:.2f}×" for s, v in b["cascade_at_share"].items())
                 + "; speculative if every draft were accepted "
                 + ", ".join(f"k={k}: {v:.2f}×" for k, v in b["speculative_best_case_k"].items()) + ".")
    return "\n".join(lines)


def chart_html(result: dict, path: Path) -> None:
    import plotly.graph_objects as go

    rows = result["rows"]
    fig = go.Figure()
    for family in ("cascade", "speculative", "bild", "target", "draft", "seed", "auto"):
        pts = [r for r in rows if r["policy"] == family]
        if pts:
            fig.add_trace(go.Scatter(x=[r["agreement"] for r in pts], y=[r["speedup"] for r in pts],
                                     mode="markers+text" if len(pts) < 2 else "lines+markers+text",
                                     text=[r["label"] for r in pts], textposition="top center", name=family))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="the target alone")
    fig.update_layout(title=f"Speed against agreement with the target ({result['machine']['threads']} threads, "
                            f"{result['machine']['cpu']})",
                      xaxis_title="share of tokens equal to the target's own greedy text",
                      yaxis_title="tokens/s relative to the target alone", template="plotly_white")
    fig.write_html(path, include_plotlyjs=True)  # readable offline
