"""The page's API through gradio_client, on the toy models: streaming, comparing, stopping, failing kindly."""

from __future__ import annotations

import inspect
import json
import os
import re
import runpy
import threading
import time
from dataclasses import replace
from html import unescape
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from gradio_client import Client  # noqa: E402

from cascade import GenerationConfig, ModelConfig, ModelError  # noqa: E402
from cascade.engine.config import limits  # noqa: E402
from cascade.engine.config import RouterMissing  # noqa: E402
from cascade.ui.controls import PAGE_START  # noqa: E402
from cascade.engine.events import Summary, TokenEvent  # noqa: E402
from cascade.routing.rules import RULE_TABLE  # noqa: E402
from cascade.serving.settings import model_config  # noqa: E402
from cascade.engine.analysis import Routing  # noqa: E402
from cascade.engine.engine import Engine  # noqa: E402
from cascade.routing.router import FEATURES, Router  # noqa: E402
from cascade.ui.conversation import history_json  # noqa: E402
from cascade.ui.controls import RULE_LABEL  # noqa: E402
from cascade.ui import chart, rulewords, sentences  # noqa: E402
from cascade.ui.generate import (GENERATE_INPUTS, compare_updates, generate_updates, make_generate, request_config,  # noqa: E402
                                  stop)
from cascade.ui.layout import build_demo  # noqa: E402
from cascade.ui.link import make_apply_link, page_defaults, read_link  # noqa: E402
from cascade.ui.run import KEEP, Run, Update, more_markdown, run_update  # noqa: E402
from cascade.ui.runfile import offer_download, read_run  # noqa: E402
from cascade.ui.whatif import rule_changed, whatif  # noqa: E402
from cascade.serving.messages import hide_paths, public_message  # noqa: E402
from cascade.serving.service import EngineService  # noqa: E402

from .helpers import (ROOT, SlowEngine, SlowScoring, engine_for, engine_text, page_inputs, replay,  # noqa: E402
                      serve)

PROMPT = "The cat sat on the mat"


def through_engine(engine, inputs: tuple) -> tuple[list[TokenEvent], Summary]:
    """The events and the Summary the engine gives for these page inputs, mapped as the page maps them."""
    values = dict(zip(GENERATE_INPUTS, inputs))
    prompt, mode = values.pop("prompt"), values.pop("mode")
    *events, summary = engine.generate(prompt, request_config(mode, values))
    assert isinstance(summary, Summary)
    return events, summary


@pytest.fixture(scope="module")
def toy_engine(toy):
    return engine_for(toy.small, toy.related)


@pytest.fixture(scope="module")
def page(toy_engine):
    """The page over the toy engine slowed down, so that a stream lasts long enough to be seen or stopped."""
    demo, url = serve(lambda progress: SlowEngine(toy_engine))
    yield url
    demo.close()


@pytest.fixture(scope="module")
def quick_page(toy_engine):
    """The page over the toy engine at its own speed, for tests that read only what a request ends with."""
    demo, url = serve(lambda progress: toy_engine)
    yield url
    demo.close()


# ---- generating, comparing, stopping ---------------------------------------------------------------

def test_generate_streams_and_ends_with_the_engines_own_text(page, toy_engine):
    inputs = page_inputs()  # 32 tokens, over 50 events: a second of pauses, four updates a second
    job = Client(page, verbose=False).submit(*inputs, api_name="/generate")
    html, plot, summary, text = job.result(timeout=120)
    outputs = job.outputs()
    assert len(outputs) >= 3, "expected several intermediate updates before the final one"
    lengths = [len(o[3]) for o in outputs]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # the text grows as it streams

    _, expected = through_engine(toy_engine, inputs)
    assert text == expected.text
    counts = expected.counts
    assert f"{counts.n_target_tokens} of {counts.n_tokens} tokens" in summary and "This took" in summary
    assert html.count('class="tok red target"') > 0 and plot["type"] == "plotly"


