"""The page's layout: the controls, the text and chart, the comparison, and the wiring of events.

`build_demo(engine_provider)` returns the Blocks app; app.py launches it. Every control that sets a
request is named after its `GenerationConfig` field and takes its range, default and help from there.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import gradio as gr

from ..engine.config import GenerationConfig, limits
from ..serving.examples import load_examples
from ..engine.policies import POLICY_TABLE
from . import conversation, rulewords, tokens
from .handlers import (BRANCH_OUTPUTS, COMPARE_OUTPUTS, DOWNLOAD_OUTPUTS, GENERATE_INPUTS, GENERATE_OUTPUTS,
                       REQUEST_CONTROLS, STOP_OUTPUTS, Update, WHATIF_OUTPUTS, EngineProvider, ask_followup,
                       branches_update, conversation_line, followup_box, fork_prefix, make_compare, make_generate,
                       offer_download, record_branch, rule_changed, show_branch, stop, turn_branch, whatif)
from .guide import HOW_TO_READ, INTRO
from .hover import HOVER_JS
from .link import copy_link_js, read_link

log = logging.getLogger(__name__)

# Returns the learned rule's router the page's engines use (None: none, and the rule is not offered).
RouterSource = Callable[[], Any]

def _slider(name: str, label: str, *, lo: float | None = None, hi: float | None = None, step: float = 1,
            info: str | None = None) -> gr.Slider:
    """A slider for a GenerationConfig field: its default, its range (narrowed to what a visitor needs)
    and its help."""
    meta = limits(GenerationConfig, name)  # (the threshold's slider is the rule's: `rulewords.slider_props`)
    return gr.Slider(minimum=max(meta["min"], lo) if lo is not None else meta["min"],
                     maximum=min(meta["max"], hi) if hi is not None else meta["max"],
                     value=meta["default"], step=step, label=label, info=info or meta["help"])


def _settings_controls(router: Any = None) -> dict[str, gr.components.Component]:
    """The controls of every setting a visitor may change, by field name. `router`: the learned rule's,
    if the page has one (the rule is offered only then)."""
    seed_meta = limits(GenerationConfig, "seed")
    rule = limits(GenerationConfig, "rule")["default"]
    controls = {
        "policy": gr.Dropdown([(p.label, p.name) for p in POLICY_TABLE.values() if p.on_page],
                              value=limits(GenerationConfig, "policy")["default"], label="Who writes"),
        "rule": gr.Dropdown(rulewords.choices(router is not None), value=rule, label=RULE_LABEL,
                            info=rulewords.rule_info(rule, _trained_on(router))),
        "threshold": gr.Slider(**rulewords.slider_props(rule)),
    }
    with gr.Accordion("More settings", open=False):
        controls.update(
            k=_slider("k", "k: tokens the small model drafts per check (speculative)"),
            rollback_threshold=_slider("rollback_threshold", "Rollback threshold (bild)", hi=1000.0, step=0.5,
                                       info="BiLD: when the big model checks the small model's recent tokens, "
                                            "it rolls back from the first whose perplexity (to the big model) "
                                            "is above this."),
            bild_window=_slider("bild_window", "Most unchecked tokens (bild)"),
            lookup_ngram=_slider("lookup_ngram", "Longest n-gram to look up (lookup)",
                                 info="Lookup: the text's last tokens (this many at most, fewer if need be) are "
                                      "looked for earlier in the prompt and the answer; what followed them there "
                                      "is proposed."),
            max_tokens=_slider("max_tokens", "Most tokens to write", lo=1, hi=1024),
            temperature=_slider("temperature", "Temperature (0 = always the likeliest token)", step=0.05),
            top_p=_slider("top_p", "Top-p (nucleus sampling; 1 keeps every token)", step=0.01),
            top_k=_slider("top_k", "Top-k (0 keeps every token)", hi=200),
            seed=gr.Number(value=seed_meta["default"], minimum=seed_meta["min"], maximum=seed_meta["max"],
                           precision=0, label="Seed", info=seed_meta["help"]),
        )
    return controls


RULE_LABEL = "How the small model judges its own token"


def _trained_on(router: Any) -> str | None:
    return getattr(router, "trained_on", None) if router is not None else None


def current_router(source: RouterSource | None) -> Any:
    """The router `source` gives now (None without a source, or if asking fails: the page then offers no
    learned rule rather than breaking)."""
    if source is None:
        return None
    try:
        return source()
    except Exception:  # a router file that went missing or bad: the service says so when it loads
        log.warning("could not tell whether the page has a router", exc_info=True)
        return None


# While a request runs, Gradio's queue looks for the next one every millisecond and for progress to
# report every 10 ms: on a machine whose cores the models fill, those wake-ups cost the models time
# (the page's event loop used 0.45 s of CPU in an 8-second answer on the real pair, 0.18 s at these).
# A new request then starts up to 20 ms later, and a progress message is sent up to 10 times a second.
QUEUE_POLL_S = 0.02
PROGRESS_POLL_S = 0.1


def queued(demo: gr.Blocks, **queue_settings: Any) -> gr.Blocks:
    """`demo.queue(**queue_settings)`, polling at the page's intervals (`QUEUE_POLL_S`)."""
    demo.queue(**queue_settings)
    queue = getattr(demo, "_queue", None)  # Gradio's own, with no public setting for its polling
    if queue is not None and hasattr(queue, "sleep_when_free"):
        queue.sleep_when_free = QUEUE_POLL_S
        queue.progress_update_sleep_when_free = PROGRESS_POLL_S
    return demo


