"""The Gradio page: a prompt in; the text out token by token, red where the big model wrote it.

`build_demo(engine_provider)` returns the Blocks app; app.py launches it. The handlers are generators
that yield the next state of the page (gpt-fast's "small named verbs", Gradio's streaming demos): they
run the engine, keep its events in a `gr.State`, and leave every picture to `render`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import gradio as gr

from . import render
from .config import GenerationConfig, limits
from .engine import Engine
from .events import Summary, TokenEvent
from .examples import load_examples
from .models import ModelError
from .prompt import PromptError
from .service import public_message

log = logging.getLogger(__name__)

EngineProvider = Callable[[Callable[[str], None]], Engine]

# Rebuilding the text and the chart costs a few milliseconds and, while the page's handler does it,
# the models wait: a few pictures a second look live and keep generation at the engine's own speed.
UPDATE_EVERY_S = 0.25

PAGE_POLICIES = {
    "cascade": "cascade: small writes, big steps in where small is unsure",
    "target": "target: the big model alone (the baseline)",
    "draft": "draft: the small model alone",
    "bild": "bild: cascade, and big may roll back small's recent tokens",
    "speculative": "speculative: big checks k drafted tokens at once",
    "auto": "auto: measures as it goes and picks the fastest way",
}

INTRO = """\
# A small model writes, a big model steps in

A small, fast language model writes the answer one **token** (a word or a piece of a word) at a time.
Where it is unsure of its token, a bigger, slower model writes that token instead.
Tokens the big model wrote are shown in <span style="color:#c62828;font-weight:600">red</span>;
hover any token to see who wrote it and how sure each model was.
"""

HOW_TO_READ = """\
### How to read this page
- **Perplexity** says how unsure a model is of a token: 1 means certain, 5 means about as unsure as picking
  among five equally likely words. The chart shows, for every token of the answer, the small model's
  perplexity of the token *it* chose there (on a log scale), coloured by which model finally wrote it.
