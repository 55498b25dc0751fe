"""A run kept in one offline HTML file (`run_html`, drawn by the page's views) embedding JSON that `read_run`
reads back; text escaped, no fetch (a Content-Security-Policy). "Download this run" and `--save` write it."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..engine.analysis import Decision, Routing, RunView
from ..engine.config import GenerationConfig, ModelConfig
from ..engine.events import Summary, TokenEvent, plain
from ..engine.policies import POLICY_TABLE
from ..routing.rules import RULE_TABLE
from ..serving.machine import cpu_name
from ..serving.messages import model_name
from . import chart, conversation, sentences, tokens
from .hover import standalone_hover_js
from .runwords import about_rows, numbers_rows, settings_rows
from .style import GREY, PURPLE, RED

if TYPE_CHECKING:
    from .run import Run

FORMAT, VERSION = "cascade-run", 1
DATA_ID = "cascade-run"  # the id of the script element that holds the run as JSON
CHART_ID = "cascade-chart-plot"

# inline scripts and styles only; images as data: URLs (Plotly's "download as png")
_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
        "base-uri 'none'; form-action 'none'")

_CSS = f"""
:root {{ color-scheme: light; }}
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; color: #1f1f1f;
       background: #fff; max-width: 1100px; margin: 0 auto; padding: 16px 20px 32px; line-height: 1.45; }}
h1 {{ font-size: 1.45em; margin: .2em 0 .4em; }}
h2 {{ font-size: 1.12em; margin: 1.4em 0 .5em; }}
.intro {{ max-width: 60em; }}
.bigcolour {{ color: {RED}; font-weight: 600; }}
.lookupcolour {{ color: {PURPLE}; }}
.prompt {{ white-space: pre-wrap; word-break: break-word; margin: 0; padding: 8px 12px; border-radius: 8px;
          background: rgba(128,128,128,.08); border: 1px solid rgba(128,128,128,.25); font: inherit; }}
