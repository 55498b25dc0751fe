"""The page's layout (`build_demo`: column by column into a `Page`) and the wiring of its events (`wire`:
each event once, to the handler of its module)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import gradio as gr

from ..serving.examples import Example, load_examples
from . import bigmodel, conversation, paysmap, tokens
from .branches import REQUEST_CONTROLS, fork_start, record_branch, show_branch, show_turn
from .controls import (Component, RouterSource, bar_js, current_router, framing_controls, mode_control,
                       prompt_controls, settings_controls, share_js, shown_by)
from .followups import ask_followup, conversation_line, followup_box
from .generate import GENERATE_INPUTS, EngineProvider, make_compare, make_generate, make_stop
from .running import COMPARISON, GENERATION, Running, visitor_of
from .guide import HOW_TO_READ, INTRO
from .hover import HOVER_JS
from .link import copy_link_js, make_apply_link, make_autorun
from .run import (BRANCH_OUTPUTS, CLEARED_OUTPUTS, COMPARE_OUTPUTS, DOWNLOAD_OUTPUTS, GENERATE_OUTPUTS,
                  STOP_OUTPUTS, VERDICT_OUTPUTS, WHATIF_OUTPUTS, verdict)
from .runfile import offer_download
from .whatif import make_rule_changed, whatif

# Gradio's queue polls every 1 ms and 10 ms by default, wake-ups that cost the models time on a busy CPU.
QUEUE_POLL_S = 0.02
PROGRESS_POLL_S = 0.1

# A grid with the request and settings left of the answer; on a phone, the request, the answer, the rest.
PAGE_CSS = """
.cascade-page-style { display: none !important; }
.cascade-intro h1 { font-size: 1.45em !important; margin: 0 0 .2em !important; }
.cascade-intro p { margin: 0 !important; }
.cascade-main { display: grid !important; grid-template-columns: minmax(280px, 2fr) minmax(0, 5fr);
  grid-template-rows: auto auto 1fr; align-items: start; }
.cascade-main > .cascade-request { grid-column: 1; grid-row: 1; }
.cascade-main > .cascade-extras { grid-column: 1; grid-row: 2; }
.cascade-main > .cascade-settings { grid-column: 1; grid-row: 3; }
.cascade-main > .cascade-answer { grid-column: 2; grid-row: 1 / span 3; }
.cascade-answer-row { flex-wrap: wrap !important; }
.cascade-answer-row > .cascade-text-box { flex: 1 1 440px !important; min-width: min(300px, 100%) !important; }
.cascade-answer-row > .cascade-chart { flex: 0 1 380px !important; min-width: min(300px, 100%) !important; }
.cascade-threshold input[type=range], .cascade-threshold .min_value, .cascade-threshold .max_value { display: none !important; }
.cascade-threshold-bar input[type=number], .cascade-threshold-bar .head, .cascade-threshold-bar .min_value,
.cascade-threshold-bar .max_value { display: none !important; }
.cascade-main input[role=combobox] { padding-right: 30px !important; text-overflow: ellipsis; }
.cascade-threshold-bar { padding: 2px 12px 12px !important; background: var(--block-background-fill) !important; }
.cascade-branches .wrap { gap: 4px 6px !important; }
.cascade-branches label { padding: 2px 8px !important; font-size: .85em; }
.cascade-models { font-size: .85em; }
.cascade-models-row { flex-wrap: wrap !important; align-items: center; }
.cascade-models-row > .cascade-models { flex: 1 1 200px !important; }
@media (max-width: 767px) {
  .cascade-main { grid-template-columns: minmax(0, 1fr); grid-template-rows: none; }
  .cascade-main > .column { grid-column: 1 !important; grid-row: auto !important; }
  .cascade-answer-row > .cascade-chart:has(> .empty) { display: none !important; }  /* no run yet: no empty box */
}
"""

# The page's quick steps (a what-if, a branch shown, what follows a run): unqueued, no progress, no endpoint.
QUICK = {"queue": False, "show_progress": "hidden", "api_visibility": "private"}


def queued(demo: gr.Blocks, **queue_settings: Any) -> gr.Blocks:
    """`demo.queue(**queue_settings)`, polling at the page's intervals (`QUEUE_POLL_S`)."""
    demo.queue(**queue_settings)
    queue = getattr(demo, "_queue", None)  # Gradio's own, with no public setting for its polling
    if queue is not None and hasattr(queue, "sleep_when_free"):
        queue.sleep_when_free = QUEUE_POLL_S
        queue.progress_update_sleep_when_free = PROGRESS_POLL_S
    return demo


