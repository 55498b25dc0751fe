"""The page in a real browser: headless Chromium (Debian's package) driven by Playwright, on the toy models.

It types a prompt, generates, and checks what a visitor sees: red tokens, a chart with one point per
token and the threshold the share moved, and a what-if re-colouring when the share moves, or the threshold
chosen instead; that the share reaches the request and a link keeps it; and that the controls
under "More settings" start at the config's defaults and reach the request; that choosing a rule gives
the slider that rule's units and re-colours a run; and that after Compare the accordion "Which rule
decides best?" draws one curve per rule and the run. It leaves screenshots in artifacts/ (page.png,
page-whatif.png, page-from-link.png, page-rule-whatif.png, page-rules.png).
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from cascade import GenerationConfig  # noqa: E402
from cascade.engine.config import limits  # noqa: E402
from cascade.ui.controls import PAGE_START  # noqa: E402

from cascade.engine.engine import Engine  # noqa: E402
from cascade.routing.router import FEATURES, Router  # noqa: E402
from cascade.routing.rules import RULE_TABLE  # noqa: E402
from cascade.ui.style import fmt_threshold  # noqa: E402
from cascade.ui.controls import BY_THRESHOLD_LABEL, RULE_LABEL, SHARE_LABEL  # noqa: E402
from cascade.ui import rulewords  # noqa: E402
from cascade.ui.rulewords import slider_props  # noqa: E402

from .helpers import (ARTIFACTS, CHART_TRACES, COUNT, PROMPT, chart, copied_link,  # noqa: E402
                      engine_for, finished, generated, opened_link, serve, summary_reads, summary_text, write_at_most)

pytestmark = pytest.mark.browser

# The page starts with the big model writing 10% of the tokens (by the margin rule): both colours show. A what-if
# at 40% sends more to the big model; ticked to a threshold, the margin at 0.1 sends a good part of the toy pair's
# tokens (`small` drafting for `related`), and at a what-if margin of 0.03 fewer would go.
RUN_SHARE, WHATIF_SHARE = round(100 * PAGE_START.budget), 40
RUN_THRESHOLD, WHATIF_THRESHOLD = PAGE_START.threshold, 20.0
THRESHOLD_LABEL = slider_props(PAGE_START.rule)["label"]


def share_input(page):
    return page.get_by_label(f"number input for {SHARE_LABEL}")


def set_number(field, value) -> None:
    field.fill(str(value))
    field.press("Enter")


def decide_by_threshold(page, ticked: bool = True):
    """Ticks (or unticks) "Set a threshold instead"; with it ticked, the threshold's number field, once shown."""
    tick = page.get_by_label(BY_THRESHOLD_LABEL)
    tick.set_checked(ticked)
    if not ticked:
        share_input(page).wait_for(timeout=10_000)
        return None
    threshold = page.locator(".cascade-threshold input[type=number]")
    threshold.wait_for(timeout=10_000)
    return threshold