dl.facts {{ display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; }}
dl.facts dt {{ color: #555; }}
dl.facts dd {{ margin: 0; }}
.cascade-summary .sentence {{ font-weight: 600; font-size: 1.05em; }}
table.numbers {{ border-collapse: collapse; }}
table.numbers td {{ padding: 3px 14px 3px 0; border-bottom: 1px solid rgba(128,128,128,.2); }}
table.numbers td.value {{ font-variant-numeric: tabular-nums; }}
.cascade-chart {{ min-height: 380px; }}
footer {{ margin-top: 2.5em; color: {GREY}; font-size: .88em; }}
"""


def now() -> str:
    """The local date and time, as a run file records it (e.g. 2025-06-01 14:03 CEST)."""
    return time.strftime("%Y-%m-%d %H:%M %Z").strip()


def machine_info(models: ModelConfig) -> dict[str, Any]:
    """This machine as a run file names it: processor, cores, CPU threads per model, and the device."""
    return {"cpu": cpu_name(), "cores": os.cpu_count() or 1, "threads": models.n_threads, "device": models.device}


def model_names(models: ModelConfig) -> dict[str, str]:
    """The two models as a run file names them: Hub repo/filename or a file name, never a path."""
    return {"draft": model_name(models.draft), "target": model_name(models.target)}


def _script_safe(json_text: str) -> str:
    """JSON text that cannot end or confuse the script element holding it, and is still the same JSON."""
    return (json_text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def run_record(prompt: str, config: GenerationConfig, events: Sequence[TokenEvent], summary: Summary | None, *,
               models: Mapping[str, str], machine: Mapping[str, Any] | None, comparison: Summary | None,
               created: str, earlier: Sequence[conversation.Turn] = ()) -> dict[str, Any]:
    """The run as the file embeds it (and `read_run` returns it), a follow-up's earlier turns under "earlier"."""
    return plain({
        "earlier": [conversation.turn_record(t) for t in earlier],
        "format": FORMAT, "version": VERSION, "prompt": prompt, "settings": dataclasses.asdict(config),
        "events": [e.to_dict() for e in events], "summary": summary.to_dict() if summary else None,
        "comparison": comparison.to_dict() if comparison else None, "models": dict(models),
        "machine": dict(machine) if machine is not None else None, "created": created,
    })


_DATA_RE = re.compile(r'<script type="application/json" id="' + DATA_ID + r'">(.*?)</script>', re.S)


def read_run(document: str) -> dict[str, Any]:
    """The run a run file embeds (`run_record`'s keys; "earlier" is [] in older files); ValueError if none."""
    match = _DATA_RE.search(document)
    if match is None:
        raise ValueError("not a cascade run file: it has no embedded run")
    record = json.loads(match.group(1))
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError("not a cascade run file: the embedded data is not a cascade run")
    if record.get("version") != VERSION:
        raise ValueError(f"a cascade run file of version {record.get('version')!r}; this reads version {VERSION}")
    record.setdefault("earlier", [])
    return record


def _e(value: Any) -> str:
    return html.escape(str(value))


def _facts(rows: Sequence[tuple[str, str]]) -> str:
    """A list of (label, value) pairs; both are escaped here."""
    return '<dl class="facts">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"


def _numbers_table(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f'<tr><td>{_e(k)}</td><td class="value">{_e(v)}</td></tr>' for k, v in rows)
    return f'<table class="numbers">{body}</table>'


def _chart_html(routing: Routing, view: RunView) -> str:
    """The chart as the page draws it, with Plotly's JavaScript inlined."""
    import plotly.io
    from plotly.offline import get_plotlyjs

    figure_json = plotly.io.to_json(chart.perplexity_figure(routing, view), validate=False)
    config = {"displaylogo": False, "responsive": True, "typesetMath": False}
    plotly_js = re.sub(r"</(script)", r"<\\/\1", get_plotlyjs(), flags=re.I)  # none today; never any
    return (f'<div class="cascade-chart"><div id="{CHART_ID}" class="plotly-graph-div"></div></div>\n'
            f"<script>window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>\n"
            f"<script>{plotly_js}</script>\n"
            f"<script>(function () {{ var fig = {_script_safe(figure_json)};\n"
            f"Plotly.newPlot({json.dumps(CHART_ID)}, fig.data, fig.layout, {json.dumps(config)}); }})();</script>")


def _intro(config: GenerationConfig) -> str:
    policy = POLICY_TABLE.get(config.policy)
    red = '<span class="bigcolour">red</span>'
    purple = '<span class="lookupcolour">purple</span>'
    if policy is not None and policy.looks_up:
        helper = " or, where lookup found nothing, drafted by a small model" if policy.drafts else ""
        who = (f"A big model wrote this text, helped by prompt lookup: where the text's last few tokens had "
               f"occurred before (in the prompt or the answer), what followed them there was proposed{helper}, "
               f"and the big model checked each proposal. {purple} tokens were copied this way and kept, {red} "
               f"ones the big model wrote itself"
               + (", the others are the small model's drafts it kept" if policy.drafts else "")
               + ". Hover over a token to see how sure each model was of it.")
        who += _e(f" How they shared the work in this run: {policy.description}.")
    elif policy is not None and not policy.drafts:
        who = (f"The big model wrote this text by itself, the baseline the other ways of writing are compared "
               f"with: every token is {red}. Hover over a token to see how sure the big model was of it.")
    elif policy is not None and not policy.escalates and policy.window(config, config.k) == 0:
        who = ("The small model wrote this text by itself: no token is red. Hover over a token to see how sure "
               "it was of it.")
    else:
        uses_rule = policy is None or policy.uses_rule
        rule = RULE_TABLE.get(config.rule if uses_rule else "perplexity", RULE_TABLE["perplexity"])
        side = "below" if rule.below else "above"
        line = f"; {side} the threshold line the big model takes over" if uses_rule else ""
        number = {"perplexity": "its perplexity: higher is less sure",
                  "entropy": "the entropy of its distribution, in nats: higher is less sure",
                  "margin": "the margin between its two likeliest tokens: lower is less sure",
                  "learned": "a learned router's probability that the big model would write another token"}
        who = (f"A small model wrote this text with a big model stepping in where it was unsure: {red} tokens are "
               f"the big model's, the others the small model's. Hover over a token to see how sure each model "
               f"was of it. The chart shows, token by token, how unsure the small model was "
               f"({number[rule.name]}){line}.")
        who += _e(f" How they shared the work in this run: {policy.description}." if policy else "")
    return (f'<p class="intro">{who}</p>'
            f'<p class="intro">This file keeps the whole run: it opens in any browser, needs no internet, and '
            f"holds the run's data for programs too (as JSON, in the script element with id "
            f'"{DATA_ID}").</p>')


def _earlier_section(earlier: Sequence[conversation.Turn]) -> str:
    if not earlier:
        return ""
    n = len(earlier)
    return (f'<section class="cascade-earlier-section"><h2>The conversation before it ({n} earlier '
            f'question{"s" if n > 1 else ""})</h2>{conversation.earlier_html(earlier)}</section>')


def run_html(prompt: str, config: GenerationConfig, events: Sequence[TokenEvent], summary: Summary | None, *,
             models: Mapping[str, str], machine: Mapping[str, Any] | None = None,
             comparison: Summary | None = None, created: str, earlier: Sequence[conversation.Turn] = (),
             prior: Sequence[float] | None = None) -> str:
    """One self-contained HTML document keeping a run (`summary` None if stopped; `comparison` the big model
    alone's; `earlier` a follow-up's turns; `prior` a share's calibration): text, chart, numbers, settings, data."""
    # lone surrogates (a str can hold them, UTF-8 cannot) become '?', as the engine reads them
    prompt = prompt.encode("utf-8", errors="replace").decode("utf-8")
    # without its earlier runs (--save): the turns' text, from the history
    earlier = tuple(earlier) or conversation.turns_of(config.history)
    routing = Routing(events)
    policy = POLICY_TABLE.get(config.policy)
    run_budget = config.budget if policy is not None and policy.uses_rule else None
    view = RunView(Decision(config.rule if config.rule in RULE_TABLE else "perplexity", config.threshold, run_budget),
                   prior=prior)
    record = run_record(prompt, config, events, summary, models=models, machine=machine,
                        comparison=comparison, created=created, earlier=earlier)
    data = _script_safe(json.dumps(record, ensure_ascii=False, allow_nan=False))
    if summary is not None:
        result = (f'<p class="sentence">{_e(sentences.summary_sentence(summary))}</p>'
                  f"<p>{_e(sentences.summary_details(summary))}</p>")
        numbers = (f'<section class="cascade-numbers"><h2>Measured numbers</h2>'
                   f"{_numbers_table(numbers_rows(summary))}</section>")
        compare = "" if comparison is None else (
            f'<section class="cascade-comparison"><h2>Compared with the big model alone</h2>'
            f"{sentences.compare_html(summary, comparison)}</section>")
    else:
        result = f'<p class="sentence">{_e(sentences.stopped_sentence(events))}</p>'
        numbers = compare = ""
    short = prompt if len(prompt) <= 60 else prompt[:59] + "…"
    asked = "The follow-up question" if earlier else "The prompt"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="cascade">
<title>{_e("cascade run: " + " ".join(short.split()))}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>A text written by two models</h1>
{_intro(config)}
</header>
{_earlier_section(earlier)}
<section class="cascade-prompt"><h2>{asked}</h2><div class="prompt">{_e(prompt)}</div></section>
<section class="cascade-result"><h2>The text</h2>
<div class="cascade-summary">{result}</div>
{tokens.text_panel(routing, view, given=config.answer_prefix)}
</section>
<section class="cascade-chart-section"><h2>How unsure the small model was</h2>
{_chart_html(routing, view)}
</section>
{numbers}
{compare}
<section class="cascade-settings"><h2>Settings</h2>{_facts(settings_rows(config))}</section>
<section class="cascade-about"><h2>When, with what, on what</h2>{_facts(about_rows(models, machine, created))}</section>
<footer>made with cascade: a small draft model and a big target model writing one text together.</footer>
<script type="application/json" id="{DATA_ID}">{data}</script>
<script>{standalone_hover_js(".cascade-result")}</script>
{f"<script>{standalone_hover_js('.cascade-earlier-section')}</script>" if earlier else ""}
</body>
</html>
"""


# Gradio serves downloads from its own cache, so only the latest few are kept here.
RUN_FILES = Path(tempfile.gettempdir()) / "cascade-runs"
KEEP_RUN_FILES = 32


def save_run_file(run: Run, folder: Path = RUN_FILES) -> Path:
    """Write the page's `run` as one self-contained HTML file (`run_html`) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"cascade-run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.html"
    models = run.models or ModelConfig()
    path.write_text(run_html(run.prompt, run.config, run.events, run.summary, models=model_names(models),
                             machine=machine_info(models), comparison=run.comparison, created=now(),
                             earlier=run.earlier, prior=run.prior(run.config.rule)), encoding="utf-8")
    for old in sorted(folder.glob("cascade-run-*.html"), key=lambda p: p.stat().st_mtime)[:-KEEP_RUN_FILES]:
        old.unlink(missing_ok=True)
    return path


def offer_download(run: Run | None) -> Any:
    """The "Download this run" button: a file keeping `run` once it has finished or stopped, else hidden."""
    import gradio as gr  # here, not above: the command line's --save writes run files without the page

    if run is None or run.running:
        return gr.update(value=None, visible=False)
    return gr.update(value=str(save_run_file(run)), visible=True)