@dataclass
class Page:
    """The page's components: controls by setting (`inputs`), outputs by `Update` field (`out`), the rest (`parts`)."""

    inputs: dict[str, Component] = field(default_factory=dict)
    out: dict[str, Component] = field(default_factory=dict)
    parts: dict[str, Component] = field(default_factory=dict)

    def outputs(self, names: Sequence[str]) -> list[Component]:
        return [self.out[name] for name in names]

    def controls(self, names: Sequence[str]) -> list[Component]:
        return [self.inputs[name] for name in names]


def build_demo(engine_provider: EngineProvider, describe_models: Callable[[], str] | None = None,
               concurrency: int = 1, router: RouterSource | None = None,
               big_model: bigmodel.BigModels | None = None) -> gr.Blocks:
    """The page over `engine_provider(progress)`, `concurrency` runs at once; `router()`: the router or None;
    `big_model`: the "Big model" control beside the models line (None: no control)."""
    examples = load_examples(page=True)
    with gr.Blocks(title="Cascade: a small model writes, a big model steps in") as demo:
        page = Page(out={"run": gr.State(None)})
        # The session's runs (branches.Branch), the one shown, and the fork the next run starts from.
        page.parts.update(branches=gr.State([]), current=gr.State(None), fork=gr.State(None))
        # The CSS travels in the page, so it looks the same however it is served.
        gr.HTML(f"<style>{PAGE_CSS}</style>", elem_classes="cascade-page-style", js_on_load=None)
        gr.Markdown(INTRO, elem_classes="cascade-intro")
        with gr.Row(equal_height=False, elem_classes="cascade-main"):
            with gr.Column(scale=2, min_width=280, elem_classes="cascade-request"):
                request_column(page, examples)
            with gr.Column(scale=5, min_width=280, elem_classes="cascade-answer"):
                answer_column(page)
            with gr.Column(scale=2, min_width=280, elem_classes="cascade-extras"):
                extras_column(page, examples)
            with gr.Column(scale=2, min_width=280, elem_classes="cascade-settings"):
                settings_column(page, current_router(router), big_model)
        with gr.Accordion("How to read this page", open=False, elem_classes="cascade-guide"):
            gr.Markdown(without_heading(HOW_TO_READ))
        wire(page, demo, engine_provider, concurrency, router)
        if describe_models is not None:
            demo.load(describe_models, outputs=[page.parts["models"]], queue=False, api_visibility="private")
        if big_model is not None:
            bigmodel.wire(demo, page.parts["big_model"], page.parts["models"], big_model,
                          progress_on=[page.parts["models"], page.out["text_html"]])
    return demo


def request_column(page: Page, examples: Sequence[Example]) -> None:
    """The request: the prompt, the conversation it continues, and Generate and Stop right under it."""
    page.inputs.update(prompt_controls(examples))
    with gr.Group(visible=False) as page.parts["conversation_row"]:
        page.parts["conversation_md"] = gr.Markdown("", padding=True, elem_classes="cascade-conversation-line")
        page.parts["new_conversation"] = gr.Button("New conversation", size="sm",
                                                   elem_classes="cascade-new-conversation")
    with gr.Row():
        page.parts["generate"] = gr.Button("Generate", variant="primary", min_width=120)
        page.parts["stop"] = gr.Button("Stop", variant="stop", min_width=80)


def extras_column(page: Page, examples: Sequence[Example]) -> None:
    """The examples, the mode they set too, and sharing (the link and the run's file)."""
    page.inputs.update(mode_control(examples))
    if examples:
        gr.Examples([[e.prompt, "chat" if e.chat else "raw"] for e in examples],
                    inputs=[page.inputs["prompt"], page.inputs["mode"]],
                    example_labels=[e.name for e in examples], label="Examples (one click fills the prompt)",
                    examples_per_page=len(examples))
    page.inputs["mode"].render()
    with gr.Row():
        page.parts["copy_link"] = gr.Button("Copy link", size="sm", elem_classes="cascade-copy-link")
        page.out["download"] = gr.DownloadButton("Download this run", visible=False, size="sm",
                                                 elem_classes="cascade-download")
    page.parts["link"] = gr.Textbox(label="Link to these settings (opening it fills the page the same way)",
                                    visible=True, interactive=False, elem_classes="cascade-link", lines=1,
                                    buttons=["copy"])