def test_compare_runs_the_big_model_alone_on_the_same_prompt(quick_page, toy_engine):
    client = Client(quick_page, verbose=False)  # one client is one session: compare reads this session's run
    client.predict(*page_inputs(), api_name="/generate")
    html, numbers, *_ = client.predict(api_name="/compare")
    alone = engine_text(toy_engine, page_inputs(policy="target"))
    assert numbers["big_model_alone"]["text"] == alone and numbers["big_model_alone"]["policy"] == "target"
    assert numbers["this_run"]["policy"] == "cascade" and numbers["this_run"]["text"] == engine_text(toy_engine,
                                                                                                     page_inputs())
    this, big = numbers["this_run"], numbers["big_model_alone"]
    # Both speeds as measured, the verdict on them, and who wrote the tokens of each run.
    for measured in (this, big):
        assert f">{measured['tokens_per_s']:.1f} tokens/s<" in html and f">{measured['n_tokens']}<" in html
    ratio = this["tokens_per_s"] / big["tokens_per_s"]
    assert f"{ratio:.2f}×" in html  # the verdict (its words: tests/snapshots/sentences.txt)
    assert f">{this['n_target_tokens']} of {this['n_tokens']}<" in html
    assert f">{big['n_tokens']} of {big['n_tokens']}<" in html
    # Where the texts differ: struck through, only in this run; underlined, only in the big model's.
    diff = re.search(r'<div class="cascade-diff"[^>]*>(.*?)</div>', html, re.S)
    if this["text"] == big["text"]:
        assert "<b>identical</b>" in html and diff is None
    else:
        changed = re.search(r"\((\d+) words? changed\)", html)
        assert changed and int(changed.group(1)) > 0 and diff, "the comparison does not show where the texts differ"
        assert unescape(re.sub(r"<ins[^>]*>.*?</ins>|<[^>]+>", "", diff.group(1), flags=re.S)) == this["text"]
        assert unescape(re.sub(r"<del[^>]*>.*?</del>|<[^>]+>", "", diff.group(1), flags=re.S)) == big["text"]


def test_compare_draws_each_rules_curve_from_the_big_models_text(quick_page, toy_engine):
    client = Client(quick_page, verbose=False)
    client.predict(*page_inputs(), api_name="/generate")
    html, numbers, rules_text, rules_chart, summary = client.predict(api_name="/compare")
    assert set(numbers["rules"]) == {"perplexity", "entropy", "margin"}  # no router on this page: no learned curve
    figure = json.loads(rules_chart["plot"])
    curves = [t for t in figure["data"] if t["meta"] == "curve"]
    assert [t["name"] for t in curves] == ["the perplexity rule", "the entropy rule", "the margin rule"]
    for trace in curves:
        assert trace["x"][0] == 0 and trace["x"][-1] == 100 and trace["y"] == sorted(trace["y"])
    (point,) = [t for t in figure["data"] if t["meta"] == "run"]
    this_run = numbers["this_run"]
    assert point["x"] == [pytest.approx(100 * this_run["target_share"], abs=1e-3)]
    assert point["y"] == [pytest.approx(100 * this_run["target_agreement"], abs=1e-3)]
    assert "95%" in rules_text and all(f"the {rule} rule" in rules_text for rule in ("perplexity", "entropy", "margin"))
    assert f"{this_run['n_target_tokens']} of {this_run['n_tokens']} tokens" in first_line(summary)
    assert "(measured just now)" in first_line(summary)  # the summary, compared


def test_the_rules_curves_with_a_router_and_the_machines_break_even(toy_engine):
    # An engine of its own over the same models: a toy router, and auto's costs measured as at loading.
    engine = Engine(toy_engine.pair, router=toy_router())
    engine.calibrate()
    assert engine.break_even_share(32) is not None
    *_, (_, _, summary, _, run, _) = make_generate(lambda progress: engine)(*page_inputs())
    *_, last = compare_updates(lambda progress: engine, run, progress=lambda *a, **k: None)
    break_even = last.run.break_even  # at the costs measured last (every run teaches them)
    assert set(last.numbers["rules"]) == set(RULE_TABLE) and last.numbers["break_even_share"] == break_even
    assert last.run.comparison_tokens and break_even is not None
    assert len(last.run.comparison_tokens) == last.run.comparison.counts.n_tokens
    traces = last.rules_chart.data
    assert [t.meta for t in traces].count("curve") == 4 and "the learned router" in {t.name for t in traces}
    (line,) = [t for t in traces if t.meta == "break_even"]
    assert line.name == chart.BREAK_EVEN_NAME
    assert line.x[0] == pytest.approx(100 * min(max(break_even, 0.0), 1.0), abs=1e-3)
    assert "the learned router" in last.rules_text
    # The sentence says what the break-even measured here says: on toy models under load, the target
    # alone can come out as fast as sharing (0), and then sharing never pays.
    assert says_where_sharing_pays(last.rules_text, break_even), (break_even, last.rules_text)
    # The summary as it was, but the big model alone's time now measured, not estimated.
    assert sentences.break_even_sentence(last.run.summary, break_even) in more_markdown(last.run)
    assert first_line(last).startswith(first_line(summary).split(" This took")[0])
    assert "(measured just now)" in last.summary.split("  \n")[0] and "estimated" not in last.summary