def build_demo(engine_provider: EngineProvider, describe_models: Callable[[], str] | None = None,
               concurrency: int = 1, router: RouterSource | None = None) -> gr.Blocks:
    """The page. `engine_provider(progress)` returns the shared engine, loading it on first use, or lends
    one of a pool for the request (`EngineService.lease`); `concurrency` requests run at once (one per
    engine), the others wait in the queue. `router()` gives the learned rule's router the engines use
    (None: none, and that rule is not offered); it is asked when the page is built and when it loads."""
    examples = load_examples()
    with gr.Blocks(title="Cascade: a small model writes, a big model steps in") as demo:
        out: dict[str, gr.components.Component] = {"run": gr.State(None)}
        # The session's runs (handlers.Branch), the one shown, and the fork the next run starts from.
        branches, current, fork = gr.State([]), gr.State(None), gr.State(None)
        gr.Markdown(INTRO)
        models_md = gr.Markdown("")
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=300):
                inputs = {
                    "prompt": gr.Textbox(label="Prompt", lines=4, placeholder="Ask something, or start a text…",
                                         value=examples[0].prompt if examples else ""),
                    # A follow-up's earlier turns, as JSON (`conversation.py`): set by "Ask a follow-up", a
                    # branch or a link, read by Generate and by "Copy link" like any other setting.
                    "history": gr.Textbox(value="", visible="hidden", label="Earlier turns",
                                          elem_classes="cascade-history"),
                    "mode": gr.Radio([("Chat: the model answers", "chat"),
                                      ("Raw: the model continues the text", "raw")],
                                     value="chat" if limits(GenerationConfig, "chat")["default"] else "raw",
                                     label="Mode"),
                }
                with gr.Group(visible=False) as conversation_row:
                    conversation_md = gr.Markdown("", padding=True, elem_classes="cascade-conversation-line")
                    new_conversation_btn = gr.Button("New conversation", size="sm",
                                                     elem_classes="cascade-new-conversation")
                with gr.Accordion("System message and the answer's start", open=False,
                                  elem_classes="cascade-framing"):
                    inputs["system"] = gr.Textbox(
                        value="", label="System message (chat mode)", lines=2, placeholder="Empty: the model's own default",
                        info="Sets the assistant's role, through the model's chat template.")
                    inputs["answer_prefix"] = gr.Textbox(
                        value="", label="The answer starts with", lines=1, placeholder="e.g. ```python",
                        info="Given text: both models read it as the start of the answer and write on from it; "
                             "neither writes it. Shown in grey.")
                inputs.update(_settings_controls(current_router(router)))
                with gr.Row():
                    generate_btn = gr.Button("Generate", variant="primary")
                    stop_btn = gr.Button("Stop", variant="stop")
                with gr.Row():
                    copy_link_btn = gr.Button("Copy link", size="sm", elem_classes="cascade-copy-link")
                    out["download"] = gr.DownloadButton("Download this run", visible=False, size="sm",
                                                        elem_classes="cascade-download")
                link_box = gr.Textbox(label="Link to these settings (opening it fills the page the same way)",
                                      visible=True, interactive=False, elem_classes="cascade-link", lines=1,
                                      buttons=["copy"])
                if examples:
                    gr.Examples([[e.prompt, "chat" if e.chat else "raw"] for e in examples],
                                inputs=[inputs["prompt"], inputs["mode"]],
                                example_labels=[e.name for e in examples], label="Examples")
            with gr.Column(scale=5):
                out["summary"] = gr.Markdown(label="Summary",
                                             value="Press **Generate** to start. The first run loads the models, "
                                                   "which can take a while (a download, the first time).",
                                             elem_classes="cascade-summary")
                out["branches"] = gr.Radio([], label="Branches of this session", visible=False,
                                           elem_classes="cascade-branches")
                # A follow-up's earlier questions and answers: drawn when the conversation changes, not with
                # every picture of the answer being written (`conversation.conversation_panel`).
                earlier_html = gr.HTML("", visible=False, elem_classes="cascade-earlier-box",
                                       js_on_load=HOVER_JS + conversation.SHOW_TURN_JS)
                with gr.Row(equal_height=False):
                    out["text_html"] = gr.HTML(tokens.message_panel("The answer will appear here, token by token.",
                                                                    "info"), label="Answer",
                                               elem_classes="cascade-text-box", min_width=320, js_on_load=HOVER_JS)
                    out["chart"] = gr.Plot(label="Chart", show_label=False, elem_classes="cascade-chart",
                                           min_width=320)
                with gr.Row(visible=False, equal_height=False, elem_classes="cascade-followup") as followup_row:
                    followup_text = gr.Textbox(label="Ask a follow-up", lines=1, scale=5,
                                               placeholder="A question about this answer… (Enter asks it)",
                                               info="The models read the conversation so far, then your question. "
                                                    "The answers above stay, with their colours.")
                    followup_btn = gr.Button("Ask a follow-up", variant="primary", scale=1, min_width=140)
                compare_btn = gr.Button("Compare with the big model alone", variant="secondary")
                out["compare_html"] = gr.HTML("", label="Comparison", elem_classes="cascade-compare-box")
                with gr.Accordion("Which rule decides best?", open=True, visible=False,
                                  elem_classes="cascade-rules") as out["rules_box"]:
                    out["rules_text"] = gr.Markdown("", elem_classes="cascade-rules-text")
                    out["rules_chart"] = gr.Plot(label="Which rule decides best?", show_label=False,
                                                 elem_classes="cascade-rules-chart")
                with gr.Accordion("Plain text", open=False):
                    out["plain_text"] = gr.Textbox(label="Plain text", lines=6, buttons=["copy"])
                with gr.Accordion("Measured numbers (comparison)", open=False):
                    out["numbers"] = gr.JSON(label="Measured numbers")
        gr.Markdown(HOW_TO_READ)

        def outputs(names):
            return [out[name] for name in names]

        # Unprocessed inputs: the handler's one validator (GenerationConfig) judges every value, whatever
        # a browser or a script sends, and answers in words.
        # Generate reads the run shown too: a follow-up's earlier turns keep their colours when they are its.
        request = [inputs[name] for name in GENERATE_INPUTS] + [out["run"]]
        generating = generate_btn.click(
            make_generate(engine_provider), inputs=request,
            outputs=outputs(GENERATE_OUTPUTS), preprocess=False, api_name="generate", concurrency_limit=concurrency,
            concurrency_id="models", show_progress_on=[out["text_html"]])
        comparing = compare_btn.click(
            make_compare(engine_provider), inputs=[out["run"]], outputs=outputs(COMPARE_OUTPUTS),
            api_name="compare", concurrency_limit=concurrency, concurrency_id="models", show_progress_on=[out["compare_html"]])
        # A fork: a token chosen in a token's pinned table (hover.py) fills the answer's start and runs.
        # (Queued, as the follow-up below: Gradio shows a handler's refusal, a gr.Error, only for a queued event.)
        forking = out["text_html"].select(fork_start, inputs=[out["run"], current], outputs=[inputs["answer_prefix"], fork],
                                          show_progress="hidden", api_visibility="private")
        fork_generating = forking.success(
            make_generate(engine_provider), inputs=request,
            outputs=outputs(GENERATE_OUTPUTS), preprocess=False, concurrency_limit=concurrency,
            concurrency_id="models", show_progress_on=[out["text_html"]], api_visibility="private")
        # A follow-up: its question and the conversation so far fill the request's controls, then it runs.
        followup_events = []
        for asked in (followup_btn.click, followup_text.submit):
            asking = asked(ask_followup, inputs=[followup_text, out["run"]],
                           outputs=[inputs["prompt"], inputs["history"], inputs["answer_prefix"], followup_text],
                           show_progress="hidden", api_visibility="private")  # queued: a refusal shows as a toast
            followup_events.append(asking.success(
                make_generate(engine_provider), inputs=request, outputs=outputs(GENERATE_OUTPUTS), preprocess=False,
                concurrency_limit=concurrency, concurrency_id="models", show_progress_on=[out["text_html"]],
                api_visibility="private"))
        stopping = stop_btn.click(stop, inputs=[out["run"]], outputs=outputs(STOP_OUTPUTS),
                                  cancels=[generating, comparing, fork_generating, *followup_events], queue=False,
                                  api_visibility="private")
        inputs["history"].change(conversation_line, inputs=[inputs["history"], out["run"]],
                                 outputs=[conversation_row, conversation_md, earlier_html], queue=False,
                                 show_progress="hidden", api_visibility="private")
        new_conversation_btn.click(lambda: "", outputs=[inputs["history"]], queue=False, show_progress="hidden",
                                   api_visibility="private")
        for event in (generating, fork_generating, comparing, stopping, *followup_events):
            event.then(offer_download, inputs=[out["run"]], outputs=outputs(DOWNLOAD_OUTPUTS), queue=False,
                       show_progress="hidden", api_visibility="private")
            event.then(record_branch, inputs=[out["run"], branches, fork],
                       outputs=[branches, out["branches"], current, fork], queue=False, show_progress="hidden",
                       api_visibility="private")
            event.then(followup_box, inputs=[out["run"]], outputs=[followup_row], queue=False, show_progress="hidden",
                       api_visibility="private")
        showing = out["branches"].input(
            show_branch, inputs=[out["branches"], branches],
            outputs=outputs(BRANCH_OUTPUTS) + [current] + [inputs[name] for name in REQUEST_CONTROLS], queue=False,
            show_progress="hidden", api_visibility="private")
        showing.then(followup_box, inputs=[out["run"]], outputs=[followup_row], queue=False, show_progress="hidden",
                     api_visibility="private")
        # "show its chart" by an earlier question: that turn's branch, as if chosen in the list (queued, so a
        # refusal shows as a toast).
        showing_turn = earlier_html.select(
            show_turn, inputs=[out["run"], branches],
            outputs=outputs(BRANCH_OUTPUTS) + [current] + [inputs[name] for name in REQUEST_CONTROLS] + [out["branches"]],
            show_progress="hidden", api_visibility="private")
        showing_turn.then(followup_box, inputs=[out["run"]], outputs=[followup_row], queue=False,
                          show_progress="hidden", api_visibility="private")
        inputs["threshold"].change(whatif, inputs=[inputs["threshold"], out["run"], inputs["rule"]],
                                   outputs=outputs(WHATIF_OUTPUTS), queue=False, show_progress="hidden",
                                   trigger_mode="always_last", api_visibility="private")
        # A visitor's choice only (a link's rule is applied with its own threshold, below).
        inputs["rule"].input(make_rule_changed(router), inputs=[inputs["rule"], out["run"]],
                             outputs=[inputs["rule"], inputs["threshold"]] + outputs(WHATIF_OUTPUTS), queue=False,
                             show_progress="hidden", trigger_mode="always_last", api_visibility="private")
        copy_link_btn.click(None, inputs=[inputs[name] for name in GENERATE_INPUTS], outputs=[link_box],
                            js=copy_link_js(), api_visibility="private")
        link_controls = [inputs[name] for name in GENERATE_INPUTS]
        autorun = gr.State(False)
        loading = demo.load(make_apply_link(router), outputs=link_controls + [out["summary"], autorun, out["text_html"]],
                            queue=False, api_visibility="private")
        autorunning = loading.then(make_autorun(engine_provider), inputs=[autorun] + request,
                                   outputs=outputs(GENERATE_OUTPUTS), preprocess=False, concurrency_limit=concurrency,
                                   concurrency_id="models", show_progress_on=[out["text_html"]],
                                   api_visibility="private")
        autorunning.then(offer_download, inputs=[out["run"]], outputs=outputs(DOWNLOAD_OUTPUTS), queue=False,
                         show_progress="hidden", api_visibility="private")
        autorunning.then(record_branch, inputs=[out["run"], branches, fork],
                         outputs=[branches, out["branches"], current, fork], queue=False, show_progress="hidden",
                         api_visibility="private")
        autorunning.then(followup_box, inputs=[out["run"]], outputs=[followup_row], queue=False, show_progress="hidden",
                         api_visibility="private")
        if describe_models is not None:
            demo.load(describe_models, outputs=[models_md], queue=False, api_visibility="private")
    return demo