def test_a_visitor_generates_sees_red_tokens_a_chart_and_a_what_if(browser, page_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_url)
    page.get_by_label("Prompt").fill(PROMPT)
    page.get_by_label("Raw: the model continues the text").check()
    # The main control is the share; the threshold is one tick away.
    assert float(share_input(page).input_value()) == RUN_SHARE
    assert not page.get_by_label(BY_THRESHOLD_LABEL).is_checked()
    assert page.locator(".cascade-threshold input[type=number]").count() == 0
    page.get_by_role("button", name="Generate").click()
    finished(page, timeout=90_000)

    # Red tokens (the big model's) and plain ones (the small model's), each with a hover text; the summary
    # says the share asked and the threshold it meant.
    summary = summary_text(page)  # its first line, and the fold under it
    by_target, n_tokens = map(int, re.search(r"(\d+) of (\d+) tokens", summary).groups())
    assert 0 < by_target < n_tokens
    assert f"you asked for {RUN_SHARE}%" in summary and f"For this answer, {RUN_SHARE}% meant a threshold of" in summary
    red, plain = page.evaluate(COUNT, ".cascade-text .tok.red"), page.evaluate(COUNT, ".cascade-text .tok.draft")
    assert red > 0 and plain > 0
    assert "written by the big model" in page.get_attribute(".cascade-text .tok.red", "title")

    # The chart: one point per token, and the threshold the share moved, position by position.
    traces = chart(page)
    assert sum(t["n"] for t in traces if t["meta"] == "tokens") == n_tokens
    (line,) = [t for t in traces if t["meta"] == "threshold"]
    assert line["n"] == n_tokens and f"moved for a {RUN_SHARE}% share" in line["name"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page.png"), full_page=True)

    # Moving the share re-colours the recorded tokens as a what-if, without generating again.
    set_number(share_input(page), WHATIF_SHARE)
    page.wait_for_selector('.cascade-output[data-view="whatif"]', timeout=15_000)
    assert f"With the big model writing {WHATIF_SHARE}% of the tokens (this run asked for {RUN_SHARE}%)" in \
        page.inner_text(".whatif-banner")
    at_share = page.evaluate(COUNT, ".cascade-text .tok.red")
    assert at_share > red  # a larger share: more would go to the big model
    assert summary_text(page) == summary  # nothing was regenerated
    page.wait_for_function(f"() => (({CHART_TRACES})() || []).some(t => t.name.startsWith('what-if'))", timeout=15_000)
    assert sorted(t["n"] for t in chart(page) if t["meta"] == "threshold") == [n_tokens, n_tokens]

    # The threshold instead: a what-if at the threshold, moved by its slider as before.
    threshold = decide_by_threshold(page)
    assert float(threshold.input_value()) == RUN_THRESHOLD
    page.wait_for_function("(t) => (document.querySelector('.whatif-banner')?.innerText || '').includes(t)",
                           arg=f"At threshold {fmt_threshold(RUN_THRESHOLD)} (this run asked for {RUN_SHARE}%)",
                           timeout=15_000)
    at_run_threshold = page.evaluate(COUNT, ".cascade-text .tok.red")
    set_number(threshold, WHATIF_THRESHOLD)
    page.wait_for_function("(t) => (document.querySelector('.whatif-banner')?.innerText || '').includes(t)",
                           arg=f"At threshold {fmt_threshold(WHATIF_THRESHOLD)}", timeout=15_000)
    assert page.evaluate(COUNT, ".cascade-text .tok.red") < at_run_threshold  # a higher perplexity: fewer would go
    traces = chart(page)
    assert sum(t["n"] for t in traces if t["meta"] == "tokens") == n_tokens
    lines = {t["n"]: t for t in traces if t["meta"] == "threshold"}  # the what-if's, flat; the run's, as it moved
    assert lines[2]["y"] == [WHATIF_THRESHOLD] * 2 and n_tokens in lines
    page.screenshot(path=str(ARTIFACTS / "page-whatif.png"), full_page=True)
    page.close()


def test_the_share_reaches_the_request_and_a_copied_link_keeps_it_or_the_threshold(browser, page_url):
    from urllib.parse import parse_qs, urlsplit

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_url)
    page.get_by_label("Prompt").fill(PROMPT)
    page.get_by_label("Raw: the model continues the text").check()
    set_number(share_input(page), 25)
    page.get_by_role("button", name="Generate").click()
    finished(page)
    assert "you asked for 25%" in page.inner_text(".cascade-summary")
    text = page.inner_text(".cascade-text")
    link = copied_link(page)
    assert parse_qs(urlsplit(link).query)["budget"] == ["0.25"]

    # Opened (and run): the same share, the same text; the threshold still one tick away.
    again = browser.new_page(viewport={"width": 1400, "height": 1000})
    again.goto(link + "&run=1")
    finished(again)
    assert float(share_input(again).input_value()) == 25 and not again.get_by_label(BY_THRESHOLD_LABEL).is_checked()
    assert "you asked for 25%" in again.inner_text(".cascade-summary") and again.inner_text(".cascade-text") == text
    # Ticked to the threshold, the link names no share, and the threshold with its rule. (Such a link opens
    # with the threshold deciding, its box ticked and the share hidden: the next test opens one.)
    set_number(decide_by_threshold(again), 3.5)
    by_threshold = copied_link(again)
    query = parse_qs(urlsplit(by_threshold).query)
    assert "budget" not in query and query["threshold"] == ["3.5"] and query["rule"] == ["perplexity"]
    for opened in (again, page):
        opened.close()