def says_where_sharing_pays(text: str, break_even: float) -> bool:
    """Whether `text` says where sharing pays as the break-even share `break_even` has it."""
    if break_even <= 0:
        return "sharing never pays" in text
    if break_even >= 1:
        return "sharing pays at any share" in text
    below = re.search(r"sharing pays only below (under 1|\d+)%", text)
    if below is None:
        return False
    return break_even < 0.005 if below[1] == "under 1" else abs(int(below[1]) - 100 * break_even) <= 0.5


def test_compare_before_any_run_says_what_to_do(page):
    html, numbers, *_ = Client(page, verbose=False).predict(api_name="/compare")
    assert "Generate a text first" in html and numbers is None


def test_stop_leaves_the_models_ready_for_the_next_request(page, toy_engine, monkeypatch):
    endings = []  # for each generation the page ran: whether it ran to its end
    generate = SlowEngine.generate

    def watched(self, prompt, config, **options):
        finished = False
        try:
            yield from generate(self, prompt, config, **options)
            finished = True
        finally:
            endings.append(finished)

    monkeypatch.setattr(SlowEngine, "generate", watched)
    client = Client(page, verbose=False)
    job = client.submit(*page_inputs(max_tokens=400), api_name="/generate")
    deadline = time.monotonic() + 60
    while not job.outputs() and time.monotonic() < deadline:
        time.sleep(0.05)
    job.cancel()
    short = page_inputs(max_tokens=8)  # the next request: what it writes, not its length, is the check
    _, _, _, text = client.predict(*short, api_name="/generate")
    assert text == engine_text(toy_engine, short)
    assert endings == [False, True], "the stopped generation was not closed before its end"


def refusal(**settings) -> str:
    """What the config says of these settings (the page shows it as it is: its words are the config's)."""
    with pytest.raises(ValueError) as refused:
        GenerationConfig(**settings).validate()
    return f"{refused.value}."


def test_settings_out_of_range_are_answered_in_words(page):
    # The page passes every value to GenerationConfig, which names the setting and its range; the answer
    # is the page's own, in the text's place and in the summary, not a Gradio error.
    html, plot, summary, text = Client(page, verbose=False).predict(*page_inputs(k=0), api_name="/generate")
    for shown in (html, summary):
        assert refusal(k=0) in shown
    assert plot is None and text == ""


# ---- the endpoint and the handlers -------------------------------------------------------------------

def test_the_generate_endpoint_takes_the_settings_in_the_order_the_handler_reads_them(page):
    parameters = Client(page, verbose=False).view_api(print_info=False, return_format="dict")[
        "named_endpoints"]["/generate"]["parameters"]
    assert [p["parameter_name"] for p in parameters] == list(GENERATE_INPUTS)
    assert list(inspect.signature(make_generate(None)).parameters)[:len(GENERATE_INPUTS)] == list(GENERATE_INPUTS)
    # Each input is the control of its setting: it starts at that setting's default (the command line's too);
    # the threshold at the default rule's own default.
    defaults = {p["parameter_name"]: p["parameter_default"] for p in parameters}
    for name in GENERATE_INPUTS[2:]:
        if name == "history":  # the hidden field holds the earlier turns as JSON text: none is ""
            assert defaults[name] == history_json(GenerationConfig().history) == "", name
            continue
        assert defaults[name] == getattr(PAGE_START, name), name
        if name not in ("threshold", "budget"):  # the page starts at a 10% share by perplexity; the library at
            assert defaults[name] == limits(GenerationConfig, name)["default"], name  # perplexity 5, no share
    assert (defaults["rule"], defaults["threshold"], defaults["budget"]) == (
        PAGE_START.rule, PAGE_START.threshold, PAGE_START.budget) == ("perplexity", 5.0, 0.1)
    assert GENERATE_INPUTS.index("rule") == GENERATE_INPUTS.index("policy") + 1
    assert GENERATE_INPUTS.index("budget") == GENERATE_INPUTS.index("threshold") + 1
    assert defaults["mode"] == "chat" and GenerationConfig().chat


def test_an_update_leaves_the_outputs_it_does_not_name_as_they_are():
    update = Update(summary="**done**", chart=None)
    assert update.values(("text_html", "chart", "summary", "run")) == (gr.skip(), None, "**done**", gr.skip())
    assert Update().values(("text_html", "chart")) == (gr.skip(), gr.skip())


def test_the_what_if_handler_recolours_a_finished_run_and_leaves_a_running_one_alone(toy_engine):
    inputs = page_inputs()
    config = request_config("raw", dict(zip(GENERATE_INPUTS[2:], inputs[2:])))
    events, summary = through_engine(toy_engine, inputs)
    finished = Run(PROMPT, config, tuple(events), summary, running=False)
    html, figure = whatif(50.0, finished)
    assert 'data-view="whatif"' in html and any("what-if" in t.get("name", "") for t in json.loads(figure.plot)["data"])
    running = Run(PROMPT, config, tuple(events))
    assert whatif(50.0, running) == (gr.skip(), gr.skip())
    assert whatif(50.0, None) == (gr.skip(), gr.skip())