def settings_column(page: Page, router: Any, big_model: bigmodel.BigModels | None = None) -> None:
    """Who writes and how, the framing, and the models line (the big model's control beside it where offered)."""
    controls, shares = settings_controls(router)
    page.inputs.update(controls)
    page.parts.update(shares)
    page.inputs.update(framing_controls())
    with gr.Row(equal_height=False, elem_classes="cascade-models-row") if big_model is not None else nullcontext():
        page.parts["models"] = gr.Markdown("", elem_classes="cascade-models")
        if big_model is not None:
            page.parts["big_model"] = bigmodel.control(big_model)


def answer_column(page: Page) -> None:
    """The answer: summary, timings, earlier turns, text and chart, follow-up, branches, comparison, numbers."""
    out = page.out
    out["summary"] = gr.Markdown(label="Summary",
                                 value="Press **Generate** to start. The first run loads the models, which can "
                                       "take a while (a download, the first time).",
                                 elem_classes="cascade-summary")
    # Where the run's time went, then the rest of the summary in a fold: drawn after the run (`verdict`).
    out["timebars"] = gr.Plot(label="Where the time went", show_label=False, visible=False,
                              elem_classes="cascade-timebars")
    with gr.Accordion("More about this run", open=False, visible=False, elem_classes="cascade-more") as out["more_box"]:
        out["more"] = gr.Markdown("", elem_classes="cascade-more-text")
    # Drawn when the conversation changes, not with every picture of the answer.
    page.parts["earlier"] = gr.HTML("", visible=False, elem_classes="cascade-earlier-box",
                                    js_on_load=HOVER_JS + conversation.SHOW_TURN_JS)
    # The text as wide as it needs (a line of code), the chart beside it while both fit, under it otherwise.
    with gr.Row(equal_height=False, elem_classes="cascade-answer-row"):
        out["text_html"] = gr.HTML(tokens.message_panel("The answer will appear here, token by token.", "info"),
                                   label="Answer", elem_classes="cascade-text-box", js_on_load=HOVER_JS)
        out["chart"] = gr.Plot(label="Chart", show_label=False, elem_classes="cascade-chart")
    with gr.Row(visible=False, equal_height=False, elem_classes="cascade-followup") as page.parts["followup_row"]:
        page.parts["followup_text"] = gr.Textbox(
            label="Ask a follow-up", lines=1, scale=5, placeholder="A question about this answer… (Enter asks it)",
            info="The models read the conversation so far, then your question. The answers above stay, with "
                 "their colours.")
        page.parts["followup"] = gr.Button("Ask a follow-up", variant="primary", scale=1, min_width=140)
    out["branches"] = gr.Radio([], label="Branches of this session", visible=False, elem_classes="cascade-branches")
    page.parts["compare"] = gr.Button("Compare with the big model alone", variant="secondary")
    out["compare_html"] = gr.HTML("", label="Comparison", elem_classes="cascade-compare-box")
    pays_map(page)
    with gr.Accordion("Which rule decides best?", open=True, visible=False,
                      elem_classes="cascade-rules") as out["rules_box"]:
        out["rules_text"] = gr.Markdown("", elem_classes="cascade-rules-text")
        out["rules_chart"] = gr.Plot(label="Which rule decides best?", show_label=False,
                                     elem_classes="cascade-rules-chart")
    with gr.Accordion("Plain text", open=False):
        out["plain_text"] = gr.Textbox(label="Plain text", lines=6, buttons=["copy"])
    with gr.Accordion("Measured numbers (comparison)", open=False):
        out["numbers"] = gr.JSON(label="Measured numbers")


def pays_map(page: Page) -> None:
    """Where sharing pays on the reference machine, this page's pair placed on it after each run."""
    data = paysmap.load_map()
    if data is None:
        return
    with gr.Accordion("Where does sharing pay? (bigger big models)", open=True, elem_classes="cascade-pays"):
        page.parts["pays_text"] = gr.Markdown(paysmap.map_words(data), elem_classes="cascade-pays-text")
        page.parts["pays_chart"] = gr.Plot(paysmap.map_update(None, data), label="Where sharing pays",
                                           show_label=False, elem_classes="cascade-pays-chart")