# The controls under "More settings", by label, and the GenerationConfig field each sets.
MORE_SETTINGS = {
    "k: tokens the small model drafts per check (speculative)": "k",
    "Rollback threshold (bild)": "rollback_threshold",
    "Most unchecked tokens (bild)": "bild_window",
    "Longest n-gram to look up (lookup)": "lookup_ngram",
    "Most tokens to write": "max_tokens",
    "Temperature (0 = always the likeliest token)": "temperature",
    "Top-p (nucleus sampling; 1 keeps every token)": "top_p",
    "Top-k (0 keeps every token)": "top_k",
}


def test_more_settings_start_at_the_configs_defaults_and_reach_the_request(browser, page_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_url)
    page.get_by_text("More settings").click()
    for label, name in MORE_SETTINGS.items():
        shown = page.get_by_label(f"number input for {label}").input_value()
        assert float(shown) == getattr(PAGE_START, name) == limits(GenerationConfig, name)["default"], label
    assert int(page.get_by_label("Seed").input_value()) == limits(GenerationConfig, "seed")["default"]

    page.get_by_label("Prompt").fill(PROMPT)
    page.get_by_label("Raw: the model continues the text").check()
    write_at_most(page, 5)
    page.get_by_role("button", name="Generate").click()
    finished(page, timeout=60_000)
    summary = summary_text(page)
    assert re.search(r"\b5 tokens\b", summary) and "the most tokens allowed" in summary, summary
    page.close()


# ---- sharing a run ---------------------------------------------------------------------------------

# A link as "Copy link" wrote them before the page started at the margin rule: a threshold with no rule is a
# perplexity, and opens as one.
LINKED = {"prompt": "My name is Sam and I", "mode": "raw", "policy": "bild", "threshold": "3.5", "k": "2",
          "rollback_threshold": "12", "max_tokens": "9", "temperature": "0.7", "seed": "42"}


def shown_settings(page) -> dict[str, str]:
    """The controls' values: the threshold's where it decides ("Set a threshold instead" ticked), else the
    share's."""
    page.get_by_text("More settings").click()
    by_threshold = page.get_by_label(BY_THRESHOLD_LABEL).is_checked()
    deciding = page.locator(".cascade-threshold input[type=number]") if by_threshold else share_input(page)
    deciding.wait_for(timeout=10_000)
    return {"prompt": page.get_by_label("Prompt").input_value(),
            "raw": str(page.get_by_label("Raw: the model continues the text").is_checked()),
            "by_threshold": str(by_threshold),
            "threshold" if by_threshold else "share": deciding.input_value(),
            "k": page.get_by_label("number input for k: tokens the small model drafts per check (speculative)")
            .input_value(),
            "rollback_threshold": page.get_by_label("number input for Rollback threshold (bild)").input_value(),
            "max_tokens": page.get_by_label("number input for Most tokens to write").input_value(),
            "temperature": page.get_by_label("number input for Temperature (0 = always the likeliest token)")
            .input_value(),
            "seed": page.get_by_label("Seed").input_value()}


def test_a_link_fills_the_page_and_copy_link_gives_it_back(browser, page_url):
    from urllib.parse import parse_qs, urlencode, urlsplit

    page = opened_link(browser, page_url, urlencode(LINKED))
    shown = shown_settings(page)
    assert shown["prompt"] == LINKED["prompt"] and shown["raw"] == "True"
    assert shown["by_threshold"] == "True"  # a threshold and no share: the threshold decides, as it did then
    for name in ("threshold", "k", "rollback_threshold", "max_tokens", "temperature", "seed"):
        assert float(shown[name]) == float(LINKED[name]), name
    assert "bild" in page.inner_text(".cascade-text-box, body")  # the dropdown shows the linked policy

    # Generate, then "Copy link": the URL carries the same settings, and opening it fills the page again.
    page.get_by_role("button", name="Generate").click()
    finished(page, timeout=60_000)
    text = page.locator(".cascade-text").inner_text()
    page.get_by_role("button", name="Copy link").click()
    box = page.locator(".cascade-link textarea, .cascade-link input")
    page.wait_for_function("() => { const e = document.querySelector('.cascade-link textarea, .cascade-link input');"
                           " return e && e.value.startsWith('http'); }", timeout=15_000)
    link = box.input_value()
    query = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    assert query["prompt"] == LINKED["prompt"] and query["policy"] == "bild" and query["mode"] == "raw"
    assert float(query["threshold"]) == 3.5 and int(query["k"]) == 2 and int(query["seed"]) == 42
    assert query["rule"] == "perplexity" and "budget" not in query  # a copied link names its rule; no share here

    again = browser.new_page(viewport={"width": 1400, "height": 1000})
    again.goto(link + "&run=1")  # and start it at once: the same request writes the same text
    finished(again, timeout=60_000)
    assert again.locator(".cascade-text").inner_text() == text
    assert shown_settings(again) == shown_settings(page)  # the threshold, 3.5, deciding: its box ticked
    assert not share_input(again).is_visible()  # and the share hidden
    again.screenshot(path=str(ARTIFACTS / "page-from-link.png"), full_page=True)
    # The finished run can be downloaded as one file.
    with again.expect_download() as download:
        again.get_by_role("button", name="Download this run").click()
    assert download.value.suggested_filename.endswith(".html")
    again.close()
    page.close()