def test_stop_keeps_what_was_streamed_as_a_finished_run(toy_engine):
    events, _ = through_engine(toy_engine, page_inputs())
    running = Run(PROMPT, GenerationConfig(chat=False), tuple(events[:5]))
    stopped, summary, compare_html, numbers = stop(running)
    assert stopped == Run(PROMPT, GenerationConfig(chat=False), tuple(events[:5]), running=False)
    assert summary.startswith("**Stopped after ")
    assert compare_html == gr.skip()  # no comparison was running: one shown stays
    assert stop(stopped) == (gr.skip(),) * 4 and stop(None) == (gr.skip(),) * 4
    download = offer_download(stopped)  # a stopped run can be kept too
    assert download["visible"] is True and read_run(Path(download["value"]).read_text())["summary"] is None


def test_a_finished_run_is_offered_as_a_file_that_holds_it(toy_engine):
    events, summary = through_engine(toy_engine, page_inputs())
    finished = Run(PROMPT, GenerationConfig(chat=False), tuple(events), summary, running=False)
    download = offer_download(finished)
    assert download["visible"] is True
    assert read_run(Path(download["value"]).read_text())["summary"]["text"] == summary.text
    hidden = offer_download(None)
    assert hidden["visible"] is False


# ---- the summary in plain words; the answer finished before the big model scores it ------------------

def page_updates(engine, seen=lambda update: None, **changes) -> list[Update]:
    """The generate handler's updates for the page's defaults with `changes` (16 tokens, perplexity 5);
    `seen` is called with each as it comes."""
    inputs = dict(zip(GENERATE_INPUTS, page_inputs(**{"max_tokens": 16, "rule": "perplexity", "threshold": 5.0,
                                                     **changes})))
    prompt, mode = inputs.pop("prompt"), inputs.pop("mode")
    updates = []
    for update in generate_updates(lambda progress: engine, prompt, mode, inputs, lambda *a, **k: None):
        if update.text_html is KEEP:  # the first step, before the engine, that lets Gradio cancel the handler
            continue
        updates.append(update)
        seen(update)
    return updates


def first_line(shown: Update | str) -> str:
    """The summary's first line (an update's, or the summary as the endpoint returns it)."""
    return (shown if isinstance(shown, str) else shown.summary).split("  \n")[0]


def seconds(x: float) -> str:
    """A time as the summary writes it."""
    return f"{x:.2f} s" if x < 1 else f"{x:.1f} s"


def test_the_answer_is_marked_finished_before_the_big_model_scores_it(toy_engine):
    # The big model's scoring lasts until the page has shown the answer finished (a minute at most).
    shown_finished = threading.Event()
    updates = page_updates(SlowScoring(toy_engine, gate=shown_finished),
                           seen=lambda u: u.run is not None and u.run.scoring and shown_finished.set())
    # The order: the text written, then the answer finished while the big model scores it, then the scores.
    steps = ["writing" if u.run.running and u.run.summary is None else "scoring" if u.run.scoring else "final"
             for u in updates]
    assert steps == sorted(steps, key=["writing", "scoring", "final"].index) and steps.count("scoring") == 1
    finished, final = updates[steps.index("scoring")], updates[-1]
    assert steps[-1] == "final" and not final.run.running
    # Finished: the whole text, its time, and the scoring as a step of its own; no scores (or speed) yet.
    assert finished.plain_text == final.plain_text and finished.run.summary.timings == final.run.summary.timings
    assert "Writing" not in finished.summary and "This took" in finished.summary
    assert finished.summary.endswith(f"*{sentences.SCORING_STEP}*")
    assert "tokens/s" not in finished.summary and finished.run.summary.quality is None
    # Then the scores, with the scoring's own time, and the speed saying what it counts: in the fold under the
    # first line, which is all the summary says.
    summary, more = final.run.summary, more_markdown(final.run)
    assert summary.quality is not None and summary.quality.scoring_s > 0
    assert sentences.SCORING_STEP not in final.summary and final.summary == first_line(final)
    assert sentences.scoring_sentence(summary) in more
    assert sentences.speed_sentence(summary) in more and sentences.timing_sentence(summary) in more


