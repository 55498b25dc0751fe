"""The README's and BENCHMARKS.md's HumanEval tables show what the shipped results files say: every pass
count, share, speed ratio and pairing is read from the JSON the table names as its source, formatted as the
table formats it. A number edited by hand, or a results file rewritten without its table, fails here."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cascade.ui.quality import RESULTS, Report, load_reports

from .helpers import ROOT

SOURCE = re.compile(r"source: `([\w./-]+\.json)`", re.IGNORECASE)
FILE = re.compile(r"`([\w.-]+\.json)`")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass
class Table:
    """A Markdown table: its header, its rows (cells by column name), and the text around it."""

    header: list[str]
    rows: list[dict[str, str]]
    before: str  # the paragraph right above it
    after: str  # the paragraph right below it


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """Every table in a Markdown text, with the paragraphs that frame it."""
    blocks = [b.strip() for b in re.split(r"\n\s*\n", text)]
    found = []
    for i, block in enumerate(blocks):
        lines = block.splitlines()
        if len(lines) < 3 or not lines[0].startswith("|") or not re.match(r"^\|[-| ]+\|$", lines[1]):
            continue
        header = _cells(lines[0])
        rows = [dict(zip(header, _cells(line))) for line in lines[2:]]
        after = next((b for b in blocks[i + 1:] if not b.startswith("![")), "")  # a picture of it may come between
        found.append(Table(header, rows, blocks[i - 1] if i else "", after))
    return found


def section(text: str, heading: str) -> str:
    """The text under a `## ` heading, up to the next one."""
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end >= 0 else len(text)]


def column(table: Table, *words: str) -> str | None:
    """The first column whose name holds every word, or None."""
    return next((h for h in table.header if all(w in h for w in words)), None)


def reports() -> dict[str, Report]:
    return {report.name: report for report in load_reports(RESULTS)}


def configuration(words: str) -> dict[str, Any]:
    """A row's configuration from its words: policy, rule, threshold, budget, k."""
    text = words.lower().replace("*", "")
    if "big model alone" in text or text.startswith("target alone"):
        return {"policy": "target"}
    if "small model alone" in text or text.startswith("draft alone"):
        return {"policy": "draft"}
    k = re.search(r"k=(\d+)", text)
    if text.startswith("speculative"):
        return {"policy": "speculative", "k": int(k.group(1))}
    rule = "learned" if ("router" in text or "learned" in text) else \
        next(r for r in ("margin", "entropy", "perplexity") if r in text)
    budget = re.search(r"budget (\d+(?:\.\d+)?)%", text)
    threshold = re.search(r"(?:threshold|perplexity|margin|entropy|learned) (\d+(?:\.\d+)?)(?![\d%])", text)
    return {"policy": "cascade", "rule": rule, "budget": float(budget.group(1)) / 100 if budget else None,
            "threshold": float(threshold.group(1)) if threshold else None}


def result(report: Report, config: dict[str, Any]) -> dict[str, Any]:
    """The one result of the report that has this configuration."""
    def same(r: dict[str, Any]) -> bool:
        for key, want in config.items():
            got = r.get(key)
            if isinstance(want, float) or isinstance(got, float):
                if want is None or got is None or abs(got - want) > 1e-9:
                    return False
            elif got != want:
                return False
        return True
    matches = [r for r in report.data["results"] if same(r)]
    assert len(matches) == 1, f"{report.name}: {len(matches)} results match {config}"
    return matches[0]


def pass_words(r: dict[str, Any]) -> str:
    return f"{100 * r['pass_at_1']:.1f}% ({r['passed']}/{r['n_tasks']})"


def share_words(share: float) -> str:
    return f"{100 * share:.0f}%" if share in (0.0, 1.0) else f"{100 * share:.1f}%"


def speed_words(r: dict[str, Any]) -> str:
    return f"{r['vs_target']:.2f}×"