def test_a_link_with_bad_settings_says_which_and_keeps_the_defaults_and_one_too_long_says_to_download_instead(
        browser, page_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{page_url}?prompt=Hello&k=0&temperature=hot&policy=seed&model=/etc/passwd")
    page.wait_for_function("() => /could not all be used/.test(document.querySelector('.cascade-summary')?.innerText)",
                           timeout=30_000)
    message = page.inner_text(".cascade-summary")
    assert "k must be between 1 and 32, got 0" in message and "temperature must be a number" in message
    assert "'seed' is not offered" in message and "'model' is not a setting" in message
    shown = shown_settings(page)
    assert shown["prompt"] == "Hello" and float(shown["share"]) == RUN_SHARE  # the page's start: a share
    assert float(shown["k"]) == limits(GenerationConfig, "k")["default"]
    assert float(shown["temperature"]) == limits(GenerationConfig, "temperature")["default"]
    # A prompt too long for a link to open reliably: "Copy link" says to download the run instead.
    page.get_by_label("Prompt").fill("word " * 2000)
    page.get_by_role("button", name="Copy link").click()
    page.wait_for_function("() => /download the run instead/.test(document.querySelector("
                           "'.cascade-link textarea, .cascade-link input')?.value || '')", timeout=15_000)
    page.close()


# ---- the rule, and which rule decides best -----------------------------------------------------------

RULES_TRACES = """() => {
  const plot = document.querySelector('.cascade-rules-chart .js-plotly-plot');
  return plot && plot.data ? plot.data.map(t => ({name: t.name, meta: t.meta, x: Array.from(t.x), y: Array.from(t.y)}))
                           : null;
}"""
# (A threshold named, so the threshold decides: the rule's slider is the one shown.)
SHORT_RUN = {"prompt": PROMPT, "mode": "raw", "rule": "perplexity", "threshold": "5", "max_tokens": "16", "run": "1"}


def compare_and_read_the_rules(page) -> list[dict]:
    page.get_by_role("button", name="Compare with the big model alone").click()
    page.wait_for_function(f"() => (({RULES_TRACES})() || []).some(t => t.meta === 'curve')", timeout=90_000)
    assert page.get_by_text("Which rule decides best?").first.is_visible()
    return page.evaluate(RULES_TRACES)


def rule_options(page, choose: str | None = None) -> list[str]:
    """The rule dropdown's options; with `choose`, that option is then chosen (otherwise the list closes)."""
    page.get_by_label(RULE_LABEL).click()
    options = page.get_by_role("option").all_inner_texts()
    if choose is None:
        page.keyboard.press("Escape")
    else:
        page.get_by_role("option", name=choose).click()
    return options


def test_a_rule_changes_the_slider_and_recolours_and_compare_draws_three_curves(browser, page_url):
    from urllib.parse import urlencode

    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(f"{page_url}?{urlencode(SHORT_RUN)}")
    finished(page)
    # This page has no router: no learned rule. Another rule: the slider takes its units and default, and
    # the run is re-coloured by it.
    assert len(rule_options(page, choose=rulewords.label("margin"))) == 3
    threshold = page.get_by_label("number input for Threshold (margin, top-1 minus top-2)")
    threshold.wait_for(timeout=15_000)
    margin = RULE_TABLE["margin"].default
    assert float(threshold.input_value()) == margin
    page.wait_for_selector('.cascade-output[data-view="whatif"][data-rule="margin"]', timeout=15_000)
    assert f"By the margin rule at threshold {fmt_threshold(margin)}" in page.inner_text(".whatif-banner")
    page.wait_for_function(f"() => (({CHART_TRACES})() || []).some(t => t.name.startsWith('what-if'))", timeout=15_000)
    title = page.evaluate("() => document.querySelector('.cascade-chart .js-plotly-plot').layout.yaxis.title.text")
    assert "margin" in title and "below the line" in title
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page-rule-whatif.png"), full_page=True)

    # Copy link carries the rule with its threshold (in the rule's units, so always with it).
    from urllib.parse import parse_qs, urlsplit

    page.get_by_role("button", name="Copy link").click()
    page.wait_for_function("() => { const e = document.querySelector('.cascade-link textarea, .cascade-link input');"
                           " return e && /rule=/.test(e.value); }", timeout=15_000)
    query = parse_qs(urlsplit(page.locator(".cascade-link textarea, .cascade-link input").input_value()).query)
    assert query["rule"] == ["margin"] and float(query["threshold"][0]) == margin

    traces = compare_and_read_the_rules(page)
    assert [t["name"] for t in traces if t["meta"] == "curve"] == ["the perplexity rule", "the entropy rule",
                                                                    "the margin rule"]
    (point,) = [t for t in traces if t["meta"] == "run"]
    assert 0 <= point["x"][0] <= 100 and 0 <= point["y"][0] <= 100
    assert "To match the big model on 95% of tokens" in page.inner_text(".cascade-rules-text")
    page.close()


@pytest.fixture(scope="module")
def routed_url(toy):
    """A page whose engine has a toy router (P(the big model differs) = logistic(entropy - 1.5)) and has
    measured its costs, as the page's engines do when they load."""
    coef = [0.0] * len(FEATURES)
    coef[FEATURES.index("entropy")] = 1.0
    import numpy as np

    router = Router(FEATURES, mean=np.zeros(len(FEATURES)), scale=np.ones(len(FEATURES)), coef=np.array(coef),
                    intercept=-1.5, pair={"draft": "toy-small.gguf", "target": "toy-related.gguf"})
    engine = Engine(engine_for(toy.small, toy.related).pair, router=router)
    engine.calibrate()
    demo, url = serve(lambda progress: engine, router=lambda: router)
    yield url
    demo.close()


def test_with_a_router_the_learned_rule_is_offered_and_compare_draws_four_curves(browser, routed_url):
    from urllib.parse import urlencode

    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(f"{routed_url}?{urlencode({**SHORT_RUN, 'rule': 'learned', 'threshold': '0.9'})}")
    finished(page)
    assert "learned rule" not in summary_text(page)  # the link's rule was offered and used
    assert float(page.get_by_label("number input for Threshold (learned, probability)").input_value()) == 0.9
    assert "toy-small.gguf → toy-related.gguf" in page.inner_text("body")  # which pair the router learned on
    assert len(rule_options(page)) == 4

    traces = compare_and_read_the_rules(page)
    assert [t["name"] for t in traces if t["meta"] == "curve"][-1] == "the learned router"
    assert sum(t["meta"] == "curve" for t in traces) == 4 and sum(t["meta"] == "run" for t in traces) == 1
    assert [t["name"] for t in traces if t["meta"] == "break_even"] == ["sharing pays left of here on this machine"]
    summary_text(page)  # its fold opened; the comparison's last step draws it once the curves are shown
    page.wait_for_function("() => /break-even for this machine/.test("
                           "document.querySelector('.cascade-more-text')?.innerText || '')", timeout=10_000)
    page.locator(".cascade-rules").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "page-rules.png"), full_page=True)
    page.close()