def test_the_summary_begins_with_who_wrote_how_much_and_the_big_model_alones_estimated_time(toy_engine):
    final = page_updates(SlowScoring(toy_engine, pause_s=0, estimate=9.3))[-1]
    counts, took = final.run.summary.counts, final.run.summary.timings.wall_s
    n, t = counts.n_tokens, counts.n_target_tokens
    assert 0 < t < n, "the toy pair at threshold 5 gives the big model some tokens, not all"
    assert first_line(final) == f"**{sentences.summary_sentence(final.run.summary, 9.3)}**"
    assert f"{t} of {n}" in first_line(final) and seconds(took) in first_line(final) and "9.3 s" in first_line(final)
    assert final.run.alone_estimate_s == 9.3
    # Nothing measured yet: nothing guessed.
    unknown = page_updates(SlowScoring(toy_engine, pause_s=0, estimate=None))[-1]
    assert first_line(unknown) == f"**{sentences.summary_sentence(unknown.run.summary)}**"


def test_the_summary_says_plainly_when_one_model_wrote_it_all(toy_engine):
    alone = page_updates(SlowScoring(toy_engine, pause_s=0), threshold=1e6)[-1]  # never unsure enough
    n = alone.run.summary.counts.n_tokens
    assert alone.run.summary.counts.n_target_tokens == 0 and n > 0
    assert first_line(alone) == f"**{sentences.summary_sentence(alone.run.summary)}**"
    target = page_updates(SlowScoring(toy_engine, pause_s=0, estimate=1.0), policy="target")[-1]
    assert first_line(target) == f"**{sentences.summary_sentence(target.run.summary, 1.0)}**"
    assert "would take" not in target.summary  # no estimate of itself


def test_after_compare_the_summary_gives_the_big_model_alones_measured_time(toy_engine):
    run = page_updates(SlowScoring(toy_engine, pause_s=0, estimate=9.3))[-1].run
    assert "estimated" in run_update(run).summary
    updates = [u for u in compare_updates(lambda progress: toy_engine, run, lambda *a, **k: None)
               if u.summary is not KEEP]
    alone = updates[-1].run.comparison
    for update in (updates[0], updates[-1]):  # at once, then with the rules' curves
        assert f"alone took {seconds(alone.timings.wall_s)}" in first_line(update)
        assert "(measured just now)" in first_line(update) and "estimated" not in update.summary


# ---- the rule: how the small model judges its own token -----------------------------------------

def toy_router(pair: str = "toy-small.gguf → toy-related.gguf") -> Router:
    """A router that reads only the entropy: P(the big model differs) = logistic(entropy - 1.5)."""
    coef = np.zeros(len(FEATURES))
    coef[FEATURES.index("entropy")] = 1.0
    draft, target = pair.split(" → ")
    return Router(FEATURES, mean=np.zeros(len(FEATURES)), scale=np.ones(len(FEATURES)), coef=coef, intercept=-1.5,
                  pair={"draft": draft, "target": target})


def finished_run(engine, **changes) -> Run:
    inputs = page_inputs(**changes)
    config = request_config("raw", dict(zip(GENERATE_INPUTS[2:], inputs[2:])))
    events, summary = through_engine(engine, inputs)
    return Run(PROMPT, config, tuple(events), summary, running=False)


def test_the_generate_endpoint_takes_the_rule_and_judges_the_threshold_in_its_units(quick_page, toy_engine):
    client = Client(quick_page, verbose=False)
    inputs = page_inputs(rule="entropy", threshold=1.5)
    html, plot, summary, text = client.predict(*inputs, api_name="/generate")
    _, expected = through_engine(toy_engine, inputs)
    assert expected.rule == "entropy" and text == expected.text
    assert "entropy rule" in more_markdown(Run(PROMPT, GenerationConfig(), summary=expected, running=False))
    figure = json.loads(plot["plot"])
    assert "entropy" in figure["layout"]["yaxis"]["title"]["text"] and figure["layout"]["yaxis"]["type"] == "linear"
    assert 'data-rule="entropy"' in html

    html, plot, summary, text = client.predict(*page_inputs(rule="margin", threshold=5), api_name="/generate")
    for shown in (html, summary):
        assert refusal(rule="margin", threshold=5) in shown
    assert plot is None and text == ""
    _, _, summary, _ = client.predict(*page_inputs(rule="no-such-rule"), api_name="/generate")
    assert "unknown rule 'no-such-rule'" in summary


