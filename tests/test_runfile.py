"""A run kept in one HTML file (`cascade.ui.runfile`, `generate --save`): what it shows, the data it
embeds, that model text cannot break out of it, and that it opens from disk with the network blocked.

The browser test leaves a screenshot in artifacts/run-file.png.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from html.parser import HTMLParser

import pytest

from cascade import GenerationConfig
from cascade.engine.policies import POLICY_TABLE
from cascade.ui import rulewords, sentences
from cascade.ui.hover import standalone_hover_js
from cascade.ui.runfile import DATA_ID, read_run, run_html

from .helpers import ARTIFACTS, TOY_THREADS, cascade, engine_for, json_lines, run
from .recorded import CASCADE, ev, spans, summary as recorded_summary

PROMPT = "The cat sat"
MODELS = {"draft": "toy-small.gguf", "target": "toy-org/toy-related-GGUF/related.gguf"}
MACHINE = {"cpu": "Toy CPU 3000", "cores": 2, "threads": 2}
CREATED = "2025-06-01 14:03 CEST"


@pytest.fixture(scope="module")
def toy_run(toy):
    """A cascade run of the toy pair in which both models write, and its big-model-alone comparison."""
    engine = engine_for(toy.small, toy.related)
    config = GenerationConfig(policy="cascade", threshold=5.0, max_tokens=24, chat=False)
    events, summary = run(engine, PROMPT, **dataclasses.asdict(config))
    _, alone = run(engine, PROMPT, **dataclasses.asdict(config.replace(policy="target")))
    assert 0 < summary.counts.n_target_tokens < summary.counts.n_tokens
    return config, events, summary, alone


def save(config, events, summary, comparison=None, prompt=PROMPT, models=MODELS) -> str:
    return run_html(prompt, config, events, summary, models=models, machine=MACHINE, comparison=comparison,
                    created=CREATED)


class Scripts(HTMLParser):
    """The document's script elements as a browser's parser splits them: (attributes, content)."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict, str]] = []
        self._open: dict | None = None
        self.feed(document)

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self._open = dict(attrs)
            self.scripts.append((self._open, ""))

    def handle_data(self, data):
        if self._open is not None:
            attrs, content = self.scripts[-1]
            self.scripts[-1] = (attrs, content + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._open = None


def chart_figure(document: str) -> dict:
    return json.loads(re.search(r"var fig = (.*?);\nPlotly\.newPlot", document, re.S).group(1))


def without_plotly_js(document: str) -> str:
    """The document with Plotly's own (inlined) library taken out: everything cascade wrote."""
    from plotly.offline import get_plotlyjs

    library = get_plotlyjs()
    assert library in document
    return document.replace(library, "")


# ---- what the file shows ---------------------------------------------------------------------------

def test_the_file_shows_the_text_in_two_colours_the_chart_and_the_numbers(toy_run):
    config, events, summary, _ = toy_run
    doc = save(config, events, summary)
    accepted = [e for e in events if e.accepted]
    # The big model's tokens are red, with their hover details; the legend says what red means.
    assert spans(doc, "red") == [e.text for e in accepted if e.source == "target" and e.text]
    assert doc.count('class="tok red target"') == len(spans(doc, "red")) > 0
    assert 'title="' in doc and "written by the big model" in doc and "= written by the big model" in doc
    # The chart: one point per token, and the run's threshold.
    traces = chart_figure(doc)["data"]
    assert sum(len(t["x"]) for t in traces if t.get("meta") == "tokens") == summary.counts.n_tokens == len(accepted)
    assert [t["y"] for t in traces if t.get("meta") == "threshold"] == [[5.0, 5.0]]
    assert all(t["text"] for t in traces if t.get("meta") == "tokens")  # hover texts
    # The summary in sentences, the measured numbers, and what it ran with, in words.
    for words in (html.escape(sentences.summary_sentence(summary)), html.escape(sentences.summary_details(summary)),
                  f"{summary.tokens_per_s:.1f} tokens/s", f"{summary.timings.wall_s:.2f} s",
                  f"{summary.counts.n_target_tokens} ({summary.counts.target_share:.0%})",
                  html.escape(rulewords.policy_label("cascade")),
                  "Threshold</dt><dd>5:", "Most tokens</dt><dd>24", "0: always the likeliest token",
                  "raw text", CREATED, MODELS["draft"], MODELS["target"], "Toy CPU 3000, 2 cores, 2 threads per model",
                  "A small model wrote this text with a big model stepping in where it was unsure",
                  f'<div class="prompt">{PROMPT}</div>', "made with cascade"):
        assert words in doc, words
    assert "cascade-comparison" not in doc


def test_the_embedded_run_reads_back_as_it_was(toy_run):
    config, events, summary, _ = toy_run
    record = read_run(save(config, events, summary))
    assert record["format"] == "cascade-run" and record["version"] == 1
    assert record["events"] == [e.to_dict() for e in events]
    assert record["summary"] == summary.to_dict()
    assert record["summary"]["text"] == summary.text
    assert GenerationConfig(**{**record["settings"], "stop": tuple(record["settings"]["stop"])}) == config
    assert (record["prompt"], record["models"], record["machine"], record["created"], record["comparison"]) == (
        PROMPT, MODELS, MACHINE, CREATED, None)


# A run file's summary: one flat object, the keys run files have always held, whatever records the Summary
# keeps them in.
SUMMARY_KEYS = {
    "text", "policy", "stop_reason", "prompt_tokens", "rule", "device", "answer_prefix", "n_given_tokens",
    "n_tokens", "n_draft_tokens", "n_target_tokens", "n_drafted", "n_escalated", "n_rejected", "n_rolled_back",
    "n_lookup_tokens", "n_lookup_proposed", "modes", "wall_s", "first_token_s", "routing_s", "router_s",
    "draft", "target", "call_sizes", "extra_rows", "reading_s", "text_ppl_by_target", "target_agreement", "scoring_s",
    "scored_top", "budget", "budget_threshold", "budget_source", "target_share", "acceptance_rate",
    "tokens_per_s", "writing_tokens_per_s", "overhead_s"}


def test_a_summary_is_one_flat_object_with_the_keys_run_files_hold(toy_run):
    config, events, summary, _ = toy_run
    record = read_run(save(config, events, summary))["summary"]
    assert set(record) == SUMMARY_KEYS and record["n_tokens"] == summary.counts.n_tokens
    assert record["wall_s"] == summary.timings.wall_s and record["draft"]["calls"] == summary.work.draft.calls
    assert record["target_agreement"] == summary.quality.target_agreement
    unscored = read_run(save(config, events, recorded_summary()))["summary"]
    assert set(unscored) == SUMMARY_KEYS
    assert (unscored["text_ppl_by_target"], unscored["budget"], unscored["budget_source"]) == (None, None, "")


def test_with_a_comparison_the_file_shows_it(toy_run):
    config, events, summary, alone = toy_run
    doc = save(config, events, summary, comparison=alone)
    assert "Compared with the big model alone" in doc
    assert sentences.compare_html(summary, alone) in doc
    assert read_run(doc)["comparison"] == alone.to_dict()


def test_the_file_shows_the_runs_rule_and_charts_its_numbers(toy):
    engine = engine_for(toy.small, toy.related)
    config = GenerationConfig(policy="cascade", rule="margin", threshold=0.3, max_tokens=12, chat=False)
    events, summary = run(engine, PROMPT, **dataclasses.asdict(config))
    doc = save(config, events, summary)
    assert html.escape(rulewords.label("margin")) in doc
    assert "0.3: the big model writes a token when the small model&#x27;s margin of it is below this" in doc
    figure = chart_figure(doc)
    assert figure["layout"]["yaxis"]["type"] == "linear" and "margin" in figure["layout"]["yaxis"]["title"]["text"]
    assert [t["y"] for t in figure["data"] if t.get("meta") == "threshold"] == [[0.3, 0.3]]
    assert "below the threshold line the big model takes over" in doc
    assert read_run(doc)["settings"]["rule"] == "margin"
    if summary.quality is not None:
        assert "Tokens the big model would have written itself" in doc


def test_a_run_a_share_decided_keeps_its_share_the_threshold_it_meant_and_the_line_it_moved(toy):
    engine = engine_for(toy.small, toy.related)
    config = GenerationConfig(policy="cascade", rule="margin", budget=0.25, max_tokens=24, chat=False)
    events, summary = run(engine, PROMPT, **dataclasses.asdict(config))
    assert summary.budget.share == 0.25 and summary.budget.threshold is not None
    doc = save(config, events, summary)
    record = read_run(doc)
    assert record["settings"]["budget"] == 0.25 and record["summary"]["budget_threshold"] == summary.budget.threshold
    assert GenerationConfig(**{**record["settings"], "stop": tuple(record["settings"]["stop"])}) == config
    # In words: the share asked, not the threshold it never read; the summary names the threshold it meant.
    text = html.unescape(doc)
    assert "How much the big model writes</dt><dd>25% of the tokens, asked" in text and "Threshold</dt>" not in text
    assert "you asked for 25%" in text and "For this answer, 25% meant a threshold of" in text
    # The chart draws the threshold the share moved, one step per position, as the engine moved it.
    (line,) = [t for t in chart_figure(doc)["data"] if t.get("meta") == "threshold"]
    assert len(line["y"]) == summary.counts.n_tokens and "moved for a 25% share" in line["name"]


def test_a_stopped_run_is_kept_too():
    config = GenerationConfig(threshold=5.0)
    doc = save(config, CASCADE, None)
    assert sentences.stopped_sentence(CASCADE) in doc
    assert "Measured numbers" not in doc
    record = read_run(doc)
    assert record["summary"] is None and record["events"] == [e.to_dict() for e in CASCADE]


@pytest.mark.parametrize("policy", list(POLICY_TABLE))
def test_every_policy_is_told_in_words(policy):
    config = GenerationConfig(policy=policy, temperature=0.7, seed=3)
    modes = {"speculative k=2": 3} if policy == "auto" else {}
    doc = save(config, CASCADE, recorded_summary(policy=policy, modes=modes))
    assert html.escape(rulewords.policy_label(policy)) in doc
    assert "Seed</dt><dd>3" in doc and "Temperature</dt><dd>0.7" in doc
    if policy == "target":
        assert "The big model wrote this text by itself" in doc
    if policy == "auto":
        assert "speculative k=2: 3" in doc


EVIL = '</script><script>alert(1)</script><b id="evil">'


def test_model_text_and_the_prompt_cannot_break_out_of_the_file():
    events = [ev(0, EVIL, draft_ppl=1.2), ev(1, " & <!-- ", source="target", draft_ppl=9.0, target_ppl=1.5),
              ev(2, "]]> \u2028 </SCRIPT >", draft_ppl=2.0)]
    summary = recorded_summary(text="".join(e.text for e in events), n=3, by_target=1, wall=0.5)
    prompt = f"Say {EVIL} please"
    doc = save(GenerationConfig(stop=(EVIL,)), events, summary, comparison=recorded_summary(text=EVIL, policy="target"),
               prompt=prompt, models={"draft": EVIL, "target": "t.gguf"})
    rest = without_plotly_js(doc)
    assert "<script>alert" not in doc and '<b id="evil">' not in doc and "</SCRIPT >" not in doc
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b id=&quot;evil&quot;&gt;" in rest
    # Exactly cascade's five scripts, none from the text: Plotly's settings, Plotly, the chart, the data,
    # the tokens' hover.
    scripts = Scripts(doc).scripts
    assert [a.get("type") for a, _ in scripts] == [None, None, None, "application/json", None]
    assert "Plotly.newPlot" in scripts[2][1] and scripts[3][0]["id"] == DATA_ID
    assert scripts[4][1] == standalone_hover_js(".cascade-result")
    # The data element holds no markup at all, and is the whole run, as JSON.
    data = scripts[3][1]
    assert not set("<>&") & set(data)
    assert json.loads(data) == read_run(doc)
    assert read_run(doc)["events"] == [e.to_dict() for e in events]
    assert read_run(doc)["prompt"] == prompt and read_run(doc)["models"]["draft"] == EVIL
    assert read_run(doc)["summary"]["text"] == summary.text
    chart_figure(doc)  # the chart's figure is still one JSON value


def test_the_file_asks_for_nothing_from_any_network(toy_run):
    config, events, summary, alone = toy_run
    doc = save(config, events, summary, comparison=alone)
    mine = without_plotly_js(doc)
    assert len(mine) < len(doc) / 10  # Plotly's library is inlined, and was taken out here
    assert not re.search(r"https?:|//[a-z]|\bsrc=|\bhref=|url\(|@import|<link|<img|<iframe", mine, re.I)
    assert "Content-Security-Policy" in doc and "default-src 'none'" in doc


# ---- the command line ------------------------------------------------------------------------------

def test_generate_save_writes_the_run_the_json_lines_describe(toy, tmp_path):
    base = ["generate", "--draft", str(toy.small), "--target", str(toy.related), "--raw", "--max-tokens", "12",
            "--threads", str(TOY_THREADS)]
    saved = cascade(*base, "--save", str(tmp_path / "out.html"), PROMPT)
    assert saved.returncode == 0, saved.stderr
    assert "run saved to" in saved.stderr
    both = cascade(*base, "--json", "--save", str(tmp_path / "both.html"), PROMPT)
    assert both.returncode == 0, both.stderr
    events, summary = json_lines(both.stdout)

    record = read_run((tmp_path / "out.html").read_text(encoding="utf-8"))
    assert record["summary"]["text"] == summary["text"]
    assert record["prompt"] == PROMPT and record["settings"]["max_tokens"] == 12
    assert record["models"] == {"draft": toy.small.name, "target": toy.related.name}  # names, not paths
    assert record["machine"]["threads"] == TOY_THREADS and record["machine"]["cpu"]
    with_json = read_run((tmp_path / "both.html").read_text(encoding="utf-8"))
    # The file's events are the streamed ones, with the big model's lists from the Summary's scoring pass
    # where it read a position only then (as the page keeps them); the terminal's lines stream before it.
    scored = {position: top for position, top in summary["scored_top"]}
    completed = [{**e, "target_top": scored.get(e["position"])} if e["target_top"] is None and e["status"] == "accepted" else e
                 for e in events]
    assert any(e["target_top"] is None for e in events) and any(e != c for e, c in zip(events, completed))
    assert with_json["events"] == completed and with_json["summary"]["text"] == summary["text"]
    assert str(toy.small.parent) not in (tmp_path / "out.html").read_text(encoding="utf-8")


def test_generate_save_into_a_missing_folder_is_a_one_line_error(toy, tmp_path):
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--max-tokens", "2",
                "--save", str(tmp_path / "no" / "such" / "run.html"), PROMPT)
    assert r.returncode == 2 and "folder does not exist" in r.stderr and "Traceback" not in r.stderr