@pytest.fixture(scope="module")
def generated_page(browser, page_url):
    """One page that has generated the toy prompt as raw text, shared by the tests that read a finished run (a page
    costs seconds to load and draw). Each leaves it showing that run, its token tables closed; the fork's test
    adds a second branch and shows the first again."""
    page = generated(browser, page_url)
    yield page
    page.close()


def test_the_summary_says_whether_sharing_keeps_the_answers_right_and_names_its_source(generated_page):
    """Beside the speed, the shipped pass rates' source; the toy models are not the pair measured, so none is quoted."""
    page = generated_page
    summary = summary_text(page)
    assert "No pass rate was measured for this pair (toy-small" in summary and "humaneval" in summary
    assert not re.search(r"alone solved \d+%", summary)
    page.screenshot(path=str(ARTIFACTS / "page-quality.png"), full_page=True)


def test_a_raw_answer_offers_no_follow_up(generated_page):
    # A follow-up needs the chat template: under a raw answer, none is offered.
    assert not generated_page.get_by_label("Ask a follow-up").is_visible()


def test_hovering_a_token_shows_both_models_likeliest_tokens_side_by_side(generated_page):
    page = generated_page
    tip = page.locator("body > .cascade-alts")

    # A token the big model wrote: both lists, the written token marked in the big model's.
    red = page.locator(".cascade-text .tok.red").first
    written = red.inner_text()
    red.hover()
    tip.wait_for(state="visible", timeout=10_000)
    columns = tip.locator(".alts-columns > div")
    assert columns.count() == 2
    small, big = columns.nth(0), columns.nth(1)
    assert "small model" in small.inner_text() and "big model" in big.inner_text()
    assert small.locator("tr").count() == 5 and big.locator("tr").count() == 5
    assert all(re.search(r"\d%$", row) for row in big.locator("tr").all_inner_texts())
    assert big.locator("tr.chosen").count() == 1 and written.strip() in big.locator("tr.chosen").inner_text()
    # Its details (who wrote it, how sure each model was) are in the table's head, not a browser tooltip.
    assert "written by the big model" in tip.locator(".alts-details").inner_text()
    assert red.get_attribute("title") is None
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page-hover.png"))

    # A token the small model wrote alone: its list, and the big model's from its reading of the finished
    # text for the summary (the only time it read that position).
    page.mouse.move(0, 0)
    tip.wait_for(state="hidden", timeout=5_000)
    page.locator(".cascade-text .tok.draft").first.hover()
    tip.wait_for(state="visible", timeout=10_000)
    assert [tip.locator(".alts-columns > div").nth(i).locator("tr").count() for i in (0, 1)] == [5, 5]
    page.mouse.move(0, 0)
    tip.wait_for(state="hidden", timeout=5_000)