def test_the_learned_rule_needs_a_router_and_runs_with_one(toy_engine):
    generate = make_generate(lambda progress: toy_engine)  # the toy engine has no router
    *_, (html, _, summary, text, run, _) = generate(*page_inputs(rule="learned", threshold=0.5))
    assert str(RouterMissing()) in summary and run is None

    routed = Engine(toy_engine.pair, router=toy_router())
    *_, (html, _, summary, text, run, _) = make_generate(lambda progress: routed)(*page_inputs(rule="learned",
                                                                                          threshold=0.5))
    assert run.summary.rule == "learned" and "learned router" in more_markdown(run)
    scores = [s.score("learned") for s in Routing(run.events).slots]
    assert all(0 < x < 1 for x in scores if x is not None) and any(x is not None for x in scores)


def test_changing_the_rule_gives_the_slider_that_rules_range_label_and_default(toy_engine):
    for name, (lo, hi, value) in {"entropy": (0, 12, RULE_TABLE["entropy"].default), "margin": (0, 1, RULE_TABLE["margin"].default),
                                  "learned": (0, 1, RULE_TABLE["learned"].default),
                                  "perplexity": (1, 100, 5.0)}.items():
        info, slider, html, chart = rule_changed(name, None)
        assert (slider["minimum"], slider["maximum"], slider["value"]) == (lo, hi, value), name
        assert slider["step"] == rulewords.WORDS[name].step and name in slider["label"].lower()
        assert info["info"] and (html, chart) == (gr.skip(), gr.skip())  # no run: nothing to re-colour
    assert rule_changed("entropy", None)[1]["label"] == "Threshold (entropy, nats)"
    assert "a.gguf → b.gguf" in rule_changed("learned", None, "a.gguf → b.gguf")[0]["info"]
    assert "BELOW" in rule_changed("margin", None)[0]["info"]
    # Back to the run's own rule, the slider returns to the run's threshold: the page shows the run again.
    run = finished_run(toy_engine, threshold=3.0)
    assert rule_changed("perplexity", run)[1]["value"] == 3.0
    assert 'data-view="run"' in rule_changed("perplexity", run)[2]


def test_another_rule_recolours_a_finished_run_as_a_what_if(toy_engine):
    run = finished_run(toy_engine, rule="perplexity", threshold=5.0)  # cascade by the perplexity rule, threshold 5
    routing = Routing(run.events)
    for name in ("entropy", "margin"):
        threshold = RULE_TABLE[name].default
        _, _, html, plot = rule_changed(name, run)
        traces = json.loads(plot.plot)["data"]
        would, scored, total = routing.at_threshold(threshold, name).counts
        assert 'data-view="whatif"' in html and f'data-rule="{name}"' in html
        assert html.count('class="tok red whatif-target"') == would
        assert f"{would} of {scored} tokens" in html and f"{run.summary.counts.n_target_tokens} of {total}" in html
        plotted = {x: y for t in traces if t.get("meta") == "tokens" for x, y in zip(t["x"], t["y"])}
        assert plotted == pytest.approx({s.token.position: s.score(name) for s in routing.slots
                                         if s.score(name) is not None})
        assert [t["y"][0] for t in traces if t.get("meta") == "threshold"] == [threshold]  # no line in other units
        # Moving the slider under that rule is a what-if by it too.
        other = RULE_TABLE[name].default / 2
        html, _ = whatif(other, run, name)
        assert html.count('class="tok red whatif-target"') == routing.at_threshold(other, name).counts[0]
    # A rule whose numbers the run lacks (learned, without a router) shows the run and says why.
    html, figure = whatif(0.5, run, "learned")
    assert 'data-view="run"' in html and "No what-if" in html


def test_the_rule_dropdown_offers_the_learned_rule_only_with_a_router():
    def rule_control(demo):
        return next(b for b in demo.blocks.values() if getattr(b, "label", None) == RULE_LABEL)

    without = rule_control(build_demo(lambda progress: None))
    assert [v for _, v in without.choices] == ["perplexity", "entropy", "margin"] and without.value == PAGE_START.rule
    router = toy_router("d.gguf → t.gguf")
    routed = build_demo(lambda progress: None, router=lambda: router)
    with_router = rule_control(routed)
    assert [v for _, v in with_router.choices] == list(RULE_TABLE)
    # With a router the page still starts by perplexity (the chart it was asked for); the router is one choice away.
    assert with_router.value == "perplexity"

    class Request:  # what Gradio passes on load
        def __init__(self, **query):
            self.query_params = query

    rule_index, threshold_index = GENERATE_INPUTS.index("rule"), GENERATE_INPUTS.index("threshold")
    loaded = make_apply_link(lambda: router)(Request(rule="learned"))
    assert loaded[rule_index]["value"] == "learned" and "d.gguf → t.gguf" in loaded[rule_index]["info"]
    assert loaded[threshold_index]["value"] == RULE_TABLE["learned"].default and loaded[threshold_index]["label"] == "Threshold (learned, probability)"
    refused = make_apply_link(lambda: None)(Request(rule="learned"))
    assert refused[rule_index]["value"] == PAGE_START.rule and "not offered" in refused[len(GENERATE_INPUTS)]
    assert [v for _, v in refused[rule_index]["choices"]] == ["perplexity", "entropy", "margin"]
    # A link that names no rule opens at the page's start, router or not.
    for source in (lambda: router, lambda: None):
        opened = make_apply_link(source)(Request(budget="0.2"))
        assert opened[rule_index]["value"] == PAGE_START.rule and opened[threshold_index]["value"] == PAGE_START.threshold
        assert opened[GENERATE_INPUTS.index("budget")]["value"] == 0.2