def wire(page: Page, demo: gr.Blocks, engine_provider: EngineProvider, concurrency: int,
         router: RouterSource | None) -> None:
    """Each event of the page, wired once."""
    run, parts, inputs = page.out["run"], page.parts, page.inputs
    # Unprocessed inputs: GenerationConfig judges every value; the run shown keeps a follow-up's colours.
    controls = page.controls(GENERATE_INPUTS)
    request = controls + [run]
    running = Running()  # one run at a time per visitor: a new run ends their comparison, Stop ends both
    generate = make_generate(engine_provider, running)
    # The comparison's box says how far it has come in words; Gradio's spinner over it would only repeat that.
    parts["compare"].click(expecting(running, COMPARISON), **QUICK)  # a Stop from now on ends it
    after_run(page, parts["compare"].click(
        make_compare(engine_provider, running), inputs=[run], outputs=page.outputs(COMPARE_OUTPUTS),
        api_name="compare", concurrency_limit=concurrency, concurrency_id="models", show_progress="hidden"))

    def generation(trigger: Callable, handler: Callable = generate, inputs: list = request,
                   api_name: str | None = None, clears: bool = True) -> Any:
        """`handler` writing a run on `trigger`, after `clearing` (one run at a time per visitor), before
        `after_run`; an endpoint if named."""
        api = {"api_name": api_name} if api_name else {"api_visibility": "private"}
        if clears:
            trigger(clearing(running), outputs=page.outputs(CLEARED_OUTPUTS + DOWNLOAD_OUTPUTS), **QUICK)
        return after_run(page, trigger(handler, inputs=inputs, outputs=page.outputs(GENERATE_OUTPUTS),
                                       preprocess=False, concurrency_limit=concurrency, concurrency_id="models",
                                       show_progress_on=[page.out["text_html"]], **api))

    generation(parts["generate"].click, api_name="generate")
    # A fork: a token chosen in a pinned table runs with the parent's settings (queued, so a refusal shows).
    forking = page.out["text_html"].select(fork_start, inputs=[run, parts["current"]] + controls,
                                           outputs=controls + [parts["fork"]], show_progress="hidden",
                                           api_visibility="private")
    generation(forking.success)
    # A follow-up: its question and the conversation so far fill the request's controls, then it runs.
    for asked in (parts["followup"].click, parts["followup_text"].submit):
        asking = asked(ask_followup, inputs=[parts["followup_text"], run],
                       outputs=[inputs["prompt"], inputs["history"], inputs["answer_prefix"], parts["followup_text"]],
                       show_progress="hidden", api_visibility="private")  # queued: a refusal shows as a toast
        generation(asking.success)
    # Stop ends the visitor's runs itself (`Running`), not by Gradio's cancel.
    after_run(page, parts["stop"].click(make_stop(running), inputs=[run], outputs=page.outputs(STOP_OUTPUTS),
                                        queue=False, api_visibility="private"))
    wire_conversation(page)
    wire_branches(page)
    # A what-if: the threshold or the share (the budget) moved after a run.
    for moved in (inputs["threshold"].change, inputs["budget"].change):
        moved(whatif, inputs=[inputs["threshold"], run, inputs["rule"], inputs["budget"]],
              outputs=page.outputs(WHATIF_OUTPUTS), trigger_mode="always_last", **QUICK)
    wire_share(page)
    wire_threshold_bar(page)
    # A visitor's choice only (a link's rule is applied with its own threshold, below).
    inputs["rule"].input(make_rule_changed(router), inputs=[inputs["rule"], run, inputs["budget"]],
                         outputs=[inputs["rule"], inputs["threshold"]] + page.outputs(WHATIF_OUTPUTS),
                         trigger_mode="always_last", **QUICK)
    parts["copy_link"].click(None, inputs=controls, outputs=[parts["link"]], js=copy_link_js(),
                             api_visibility="private")
    autorun = gr.State(False)
    linked = controls + [page.out["summary"], autorun, page.out["text_html"]]
    loading = demo.load(make_apply_link(router), outputs=linked, queue=False, api_visibility="private")
    generation(loading.then, make_autorun(engine_provider), inputs=[autorun] + request, clears=False)


def clearing(running: Running) -> Callable:
    """Before a new run: the visitor's comparison ended at once, the new run expected (so a Stop pressed before its
    handler starts still ends it), and what belonged to the run shown cleared (CLEARED_OUTPUTS, then the file)."""
    def clear(request: gr.Request) -> tuple:
        visitor = visitor_of(request)
        running.end(visitor, COMPARISON, wait=False)
        running.expect(visitor, GENERATION)
        cleared = replace(verdict(None), compare_html="", numbers=None, rules_box=gr.update(visible=False),
                          rules_text="", rules_chart=None)
        return cleared.values(CLEARED_OUTPUTS) + (gr.update(visible=False, value=None),)

    return clear