def check_row(row: dict[str, str], table: Table, report: Report) -> None:
    """Every figure of the row that has a column: the one the report gives, as the tables write it."""
    label = row[table.header[0]]
    r = result(report, configuration(label))
    where = f"{report.name}, row {label!r}"
    passed = column(table, "pass@1") or column(table, "passed")
    assert passed, f"{where}: no pass column"
    assert row[passed].replace("*", "").startswith(pass_words(r)), f"{where}: pass rate {row[passed]!r}"
    if share := column(table, "share"):
        assert row[share].replace("*", "") == share_words(r["target_share"]), f"{where}: share {row[share]!r}"
    speed = column(table, "×")
    assert speed, f"{where}: no speed column"
    assert row[speed].replace("*", "").startswith(speed_words(r)), f"{where}: speed {row[speed]!r}"
    if r["policy"] == "target":
        tokens = re.search(r"\(([\d.]+) tok(?:ens)?/s\)", row[speed])
        assert tokens and tokens.group(1) == f"{r['tokens_per_s']:.1f}", f"{where}: tokens/s {row[speed]!r}"
    if ppl := column(table, "ppl"):
        assert row[ppl] == f"{r['text_ppl_by_target']:.3f}", f"{where}: perplexity {row[ppl]!r}"
    paired = {k: len(v) if isinstance(v, list) else v for k, v in (r.get("paired") or {}).items()}  # problems: counted
    if (flips := column(table, "gained")) and paired:
        words = f"+{paired['gained']} −{paired['lost']}"
        if "(p " in row[flips]:
            words += f" (p {paired['mcnemar_p']:.2g})"
        assert row[flips].startswith(words), f"{where}: flips {row[flips]!r}, the file gives {words!r}"
    if (same := column(table, "same text")) and paired:
        want = (f"{paired['same_text']}/{r['n_tasks']}" if "/" in row[same] else str(paired["same_text"]))
        assert row[same] == want, f"{where}: same text {row[same]!r}"
    if "the big model's own text" in row[passed]:
        assert paired.get("same_text") == r["n_tasks"], f"{where}: not every answer is the big model's"


def check_source(words: str, report: Report) -> None:
    """A source's words name the report's date first, and the big model alone's figures where they give them."""
    date = DATE.search(words)
    if date:
        assert date.group(0) == report.data["date"], f"{report.name}: dated {date.group(0)} beside it"
    target = report.result("target")
    alone = re.search(r"big model alone[^;]*?(\d+)/(\d+) at ([\d.]+) tokens/s", words)
    if alone:
        assert (int(alone.group(1)), int(alone.group(2))) == (target["passed"], target["n_tasks"]), words
        assert alone.group(3) == f"{target['tokens_per_s']:.1f}", words


def checked_rows(text: str) -> int:
    """Check every table of the text that names a results file, row by row; how many rows were checked."""
    shipped = reports()
    n = 0
    for table in tables(text):
        framing = SOURCE.search(table.before) or SOURCE.search(table.after)
        source = None
        # a HumanEval report, not another study (the where-it-pays map is checked by tests/test_where.py)
        if framing and (ROOT / framing.group(1)).parent == RESULTS and Path(framing.group(1)).name in shipped:
            source = Path(framing.group(1)).name
            check_source(table.before if SOURCE.search(table.before) else table.after, shipped[source])
        run = column(table, "run")
        for row in table.rows:
            if run and (named := FILE.search(row[run])):
                source = named.group(1)
                check_source(row[run], shipped[source])
            if source is None:
                break
            check_row(row, table, shipped[source])
            n += 1
    return n


def test_the_readmes_tables_are_the_results_files():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    worth = section(readme, "## Is it worth it?")
    assert len(tables(worth)) >= 2 and checked_rows(worth) >= 10


def test_benchmarks_humaneval_tables_are_the_results_files():
    benchmarks = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert checked_rows(benchmarks) >= 14  # the frontier, the budgets and the numerics tables


def test_every_shipped_report_is_quoted_somewhere():
    """A results file no table quotes is a figure without a home."""
    text = (ROOT / "README.md").read_text(encoding="utf-8") + (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    for name in reports():
        assert name in text, f"cascade/results/{name} is quoted nowhere"


def test_a_changed_figure_fails():
    """The check reads the table, not a copy of it: one digit changed in a row is caught."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    worth = section(readme, "## Is it worth it?")
    edited = worth.replace("| 67.1% (110/164) |", "| 67.7% (111/164) |", 1)
    assert edited != worth
    with pytest.raises(AssertionError, match="pass rate"):
        checked_rows(edited)


def test_the_router_study_table_is_its_file():
    """BENCHMARKS.md's router table: each ranking's held-out and out-of-fold figures, from the study's JSON."""
    benchmarks = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    table = next(t for t in tables(benchmarks) if column(t, "ROC AUC"))
    path = SOURCE.search(table.after).group(1)
    study = json.loads((ROOT / path).read_text(encoding="utf-8"))
    names = {"perplexity": "perplexity", "margin": "margin", "entropy": "entropy", "17 features": "top2",
             "differs in code": "hidden-code", "hidden state": "hidden"}
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    for row in table.rows:
        label = row[table.header[0]]
        key = next(v for k, v in names.items() if k in label)
        held, fold = study["held_out"][key], study["out_of_fold"][key]
        cells = [c.replace("*", "") for c in row.values()]
        assert cells[1] == f"{held['roc_auc']:.3f}", label
        assert cells[2] == (f"{pct(held['share_for_95'])} ({pct(held['share_for_95_code_texts'])} / "
                            f"{pct(held['share_for_95_prose'])})"), label
        assert cells[3] == pct(fold["share_for_95"]), label
        assert cells[4] == pct(held["share_for_95_code_label"]), label