def test_choosing_another_token_forks_a_branch_that_names_its_parent_its_link_replays_it_and_branches_switch_back(
        browser, generated_page):
    page = generated_page
    first_text, first_summary = page.inner_text(".cascade-text"), page.inner_text(".cascade-summary")
    first_points = sum(t["n"] for t in chart(page) if t["meta"] == "tokens")

    # Click a token: its table stays, with each token a choice; choose one the run did not write.
    token = page.locator(".cascade-text .tok.red").nth(1)
    token.click()
    tip = page.locator("body > .cascade-alts")
    tip.wait_for(state="visible", timeout=10_000)
    assert "Choose a token" in tip.inner_text()
    choice = tip.locator(".alts-columns > div").nth(1).locator("tr.choice:not(.chosen)").first
    chosen = choice.locator("td").first.inner_text().strip("“”")
    choice.click()

    # The fork runs: listed as the second branch once it has run, its answer starts with the text before that
    # token and the chosen one, given. (Its summary's first line may read as the first run's: at a 10% share both
    # give the big model 13 of 128 tokens, often in the same hundredths of a second; its text cannot.)
    branches = page.locator(".cascade-branches")
    page.wait_for_function("() => /2 · fork of 1 at token/.test(document.querySelector('.cascade-branches')"
                           "?.innerText)", timeout=90_000)
    finished(page)
    assert chosen in branches.inner_text()
    given = page.locator(".cascade-text .tok.given").inner_text()
    assert given.endswith(chosen) and first_text.startswith(given[:-len(chosen)])
    fork_text = page.inner_text(".cascade-text")
    assert fork_text != first_text
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page-fork.png"), full_page=True)

    # Its link replays the fork: opened and run, the same text, with the chosen token given.
    again = browser.new_page(viewport={"width": 1400, "height": 1000})
    again.goto(copied_link(page) + "&run=1")
    finished(again)
    assert again.inner_text(".cascade-text") == fork_text
    assert again.locator(".cascade-text .tok.given").count() == 1
    again.close()

    # Branch 1 again: its text, chart and numbers, with no generation.
    branches.locator("label").filter(has_text="1 · ").click()
    page.wait_for_function("(t) => document.querySelector('.cascade-text')?.innerText === t", arg=first_text,
                           timeout=15_000)
    summary_reads(page, first_summary)
    page.wait_for_function(f"(n) => (({CHART_TRACES})() || []).filter(t => t.meta === 'tokens')"
                           f".reduce((a, t) => a + t.n, 0) === n", arg=first_points, timeout=15_000)
    finished(page)