def show_turn(run: Any, branches: Any, evt: gr.SelectData) -> tuple:
    """An earlier turn's "show its chart": its branch shown (`show_branch`), and chosen in the list."""
    try:
        branch = turn_branch(run, evt.index, branches)
    except ValueError as e:
        raise gr.Error(f"Cannot show that turn: {e}.") from e
    return show_branch(branch.label, branches) + (branches_update(branches, branch.number),)


def fork_start(run: Any, current: Any, evt: gr.SelectData) -> tuple:
    """A token chosen in a token's table: the answer's start for the fork, and where it forked from."""
    try:
        prefix, chosen = fork_prefix(run, current, evt.index, evt.value)
    except ValueError as e:
        raise gr.Error(f"Cannot fork: {e}.") from e
    return gr.update(value=prefix), chosen


def make_rule_changed(router: RouterSource | None = None):
    def changed(rule: Any, run: Any) -> tuple:
        return rule_changed(rule, run, _trained_on(current_router(router)))

    return changed


def make_apply_link(router: RouterSource | None = None):
    """On load: the controls a link's query parameters set, a message about them, and whether to run.
    The rule's dropdown offers the learned rule only if the page has a router now; a linked rule brings
    its own threshold slider (range, label and the link's threshold, or the rule's default)."""

    def apply_link(request: gr.Request) -> tuple:
        loaded = current_router(router)
        link = read_link(dict(request.query_params) if request is not None else {},
                         rules=rulewords.offered(loaded is not None))
        updates = {name: gr.update(value=link.values[name]) if name in link.values else gr.skip()
                   for name in GENERATE_INPUTS}
        rule = link.values.get("rule", limits(GenerationConfig, "rule")["default"])
        updates["rule"] = gr.update(choices=rulewords.choices(loaded is not None),
                                    info=rulewords.rule_info(rule, _trained_on(loaded)),
                                    **({"value": rule} if "rule" in link.values else {}))
        if "rule" in link.values:
            updates["threshold"] = gr.update(**{**rulewords.slider_props(rule), "value": link.values["threshold"]})
        message = link.message()
        # A conversation's question waits under its earlier turns (drawn when the history field changes).
        history = conversation.parse_history(link.values.get("history", ""))
        waiting = (conversation.waiting_html(len(history) // 2 + 1, link.values.get("prompt", ""))
                   if history else gr.skip())
        return tuple(updates[name] for name in GENERATE_INPUTS) + (gr.skip() if message is None else message,
                                                                     link.run, waiting)

    return apply_link


apply_link = make_apply_link()  # a page without a router


def make_autorun(engine_provider: EngineProvider):
    """The generation a link with `run=1` starts when the page loads; nothing otherwise."""
    generate = make_generate(engine_provider)

    def autorun(asked: Any, *values: Any):
        if asked is True:  # (loading messages are not shown on this path: Gradio passes no progress)
            yield from generate(*values)
        else:
            yield Update().values(GENERATE_OUTPUTS)  # leave the page as the link made it

    return autorun
