"""The page's API through gradio_client, on the toy models: streaming, comparing, stopping, failing kindly."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from gradio_client import Client  # noqa: E402

from cascade import GenerationConfig, ModelConfig, ModelError  # noqa: E402
from cascade.config import limits  # noqa: E402
from cascade.events import Summary, TokenEvent  # noqa: E402
from cascade.settings import model_config  # noqa: E402
from cascade.ui.handlers import (GENERATE_INPUTS, Run, Update, make_generate, offer_download, request_config,  # noqa: E402
                                  stop, whatif)
from cascade.ui.runfile import read_run  # noqa: E402
from cascade.ui.service import EngineService, hide_paths, public_message  # noqa: E402

from .helpers import ROOT, SlowEngine, engine_for, engine_text, page_inputs, serve  # noqa: E402

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
    demo, url = serve(lambda progress: SlowEngine(toy_engine))
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
    assert f"{expected.n_target_tokens} of {expected.n_tokens} tokens" in summary and "tokens/s" in summary
    assert html.count('class="tok red target"') > 0 and plot["type"] == "plotly"


def test_compare_runs_the_big_model_alone_on_the_same_prompt(page, toy_engine):
    client = Client(page, verbose=False)  # one client is one session: compare reads this session's run
    client.predict(*page_inputs(), api_name="/generate")
    html, numbers = client.predict(api_name="/compare")
    alone = engine_text(toy_engine, page_inputs(policy="target"))
    assert numbers["big_model_alone"]["text"] == alone and numbers["big_model_alone"]["policy"] == "target"
    assert numbers["this_run"]["policy"] == "cascade" and numbers["this_run"]["text"] == engine_text(toy_engine,
                                                                                                     page_inputs())
    assert "big model alone" in html and html.count("tokens/s") >= 2
    assert "identical" in html or 'class="diff-' in html


def test_compare_before_any_run_says_what_to_do(page):
    html, numbers = Client(page, verbose=False).predict(api_name="/compare")
    assert "Generate a text first" in html and numbers is None


def test_stop_leaves_the_models_ready_for_the_next_request(page, toy_engine):
    long = page_inputs(max_tokens=400)
    full_run_s = SlowEngine(None).pause_s * len(through_engine(toy_engine, long)[0])  # the pauses alone
    client = Client(page, verbose=False)
    started = time.monotonic()
    job = client.submit(*long, api_name="/generate")
    deadline = time.monotonic() + 60
    while not job.outputs() and time.monotonic() < deadline:
        time.sleep(0.05)
    job.cancel()
    _, _, _, text = client.predict(*page_inputs(), api_name="/generate")
    assert text == engine_text(toy_engine, page_inputs())
    assert time.monotonic() - started < full_run_s / 2, "the stopped generation seems to have run to its end"


def test_settings_out_of_range_are_answered_in_words(page):
    # The page passes every value to GenerationConfig, which names the setting and its range; the answer
    # is the page's own, in the text's place and in the summary, not a Gradio error.
    html, plot, summary, text = Client(page, verbose=False).predict(*page_inputs(k=0), api_name="/generate")
    for shown in (html, summary):
        assert "Please check the settings: k must be between 1 and 32, got 0." in shown
    assert plot is None and text == ""


# ---- the endpoint and the handlers -------------------------------------------------------------------

def test_the_generate_endpoint_takes_the_settings_in_the_order_the_handler_reads_them(page):
    parameters = Client(page, verbose=False).view_api(print_info=False, return_format="dict")[
        "named_endpoints"]["/generate"]["parameters"]
    assert [p["parameter_name"] for p in parameters] == list(GENERATE_INPUTS)
    assert list(inspect.signature(make_generate(None)).parameters)[:len(GENERATE_INPUTS)] == list(GENERATE_INPUTS)
    # Each input is the control of its setting: it starts at that setting's default (the command line's too).
    defaults = {p["parameter_name"]: p["parameter_default"] for p in parameters}
    for name in GENERATE_INPUTS[2:]:
        assert defaults[name] == limits(GenerationConfig, name)["default"], name
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
    assert 'data-view="whatif"' in html and any("what-if" in (t.name or "") for t in figure.data)
    running = Run(PROMPT, config, tuple(events))
    assert whatif(50.0, running) == (gr.skip(), gr.skip())
    assert whatif(50.0, None) == (gr.skip(), gr.skip())


def test_stop_keeps_what_was_streamed_as_a_finished_run(toy_engine):
    events, _ = through_engine(toy_engine, page_inputs())
    running = Run(PROMPT, GenerationConfig(chat=False), tuple(events[:5]))
    stopped, summary = stop(running)
    assert stopped == Run(PROMPT, GenerationConfig(chat=False), tuple(events[:5]), running=False)
    assert summary.startswith("**Stopped after ")
    assert stop(stopped) == (gr.skip(),) * 2 and stop(None) == (gr.skip(),) * 2
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
                            loader=lambda config, progress: loads.append(config) or object(), warm=lambda e: None)
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


def test_importing_the_app_loads_no_model():
    code = "import app; assert not app.service.loaded and app.demo is not None"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CASCADE_DRAFT": "/nonexistent/d.gguf", "GRADIO_ANALYTICS_ENABLED": "False"})
    assert r.returncode == 0, r.stderr


# ---- the real pair ---------------------------------------------------------------------------------

@pytest.mark.real
def test_the_page_streams_at_the_engines_own_speed(real_pair):
    """Page vs engine on the real pair, the same request: straight through the engine (its Summary's
    tokens/s) and end to end through the page (gradio_client, from submit to the last update), in
    alternating order, compared round by round so that drifts in the machine's speed cancel out.
    Run with -s to see the numbers."""
    engine = engine_for(*real_pair)
    demo, url = serve(lambda progress: engine)
    inputs = page_inputs(prompt="Explain to a ten-year-old why the sky is blue.", mode="chat", max_tokens=64)
    client = Client(url, verbose=False)

    def by_engine() -> tuple[float, str]:
        summary = through_engine(engine, inputs)[1]
        return summary.tokens_per_s, summary.text

    def by_page() -> tuple[float, str]:
        started = time.perf_counter()
        _, _, page_summary, text = client.predict(*inputs, api_name="/generate")
        n_tokens = int(re.search(r"of (\d+) tokens", page_summary).group(1))
        return n_tokens / (time.perf_counter() - started), text

    try:
        by_engine(), by_page()  # warm-up: weights paged in, every code path run once
        rounds = []
        for i in range(4):
            first, second = (by_engine, by_page) if i % 2 == 0 else (by_page, by_engine)
            a, b = first(), second()
            (engine_speed, engine_text_), (page_speed, page_text) = (a, b) if i % 2 == 0 else (b, a)
            assert page_text == engine_text_
            rounds.append((engine_speed, page_speed))
    finally:
        demo.close()
    ratios = sorted(p / e for e, p in rounds)
    median_ratio = (ratios[1] + ratios[2]) / 2
    print(f"\nengine alone / page end to end, tokens/s, 64 tokens, cascade, {engine.pair.config.n_threads} "
          f"threads: " + ", ".join(f"{e:.2f} / {p:.2f}" for e, p in rounds) + f"; median page/engine "
          f"{median_ratio:.3f}")
    assert median_ratio >= 0.9