# ---- in a browser, from disk, offline --------------------------------------------------------------

CHART_TRACES = """() => {
  const plot = document.querySelector('.cascade-chart .js-plotly-plot');
  return plot && plot.data ? plot.data.map(t => ({meta: t.meta, n: t.x.length})) : null;
}"""


@pytest.mark.browser
def test_the_saved_file_opens_from_disk_with_the_network_blocked(toy_run, tmp_path, chromium):
    config, events, summary, alone = toy_run
    path = tmp_path / "run.html"
    path.write_text(save(config, events, summary, comparison=alone), encoding="utf-8")
    requests, problems = [], []
    # The module's Chromium, in a context of its own: offline, every request but a file's refused.
    context = chromium.new_context(viewport={"width": 1200, "height": 900})
    try:
        context.set_offline(True)
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                      else route.abort())
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(path.as_uri())
        page.wait_for_function(f"() => ({CHART_TRACES})() !== null", timeout=20_000)

        red = page.evaluate("() => document.querySelectorAll('.cascade-text .tok.red.target').length")
        assert red == len(spans(path.read_text(encoding="utf-8"), "red")) > 0
        assert "written by the big model" in page.get_attribute(".cascade-text .tok.red", "title")
        traces = page.evaluate(CHART_TRACES)
        assert sum(t["n"] for t in traces if t["meta"] == "tokens") == summary.counts.n_tokens
        assert page.is_visible(".cascade-numbers")
        assert f"{summary.tokens_per_s:.1f} tokens/s" in page.inner_text(".cascade-numbers")
        assert page.is_visible(".cascade-comparison")
        record = page.evaluate(
            "() => JSON.parse(document.querySelector('script[type=\"application/json\"]').textContent)")
        assert record["events"] == [e.to_dict() for e in events]
        assert record["summary"] == summary.to_dict()
        # The hover shows both models' likeliest tokens, as on the page; a click forks nothing here.
        page.hover(".cascade-text .tok.red")
        tip = page.locator("body > .cascade-alts")
        tip.wait_for(state="visible", timeout=5_000)
        assert tip.locator(".alts-columns > div").count() == 2 and tip.locator("tr").count() == 10
        # It offers nothing it cannot do: no "Click the token to write on from one of these".
        assert tip.locator(".alts-hint").count() == 0 and "Click" not in tip.inner_text()
        page.click(".cascade-text .tok.red")
        assert tip.locator("tr.choice").count() == 0
        page.mouse.move(0, 0)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "run-file.png"), full_page=True)
    finally:
        context.close()
    assert requests and all(url.startswith("file:") for url in requests), requests
    assert problems == []