def test_a_null_threshold_is_the_rules_own_default():
    settings = dict(zip(GENERATE_INPUTS[2:], page_inputs(threshold=None)[2:]))
    assert request_config("raw", settings).threshold == 5.0
    assert request_config("raw", {**settings, "rule": "margin"}).threshold == RULE_TABLE["margin"].default


def test_a_link_names_the_rule_and_a_threshold_in_its_units():
    assert read_link({"rule": "margin"}).values == {"rule": "margin", "threshold": RULE_TABLE["margin"].default}
    # A threshold with no budget: the threshold decides (a link made for one, or before the page had budgets).
    assert read_link({"threshold": "0.2", "rule": "margin", "k": "2"}).values == {"rule": "margin", "threshold": 0.2,
                                                                                  "k": 2, "budget": None}
    wrong = read_link({"rule": "entropy", "threshold": "50"})  # still a threshold's link: at the rule's default
    assert wrong.values == {"rule": "entropy", "threshold": RULE_TABLE["entropy"].default, "budget": None}
    assert "threshold" in wrong.message() and "0 and 12" in wrong.message()


# ---- a share of the tokens (a budget): the page's start ---------------------------------------------

def test_the_share_reaches_the_request_and_the_summary_names_the_threshold_it_meant(quick_page, toy_engine):
    client = Client(quick_page, verbose=False)
    inputs = page_inputs(budget=0.3)
    html, plot, summary, text = client.predict(*inputs, api_name="/generate")
    _, expected = through_engine(toy_engine, inputs)
    assert text == expected.text and expected.budget.share == 0.3 and expected.budget.threshold is not None
    share = f"{100 * expected.counts.n_target_tokens / expected.counts.n_tokens:.0f}%"
    assert f"{expected.counts.n_target_tokens} of {expected.counts.n_tokens}" in first_line(summary)
    assert share in first_line(summary) and "30%" in first_line(summary)
    # The threshold it meant and what it started from, in the fold under the first line.
    *_, (_, _, _, _, run, _) = make_generate(lambda progress: toy_engine)(*inputs)
    assert run.summary.text == expected.text and sentences.budget_sentence(run.summary) in more_markdown(run)
    assert f"(its starting point: {expected.budget.source})" in more_markdown(run)
    # A threshold decides alone ("Set a threshold instead"): no share asked, none said.
    _, _, summary, _ = client.predict(*page_inputs(rule="margin", threshold=0.1), api_name="/generate")
    assert "30%" not in summary and "meant a threshold" not in summary
    _, _, summary, _ = client.predict(*page_inputs(budget=2), api_name="/generate")
    assert refusal(budget=2) in summary


def test_moving_the_share_after_a_run_recolours_it_by_the_thresholds_that_share_would_have_set(toy_engine):
    run = replace(finished_run(toy_engine, budget=0.1, max_tokens=64), draft_path=str(toy_engine.pair.draft_path))
    real = run.summary.counts.n_target_tokens
    # At the run's own share, the run as it happened: the replay meets the engine's thresholds position by position.
    html, _ = whatif(run.config.threshold, run, "margin", 0.1)
    assert 'data-view="run"' in html and html.count('class="tok red target"') == real
    scores = [s.score("margin") for s in Routing(run.events).slots]
    red = {}
    for share in (0.02, 0.5):
        html, plot = whatif(run.config.threshold, run, "margin", share)
        red[share] = sum(replay("margin", share, scores, run.prior("margin")))
        assert 'data-view="whatif"' in html and html.count('class="tok red whatif-target"') == red[share]
        assert f"{red[share]} of {len(scores)} tokens" in html and f"{real} of" in html
        lines = [t for t in json.loads(plot.plot)["data"] if t.get("meta") == "threshold"]
        # The what-if's threshold and the run's, each as it moved.
        assert [len(t["y"]) for t in lines] == [len(scores)] * 2
    assert red[0.02] < real < red[0.5]
    # Another rule at the same share: re-judged by its numbers.
    _, _, html, _ = rule_changed("entropy", run, None, 0.5)
    assert 'data-rule="entropy"' in html and html.count('class="tok red whatif-target"') == sum(
        replay("entropy", 0.5, [s.score("entropy") for s in Routing(run.events).slots], run.prior("entropy")))
    # "Set a threshold instead" (no budget): a what-if at the threshold, as before.
    html, _ = whatif(0.3, run, "margin", None)
    assert html.count('class="tok red whatif-target"') == Routing(run.events).at_threshold(0.3, "margin").counts[0]
    assert "0.3" in unescape(html) and "10%" in unescape(html)


