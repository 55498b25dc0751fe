"""The page's API through gradio_client, on the toy models: streaming, comparing, stopping, failing kindly."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from gradio_client import Client  # noqa: E402

from cascade import GenerationConfig, ModelConfig, ModelError  # noqa: E402
from cascade.page import Run, build_demo, whatif  # noqa: E402
from cascade.service import EngineService, hide_paths, model_config, public_message  # noqa: E402

from .conftest import engine_for, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "The cat sat on the mat"
# prompt, mode, policy, threshold, k, max_tokens, temperature, seed: the endpoint's inputs in order
SETTINGS = dict(policy="cascade", threshold=5.0, k=4, max_tokens=60, temperature=0.0, seed=0, chat=False)


def as_inputs(prompt: str, policy: str, threshold: float, k: int, max_tokens: int, temperature: float, seed: int,
              chat: bool) -> tuple:
    return prompt, "chat" if chat else "raw", policy, threshold, k, max_tokens, temperature, seed


class SlowEngine:
    """The engine, with a pause after each event: the stream then lasts long enough on any machine for
    the page's throttled updates to show up more than once."""

    def __init__(self, engine, pause_s: float = 0.02) -> None:
        self.engine, self.pause_s = engine, pause_s

    def generate(self, prompt, config):
        for event in self.engine.generate(prompt, config):
            yield event
            time.sleep(self.pause_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(provider):
    demo = build_demo(provider, describe_models=lambda: "toy models")
    _, url, _ = demo.queue().launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                                     quiet=True)
    return demo, url


@pytest.fixture(scope="module")
def toy_engine(toy):
    return engine_for(toy.small, toy.related)


@pytest.fixture(scope="module")
def page(toy_engine):
    demo, url = serve(lambda progress: SlowEngine(toy_engine))
    yield url
    demo.close()


def test_generate_streams_and_ends_with_the_engines_own_text(page, toy_engine):
    client = Client(page, verbose=False)
    job = client.submit(*as_inputs(PROMPT, **SETTINGS), api_name="/generate")
    html, plot, summary, text = job.result(timeout=120)
    outputs = job.outputs()
    assert len(outputs) >= 3, "expected several intermediate updates before the final one"
    lengths = [len(o[3]) for o in outputs]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # the text grows as it streams

    events, expected = run(toy_engine, PROMPT, **SETTINGS)
    assert text == expected.text
    assert f"{expected.n_target_tokens} of {expected.n_tokens} tokens" in summary and "tokens/s" in summary
    assert html.count('class="tok red target"') > 0 and plot["type"] == "plotly"


def test_compare_runs_the_big_model_alone_on_the_same_prompt(page, toy_engine):
    client = Client(page, verbose=False)  # one client is one session: compare reads this session's run
    client.predict(*as_inputs(PROMPT, **SETTINGS), api_name="/generate")
    html, numbers = client.predict(api_name="/compare")
    _, alone = run(toy_engine, PROMPT, **{**SETTINGS, "policy": "target"})
    assert numbers["big_model_alone"]["text"] == alone.text and numbers["big_model_alone"]["policy"] == "target"
    assert numbers["this_run"]["policy"] == "cascade"
    assert "big model alone" in html and html.count("tokens/s") >= 2
    assert "identical" in html or 'class="diff-' in html


def test_compare_before_any_run_says_what_to_do(page):
    html, numbers = Client(page, verbose=False).predict(api_name="/compare")
    assert "Generate a text first" in html and numbers is None


def test_stop_leaves_the_models_ready_for_the_next_request(page, toy_engine):
    long = {**SETTINGS, "max_tokens": 400}
    full_run_s = SlowEngine(None).pause_s * len(run(toy_engine, PROMPT, **long)[0])  # the pauses alone
    client = Client(page, verbose=False)
    started = time.monotonic()
    job = client.submit(*as_inputs(PROMPT, **long), api_name="/generate")
    deadline = time.monotonic() + 60
    while not job.outputs() and time.monotonic() < deadline:
        time.sleep(0.05)
    job.cancel()
    _, _, summary, text = client.predict(*as_inputs(PROMPT, **SETTINGS), api_name="/generate")
    assert text == run(toy_engine, PROMPT, **SETTINGS)[1].text
    assert time.monotonic() - started < full_run_s / 2, "the stopped generation seems to have run to its end"