- **The threshold** is the dashed line. Where the small model's perplexity is above it, the token goes to
  the big model. A low threshold asks the big model more often (slower, closer to the big model's text);
  a high one leaves more to the small model.
- **What-if:** after a run, move the threshold slider. The text and the chart re-colour the recorded
  tokens to show which ones *would* have gone to the big model at the new threshold. This re-reads the
  numbers the run recorded; nothing is regenerated, so it cannot show how the text itself would change.
  Press Generate to really run at that threshold.
- **Struck-through** tokens (BiLD and speculative policies) were drafted by the small model, then
  refused by the big model when it checked them. Where the small model was unsure and handed a token
  over, its own proposal is not shown in the text; hover the red token to see it.
- **Speed** is measured on the machine running this page, for this run; nothing here promises one.
  "Compare with the big model alone" runs the big model by itself on the same prompt and settings and
  shows both measured speeds and where the two texts differ.
"""


@dataclass(frozen=True)
class Run:
    """One generation as the page remembers it: what was asked and every event the engine sent."""

    prompt: str
    config: GenerationConfig
    events: tuple[TokenEvent, ...] = ()
    summary: Summary | None = None
    running: bool = True

    @property
    def text(self) -> str:
        return self.summary.text if self.summary else "".join(e.text for e in self.events if e.accepted)


class Throttle:
    """True at most once per `every` seconds."""

    def __init__(self, every: float | None = None) -> None:
        self.every, self.last = UPDATE_EVERY_S if every is None else every, float("-inf")

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        return True


def finite_number(name: str, value: Any) -> float:
    """The value as a float; ValueError naming the setting if it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number")
    return float(value)


def generation_config(policy: str, threshold: float, k: float, max_tokens: float, temperature: float,
                      seed: float | None, mode: str) -> GenerationConfig:
    """The request the controls describe; ValueError names a bad setting."""
    number = {name: finite_number(name, value) for name, value in
              (("threshold", threshold), ("k", k), ("max_tokens", max_tokens), ("temperature", temperature),
               ("seed", seed or 0))}
    return GenerationConfig(policy=policy, threshold=number["threshold"], k=int(number["k"]),
                            max_tokens=int(number["max_tokens"]), temperature=number["temperature"],
                            seed=int(number["seed"]), chat=mode != "raw").validate()


# ---- what each output shows -----------------------------------------------------------------------

def run_outputs(run: Run) -> tuple:
    """(text panel, chart, summary, plain text, state) for a run in progress or finished."""
    threshold = run.config.threshold
    html = render.text_panel(run.events, run_threshold=threshold)
    figure = render.perplexity_figure(run.events, threshold)
    return html, figure, summary_markdown(run), run.text, run


def summary_markdown(run: Run) -> str:
    if run.summary is not None:
        return f"**{render.summary_sentence(run.summary)}**  \n{render.summary_details(run.summary)}"
    if not run.running:
        return f"**{render.stopped_sentence(run.events)}**"
    accepted = [e for e in run.events if e.accepted]
    by_target = sum(e.source == "target" for e in accepted)
    return f"Writing… {len(accepted)} tokens so far, {by_target} by the big model."


def message_outputs(message: str, kind: str = "error") -> tuple:
    return render.message_panel(message, kind), None, f"**{message}**", "", None


def _engine_or_message(engine_provider: EngineProvider, progress: gr.Progress) -> Engine | str:
    def report(message: str) -> None:  # shown over the text box while the models load (first run only)
        progress(0.0, desc=f"First run: {message}…")

    try:
        return engine_provider(report)
    except ModelError as e:
        log.error("model loading failed: %s", e)
        return public_message(e)


# ---- the handlers --------------------------------------------------------------------------------

def make_generate(engine_provider: EngineProvider):
    def generate(prompt: str, mode: str, policy: str, threshold: float, k: float, max_tokens: float,
                 temperature: float, seed: float, progress=gr.Progress(track_tqdm=True)) -> Iterator[tuple]:
        prompt = prompt or ""  # the API can send null; the engine then says the prompt is empty
        try:
            config = generation_config(policy, threshold, k, max_tokens, temperature, seed, mode)
        except ValueError as e:
            yield message_outputs(f"Please check the settings: {e}")
            return
        engine = _engine_or_message(engine_provider, progress)
        if isinstance(engine, str):
            yield message_outputs(engine)
            return
        run, events, due = Run(prompt, config), [], Throttle()
        try:
            for event in engine.generate(prompt, config):
                if isinstance(event, Summary):
                    run = replace(run, events=tuple(events), summary=event, running=False)
                    break
                events.append(event)
                if due():
                    yield run_outputs(replace(run, events=tuple(events)))
        except PromptError as e:
            yield message_outputs(str(e).capitalize())
            return
        except Exception:  # the visitor gets a sentence; the operator gets the traceback
            log.exception("generation failed")
            yield message_outputs(public_message(RuntimeError()))
            return
        yield run_outputs(run)

    return generate


def make_compare(engine_provider: EngineProvider):
    def compare(run: Run | None, progress=gr.Progress(track_tqdm=True)) -> Iterator[tuple]:
        if run is None or run.running or run.summary is None:
            yield render.message_panel("Generate a text first and let it finish; then compare it with the "
                                       "big model alone.", "info"), None
            return
        engine = _engine_or_message(engine_provider, progress)
        if isinstance(engine, str):
            yield render.message_panel(engine, "error"), None
            return
        events, due = [], Throttle()
        try:
            for event in engine.generate(run.prompt, run.config.replace(policy="target")):
                if isinstance(event, Summary):
                    numbers = {"this_run": run.summary.to_dict(), "big_model_alone": event.to_dict()}
                    yield render.compare_html(run.summary, event, run.events, events), numbers
                    return
                events.append(event)
                if due():
                    n = sum(e.accepted for e in events)
                    yield render.message_panel(f"The big model alone is writing… {n} tokens so far.", "info"), \
                        gr.skip()
        except Exception:
            log.exception("comparison failed")
            yield render.message_panel(public_message(RuntimeError()), "error"), None

    return compare


def whatif(threshold: float, run: Run | None) -> tuple:
    """Re-colour the recorded run for another threshold; during a run, leave the page alone."""
    if run is None or run.running or not run.events:
        return gr.skip(), gr.skip()
    run_threshold = run.config.threshold
    return (render.text_panel(run.events, run_threshold=run_threshold, threshold=float(threshold)),
            render.perplexity_figure(run.events, run_threshold, float(threshold)))


def stop(run: Run | None) -> tuple:
    """Stop pressed: the generation is cancelled; what was streamed so far stays as a finished run."""
    if run is None or not run.running:
        return gr.skip(), gr.skip()
    run = replace(run, running=False)
    return run, summary_markdown(run)


# ---- the page ------------------------------------------------------------------------------------

def refuse_non_numbers(component: gr.Slider | gr.Number, setting: str, allow_empty: bool = False):
    """Make the component refuse, with a message naming the setting, a value that is not a finite number.

    Gradio checks a slider's or number field's value against its range but not that it is a number, so
    a string or null sent through the API failed inside Gradio with a bare "Error", and NaN passed the
    range check. (An instance attribute rather than a subclass: Gradio writes a .pyi stub next to the
    module of any component subclass when it is defined.)"""
    gradio_preprocess = component.preprocess

    def preprocess(payload: Any):
        if not (payload is None and allow_empty):
            try:
                finite_number(setting, payload)
            except ValueError as e:
                raise gr.Error(f"Please check the settings: {e}.") from None
        return gradio_preprocess(payload)

    component.preprocess = preprocess
    return component


def _slider(name: str, label: str, *, lo: float | None = None, hi: float | None = None, step: float = 1,
            info: str | None = None) -> gr.Slider:
    meta = limits(GenerationConfig, name)
    return refuse_non_numbers(gr.Slider(minimum=max(meta["min"], lo) if lo is not None else meta["min"],
                                        maximum=min(meta["max"], hi) if hi is not None else meta["max"],
                                        value=meta["default"], step=step, label=label, info=info or meta["help"]),
                              name)


def build_demo(engine_provider: EngineProvider, describe_models: Callable[[], str] | None = None) -> gr.Blocks:
    """The page. `engine_provider(progress)` returns the shared engine, loading it on first use."""
    examples = load_examples()
    with gr.Blocks(title="Cascade: a small model writes, a big model steps in") as demo:
        run_state = gr.State(None)
        gr.Markdown(INTRO)
        models_md = gr.Markdown("")
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=300):
                prompt = gr.Textbox(label="Prompt", lines=4, placeholder="Ask something, or start a text…",
                                    value=examples[0].prompt if examples else "")
                mode = gr.Radio([("Chat: the model answers", "chat"), ("Raw: the model continues the text", "raw")],
                                value="chat" if limits(GenerationConfig, "chat")["default"] else "raw",
                                label="Mode")
                policy = gr.Dropdown([(label, name) for name, label in PAGE_POLICIES.items()],
                                     value=limits(GenerationConfig, "policy")["default"], label="Who writes")
                threshold = _slider("threshold", "Threshold (perplexity)", lo=1.0, hi=100.0, step=0.1,
                                    info="Above this perplexity the small model hands a token to the big model. "
                                         "Move it after a run to see a what-if.")
                with gr.Accordion("More settings", open=False):
                    k = _slider("k", "k: tokens the small model drafts per check (speculative)")
                    max_tokens = _slider("max_tokens", "Most tokens to write", lo=1, hi=1024)
                    temperature = _slider("temperature", "Temperature (0 = always the likeliest token)",
                                          step=0.05)
                    seed_meta = limits(GenerationConfig, "seed")
                    seed = refuse_non_numbers(
                        gr.Number(value=seed_meta["default"], minimum=seed_meta["min"], maximum=seed_meta["max"],
                                  precision=0, label="Seed", info=seed_meta["help"]),
                        "seed", allow_empty=True)  # an empty field: the handler's default
                with gr.Row():
                    generate_btn = gr.Button("Generate", variant="primary")
                    stop_btn = gr.Button("Stop", variant="stop")
                if examples:
                    gr.Examples([[e.prompt, "chat" if e.chat else "raw"] for e in examples], inputs=[prompt, mode],
                                example_labels=[e.name for e in examples], label="Examples")
            with gr.Column(scale=5):
                summary_md = gr.Markdown(label="Summary",
                                         value="Press **Generate** to start. The first run loads the models, "
                                               "which can take a while (a download, the first time).",
                                         elem_classes="cascade-summary")
                with gr.Row(equal_height=False):
                    text_html = gr.HTML(render.message_panel("The answer will appear here, token by token.",
                                                             "info"), label="Answer", elem_classes="cascade-text-box",
                                        min_width=320)
                    chart = gr.Plot(label="Perplexity chart", show_label=False, elem_classes="cascade-chart",
                                    min_width=320)
                compare_btn = gr.Button("Compare with the big model alone", variant="secondary")
                compare_html = gr.HTML("", label="Comparison", elem_classes="cascade-compare-box")
                with gr.Accordion("Plain text", open=False):
                    plain_text = gr.Textbox(label="Plain text", lines=6, buttons=["copy"])
                with gr.Accordion("Measured numbers (comparison)", open=False):
                    numbers = gr.JSON(label="Measured numbers")
        gr.Markdown(HOW_TO_READ)

        generating = generate_btn.click(
            make_generate(engine_provider),
            inputs=[prompt, mode, policy, threshold, k, max_tokens, temperature, seed],
            outputs=[text_html, chart, summary_md, plain_text, run_state],
            api_name="generate", concurrency_limit=1, concurrency_id="models", show_progress_on=[text_html])
        comparing = compare_btn.click(
            make_compare(engine_provider), inputs=[run_state], outputs=[compare_html, numbers],
            api_name="compare", concurrency_limit=1, concurrency_id="models", show_progress_on=[compare_html])
        stop_btn.click(stop, inputs=[run_state], outputs=[run_state, summary_md], cancels=[generating, comparing],
                       queue=False, api_visibility="private")
        threshold.change(whatif, inputs=[threshold, run_state], outputs=[text_html, chart], queue=False,
                         show_progress="hidden", trigger_mode="always_last", api_visibility="private")
        if describe_models is not None:
            demo.load(describe_models, outputs=[models_md], queue=False, api_visibility="private")
    return demo