def expecting(running: Running, kind: str) -> Callable:
    """A click's quick step: the visitor's run of `kind` is expected (`Running.expect`)."""
    def expect(request: gr.Request) -> None:
        running.expect(visitor_of(request), kind)

    return expect


def wire_share(page: Page) -> None:
    """The share's slider and tick set the budget in the browser and follow it; the tick shows one box."""
    parts, budget = page.parts, page.inputs["budget"]
    share, by_threshold = parts["share"], parts["by_threshold"]
    for chosen in (share.input, by_threshold.input):
        chosen(None, inputs=[share, by_threshold], outputs=[budget], js=share_js("to_budget"), **QUICK)
    budget.change(None, inputs=[budget, share], outputs=[share, by_threshold], js=share_js("from_budget"), **QUICK)
    by_threshold.change(shown_by, inputs=[by_threshold], outputs=[share, parts["threshold_box"]], **QUICK)


def wire_threshold_bar(page: Page) -> None:
    """The threshold's bar, in the browser: dragged, it sets the threshold; else it follows it."""
    bar, rule, threshold = page.parts["threshold_bar"], page.inputs["rule"], page.inputs["threshold"]
    bar.input(None, inputs=[bar, rule], outputs=[threshold], js=bar_js("to_threshold"), **QUICK)
    for changed in (threshold.change, rule.change):
        changed(None, inputs=[threshold, rule, bar], outputs=[bar], js=bar_js("to_bar"), **QUICK)


def without_heading(markdown: str) -> str:
    """A guide's text without its own heading line, which its accordion's label says."""
    first, _, rest = markdown.partition("\n")
    return rest.lstrip("\n") if first.startswith("#") else markdown


def after_run(page: Page, event: Any) -> Any:
    """After a run, a comparison or a Stop, in one step: its picture and fold (`verdict`), its file offered, the run
    recorded among the branches (`record_branch`), the follow-up box, and its pair's place on the map."""
    parts = page.parts
    on_map = "pays_chart" in parts

    def finish(run: Any, branches: Any, fork: Any) -> tuple:
        done = verdict(run).values(VERDICT_OUTPUTS) + (offer_download(run),)
        if getattr(run, "running", False):  # a newer run, after a comparison it ended: recorded at its own end
            done += (gr.skip(),) * 5
        else:
            done += record_branch(run, branches, fork) + (followup_box(run),)
        if on_map:  # once a run has measured its costs
            point = getattr(run, "pays_point", None)
            done += (gr.skip() if point is None else paysmap.map_update(point),)
        return done

    outputs = page.outputs(VERDICT_OUTPUTS + DOWNLOAD_OUTPUTS) + [
        parts["branches"], page.out["branches"], parts["current"], parts["fork"], parts["followup_row"]]
    event.then(finish, inputs=[page.out["run"], parts["branches"], parts["fork"]],
               outputs=outputs + ([parts["pays_chart"]] if on_map else []), **QUICK)
    return event


def offer_followup(page: Page, event: Any) -> None:
    """After `event` (a branch shown): its `verdict`, and the follow-up box under a finished chat answer."""
    event.then(lambda run: verdict(run).values(VERDICT_OUTPUTS), inputs=[page.out["run"]],
               outputs=page.outputs(VERDICT_OUTPUTS), **QUICK)
    event.then(followup_box, inputs=[page.out["run"]], outputs=[page.parts["followup_row"]], **QUICK)


def wire_conversation(page: Page) -> None:
    """The conversation drawn when its hidden field changes; "New conversation" empties it."""
    history = page.inputs["history"]
    history.change(conversation_line, inputs=[history, page.out["run"]],
                   outputs=[page.parts["conversation_row"], page.parts["conversation_md"], page.parts["earlier"]],
                   **QUICK)
    page.parts["new_conversation"].click(lambda: "", outputs=[history], **QUICK)


def wire_branches(page: Page) -> None:
    """A branch chosen in the list, or an earlier turn's "show its chart": shown again, its request in the controls."""
    shown = page.outputs(BRANCH_OUTPUTS) + [page.parts["current"]] + page.controls(REQUEST_CONTROLS)
    offer_followup(page, page.out["branches"].input(show_branch, inputs=[page.out["branches"], page.parts["branches"]],
                                                    outputs=shown, **QUICK))
    offer_followup(page, page.parts["earlier"].select(show_turn, inputs=[page.out["run"], page.parts["branches"]],
                                                      outputs=shown + [page.out["branches"]], show_progress="hidden",
                                                      api_visibility="private"))