def test_settings_out_of_range_are_answered_in_words(page):
    # The sliders carry the config's ranges, so Gradio itself refuses the value and names the limit.
    with pytest.raises(Exception, match="less than minimum value 1"):
        Client(page, verbose=False).predict(*as_inputs(PROMPT, **{**SETTINGS, "k": 0}), api_name="/generate")


def test_an_unreachable_hub_is_a_friendly_message_without_paths(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    service = EngineService(ModelConfig(draft="cascade-tests/no-such-repo/small.gguf",
                                        target="cascade-tests/no-such-repo/large.gguf", n_threads=2))
    demo, url = serve(service.engine)
    try:
        html, plot, summary, text = Client(url, verbose=False).predict(*as_inputs(PROMPT, **SETTINGS),
                                                                       api_name="/generate")
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
    env = {"CASCADE_DRAFT": "env/draft/d.gguf", "CASCADE_THREADS": "3"}
    config = model_config(target="flag.gguf", env=env)
    assert (config.draft, config.target, config.n_threads) == ("env/draft/d.gguf", "flag.gguf", 3)
    assert model_config(env={}).draft == ModelConfig().draft


def test_importing_the_app_loads_no_model():
    code = "import app; assert not app.service.loaded and app.demo is not None"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CASCADE_DRAFT": "/nonexistent/d.gguf", "GRADIO_ANALYTICS_ENABLED": "False"})
    assert r.returncode == 0, r.stderr


def test_the_what_if_handler_recolours_a_finished_run_and_leaves_a_running_one_alone(toy_engine):
    events, summary = run(toy_engine, PROMPT, **SETTINGS)
    finished = Run(PROMPT, GenerationConfig(**SETTINGS), tuple(events), summary, running=False)
    html, figure = whatif(50.0, finished)
    assert 'data-view="whatif"' in html and any("what-if" in (t.name or "") for t in figure.data)
    running = Run(PROMPT, GenerationConfig(**SETTINGS), tuple(events))
    assert whatif(50.0, running) == (gr.skip(), gr.skip())


@pytest.mark.real
def test_the_page_streams_at_the_engines_own_speed(real_pair):
    """Page vs engine on the real pair, the same request: straight through the engine (its Summary's
    tokens/s) and end to end through the page (gradio_client, from submit to the last update), in
    alternating order, compared round by round so that drifts in the machine's speed cancel out.
    Run with -s to see the numbers."""
    engine = engine_for(*real_pair)
    demo, url = serve(lambda progress: engine)
    settings = dict(policy="cascade", threshold=5.0, k=4, max_tokens=64, temperature=0.0, seed=0, chat=True)
    prompt = "Explain to a ten-year-old why the sky is blue."
    client = Client(url, verbose=False)

    def through_engine() -> tuple[float, str]:
        summary = run(engine, prompt, **settings)[1]
        return summary.tokens_per_s, summary.text

    def through_page() -> tuple[float, str]:
        started = time.perf_counter()
        _, _, page_summary, text = client.predict(*as_inputs(prompt, **settings), api_name="/generate")
        n_tokens = int(re.search(r"of (\d+) tokens", page_summary).group(1))
        return n_tokens / (time.perf_counter() - started), text

    try:
        through_engine(), through_page()  # warm-up: weights paged in, every code path run once
        rounds = []
        for i in range(4):
            first, second = (through_engine, through_page) if i % 2 == 0 else (through_page, through_engine)
            a, b = first(), second()
            (engine_speed, engine_text), (page_speed, page_text) = (a, b) if i % 2 == 0 else (b, a)
            assert page_text == engine_text
            rounds.append((engine_speed, page_speed))
    finally:
        demo.close()
    ratios = sorted(p / e for e, p in rounds)
    median_ratio = (ratios[1] + ratios[2]) / 2
    print(f"\nengine alone / page end to end, tokens/s, {settings['max_tokens']} tokens, {settings['policy']}, "
          f"{engine.pair.config.n_threads} threads: " + ", ".join(f"{e:.2f} / {p:.2f}" for e, p in rounds)
          + f"; median page/engine {median_ratio:.3f}")
    assert median_ratio >= 0.9