class LinkRequest:  # what Gradio passes on load
    def __init__(self, **query):
        self.query_params = query


def test_a_link_sets_the_share_and_one_with_a_threshold_alone_decides_by_it():
    assert page_defaults()["budget"] == PAGE_START.budget == 0.1
    assert read_link({"budget": "0.25"}).values == {"budget": 0.25}
    assert read_link({"rule": "entropy", "threshold": "1.5", "budget": "0.05"}).values == {
        "rule": "entropy", "threshold": 1.5, "budget": 0.05}
    # A link made before the page had shares, or with "Set a threshold instead": its threshold decides.
    assert read_link({"threshold": "3"}).values == {"rule": "perplexity", "threshold": 3.0, "budget": None}
    wrong = read_link({"budget": "2"})
    assert "budget" not in wrong.values and refusal(budget=2).rstrip(".") in wrong.message()
    budget = GENERATE_INPUTS.index("budget")
    assert make_apply_link()(LinkRequest(budget="0.25"))[budget]["value"] == 0.25
    assert make_apply_link()(LinkRequest(threshold="3"))[budget]["value"] is None
    assert make_apply_link()(LinkRequest(k="2"))[budget] == gr.skip()  # the page's start stands


# ---- the models: loading, failing, choosing ------------------------------------------------------

def test_an_unreachable_hub_is_a_friendly_message_without_paths(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    service = EngineService(ModelConfig(draft="cascade-tests/no-such-repo/small.gguf",
                                        target="cascade-tests/no-such-repo/large.gguf", n_threads=2))
    demo, url = serve(service.engine)
    try:
        html, plot, summary, text = Client(url, verbose=False).predict(*page_inputs(), api_name="/generate")
    finally:
        demo.close()
    for shown in (html, summary):
        assert "could not be loaded" in shown and "CASCADE_DRAFT" in shown and "CASCADE_TARGET" in shown
        assert "Traceback" not in shown and str(tmp_path) not in shown
    assert not service.loaded and text == ""


def test_model_errors_never_show_a_path_of_this_machine():
    message = public_message(ModelError("draft model file not found: /srv/secret/models/small.gguf"))
    assert "/srv" not in message and "small.gguf" in message and "CASCADE_DRAFT" in message
    url = "see https://huggingface.co/Qwen/Qwen2.5/x.gguf"
    assert hide_paths(url) == url
    assert hide_paths("cannot read '/root/.cache/hub/x.gguf'") == "cannot read 'x.gguf'"


def test_the_models_load_once_and_only_when_first_needed():
    loads = []
    service = EngineService(ModelConfig(draft="d.gguf", target="t.gguf"),
                            loader=lambda config, progress: loads.append(config) or SimpleNamespace(
                                draft_path=Path(config.draft)), warm=lambda e: None)
    assert not service.loaded and "d.gguf" in service.describe()
    first, second = service.engine(), service.engine()
    assert first is second and len(loads) == 1


def test_flags_win_over_the_environment_which_wins_over_the_defaults():
    env = {"CASCADE_DRAFT": "env/draft/d.gguf", "CASCADE_THREADS": "3", "CASCADE_N_CTX": "  "}
    config = model_config({"target": "flag.gguf", "draft": None}, env=env)  # None: a flag left unset
    assert (config.draft, config.target, config.n_threads) == ("env/draft/d.gguf", "flag.gguf", 3)
    assert config.n_ctx == ModelConfig().n_ctx  # a blank variable is an unset one
    assert model_config(env={}).draft == ModelConfig().draft
    with pytest.raises(ValueError, match="CASCADE_THREADS.*'many'"):
        model_config(env={"CASCADE_THREADS": "many"})


def test_importing_the_app_loads_no_model(monkeypatch):
    """app.py's module code, run afresh in this process (a fresh interpreter runs it in test_page_faults)."""
    monkeypatch.setenv("CASCADE_DRAFT", "/nonexistent/d.gguf")
    app = runpy.run_path(str(ROOT / "app.py"), run_name="app_imported")
    assert not app["service"].loaded and app["demo"] is not None
