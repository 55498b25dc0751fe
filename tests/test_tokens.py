"""The text as the page shows it: one span per token, red where the big model wrote it, and its what-if."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from html.parser import HTMLParser

from cascade.engine.analysis import Decision, Routing, RunView
from cascade.engine.config import GenerationConfig
from cascade.engine.events import TokenEvent
from cascade.ui import tokens
from cascade.ui.runfile import run_html
from cascade.ui.style import RED

from .helpers import assert_snapshot
from .recorded import AT_5, BY_SHARE, CASCADE, SPECULATIVE, TARGET_ONLY, accepted, ev, spans


def seen(markup: str) -> str:
    """What a visitor reads of a panel: its text, then each hover, one a line."""
    hovers = [html.unescape(t) for t in re.findall(r'title="([^"]*)"', markup)]
    text = html.unescape(re.sub(r"<[^>]+>", "", markup))
    return text + "".join(f"\n  hover: {h}" for h in hovers)


def surface() -> list[tuple[str, str]]:
    """The text panel's words and hovers over recorded runs, labelled by case."""
    escalated = [read(0, " sat", 0.4, 0.35, 1.9, status="escalated"),
                 TokenEvent(position=0, token_id=7, text=" lay", source="target", status="accepted", draft_ppl=None,
                            target_ppl=1.5, t=0.2)]
    return [
        ("the run", tokens.text_panel(Routing(CASCADE), RunView(AT_5))),
        ("a what-if threshold", tokens.text_panel(Routing(CASCADE), RunView(AT_5, threshold=1.5))),
        ("a what-if, some positions unscored", tokens.text_panel(Routing(SPECULATIVE), RunView(AT_5, threshold=1.2))),
        ("no what-if: the big model alone", tokens.text_panel(Routing(TARGET_ONLY), RunView(AT_5, threshold=1.2))),
        ("a what-if by another rule", tokens.text_panel(Routing(READ), RunView(AT_5, threshold=0.4, rule="margin"))),
        ("no what-if: the learned router without scores",
         tokens.text_panel(Routing(READ), RunView(AT_5, threshold=0.5, rule="learned"))),
        ("a run judged by the margin rule", tokens.tokens_html(Routing(escalated), run_rule="margin")),
        ("a what-if share", tokens.text_panel(Routing(CASCADE), RunView(AT_5, budget=0.4))),
        ("a what-if threshold on a run a share decided",
         tokens.text_panel(Routing(CASCADE), RunView(BY_SHARE, threshold=1.5))),
        ("a what-if share by another rule",
         tokens.text_panel(Routing(READ), RunView(BY_SHARE, rule="margin", budget=0.5))),
        ("rolled back", tokens.tokens_html(Routing([ev(0, " q", status="rolled_back", draft_ppl=1.5, target_ppl=40.0),
                                                    ev(0, " r", source="target")]))),
    ]


def test_the_text_panel_reads_as_kept():
    assert_snapshot("tokens", "".join(f"## {label}\n{seen(markup)}\n\n" for label, markup in surface()))


def test_model_text_is_escaped_in_the_text_and_in_the_hover():
    events = [ev(0, '<script>alert("x")</script>', draft_ppl=1.0),
              ev(1, '" onmouseover="boom', source="target", target_ppl=2.0)]
    markup = tokens.tokens_html(Routing(events))
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    assert 'onmouseover="boom' not in markup  # the quote cannot close the title attribute
    assert spans(markup, "tok") == ['<script>alert("x")</script>', '" onmouseover="boom']


def test_the_targets_tokens_are_red_and_the_drafts_plain():
    markup = tokens.tokens_html(Routing(CASCADE))
    assert spans(markup, "red") == [" lay"]
    assert spans(markup, "draft") == ["The", " cat", " <b>&amp;</b>", "\n"]
    red_style = re.search(r'<span class="tok red target"[^>]* style="([^"]*)"', markup).group(1)
    assert RED in red_style


def test_the_whole_text_is_there_in_order_with_its_newlines():
    panel = tokens.text_panel(Routing(CASCADE), RunView(AT_5))
    assert "".join(spans(panel, "tok")) == "".join(e.text for e in accepted(CASCADE))
    assert "white-space:pre-wrap" in panel  # newlines and runs of spaces show as written


def test_an_escalated_draft_token_is_told_in_the_hover_of_the_red_token():
    markup = tokens.tokens_html(Routing(CASCADE))
    assert "sat" not in re.sub(r'title="[^"]*"', "", markup)  # not inline
    title = html.unescape(re.search(r'<span class="tok red target" title="([^"]*)"', markup).group(1))
    assert "“ sat”" in title and "7.00" in title and "unsure" in title
    assert "1.50" in title  # the big model's perplexity of its token


def test_rejected_and_rolled_back_draft_tokens_are_struck_through_where_they_were_drafted():
    markup = tokens.tokens_html(Routing(SPECULATIVE))
    assert spans(markup, "discarded") == [" x", " y"]
    assert markup.index(" b<") < markup.index(" x<") < markup.index(" z<")
    assert markup.count("<s ") == 2 and "line-through" in markup
    rolled = [ev(0, " q", status="rolled_back", draft_ppl=1.5, target_ppl=40.0), ev(0, " r", source="target")]
    assert "rolled back" in html.unescape(tokens.tokens_html(Routing(rolled)))


def test_an_empty_token_adds_no_element():
    # Half a character: the engine sends it with empty text, and the next token completes it.
    events = [ev(0, "", draft_ppl=1.2), ev(1, "é", draft_ppl=1.3)]
    assert spans(tokens.tokens_html(Routing(events)), "tok") == ["é"]


# ---- the what-if ---------------------------------------------------------------------------------

def test_moving_the_threshold_recolours_the_recorded_tokens_as_a_what_if():
    low = tokens.text_panel(Routing(CASCADE), RunView(AT_5, threshold=1.5))
    high = tokens.text_panel(Routing(CASCADE), RunView(AT_5, threshold=50.0))
    assert 'data-view="whatif"' in low and "What-if" in low and "nothing was regenerated" in low
    assert spans(low, "red") == [" cat", " lay", " <b>&amp;</b>"]  # recorded perplexities 2.0, 7.0, 3.0 > 1.5
    assert spans(high, "red") == []
    assert "3 of 5 tokens" in low and "1 of 5" in low


def test_the_run_threshold_itself_shows_the_real_run():
    panel = tokens.text_panel(Routing(CASCADE), RunView(AT_5, threshold=5.0))
    assert 'data-view="run"' in panel and "What-if" not in panel
    assert panel == tokens.text_panel(Routing(CASCADE), RunView(AT_5))


def test_positions_without_a_draft_score_have_no_what_if():
    panel = tokens.text_panel(Routing(SPECULATIVE), RunView(AT_5, threshold=1.2))
    assert spans(panel, "nowhatif") == [" v"]
    assert "3 of 4 tokens" in panel and "2 of 5" in panel
    only_target = tokens.text_panel(Routing(TARGET_ONLY), RunView(AT_5, threshold=1.2))
    assert "No what-if" in only_target and 'data-view="run"' in only_target
    assert spans(only_target, "red") == [" t0", " t1", " t2"]


# ---- messages in the text's place ----------------------------------------------------------------

def test_a_message_is_escaped_and_an_error_is_marked_as_one():
    error = tokens.message_panel("the prompt <b>is</b> empty", "error")
    assert "&lt;b&gt;" in error and "<b>" not in error and 'data-kind="error"' in error and RED in error
    assert 'data-kind="info"' in tokens.message_panel("Press Generate")


# ---- by another rule --------------------------------------------------------------------------------

def read(position, text, top1, top2, entropy, source="draft", status="accepted"):
    return TokenEvent(position=position, token_id=position, text=text, source=source, status=status,
                      draft_ppl=1 / top1, target_ppl=1.2, t=0.1 * (position + 1), draft_top1=top1, draft_top2=top2,
                      draft_entropy=entropy)


# By the seed's rule at 5 the draft kept everything; its margins were 0.85, 0.3, 0.05, 0.7.
READ = [read(0, "The", 0.9, 0.05, 0.4), read(1, " cat", 0.6, 0.3, 1.1), read(2, " sat", 0.4, 0.35, 1.9),
        read(3, " on", 0.8, 0.1, 0.7)]


def test_a_what_if_by_another_rule_recolours_by_its_numbers_and_says_which():
    routing = Routing(READ)
    panel = tokens.text_panel(routing, RunView(AT_5, threshold=0.4, rule="margin"))
    assert 'data-view="whatif"' in panel and 'data-rule="margin"' in panel
    assert spans(panel, "whatif-target") == [" cat", " sat"]  # margins below 0.4
    would, scored, total = routing.at_threshold(0.4, "margin").counts
    text = html.unescape(panel)
    assert "margin rule" in text and "0.4" in text and "0.050" in text  # the rule, its threshold, a token's margin
    assert f"{would} of {scored} tokens" in text and f"0 of {total}" in text
    # The run's own rule and threshold: the run as it was.
    assert 'data-view="run"' in tokens.text_panel(routing, RunView(AT_5, threshold=5.0, rule="perplexity"))


def test_a_rule_whose_numbers_the_run_lacks_shows_the_run_and_says_so():
    panel = tokens.text_panel(Routing(READ), RunView(AT_5, threshold=0.5, rule="learned"))
    assert 'data-view="run"' in panel and "No what-if" in panel and "learned router" in panel


def test_a_run_judged_by_another_rule_tells_its_number_in_the_hover():
    escalated = [read(0, " sat", 0.4, 0.35, 1.9, status="escalated"),
                 TokenEvent(position=0, token_id=7, text=" lay", source="target", status="accepted", draft_ppl=None,
                            target_ppl=1.5, t=0.2)]
    markup = html.unescape(tokens.tokens_html(Routing(escalated), run_rule="margin"))
    assert "unsure" in markup and "margin rule" in markup and "0.050" in markup


# ---- code shown as code ----------------------------------------------------------------------------

class Tokens(HTMLParser):
    """The token elements of a panel, each (text, its classes, its data-alt, inside a code block?)."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, str, str | None]] = []  # (tag, class, data-alt) of each open element
        self.tokens: list[tuple[str, str, str | None, bool]] = []
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.open.append((tag, attrs.get("class") or "", attrs.get("data-alt")))
        if "tok" in (attrs.get("class") or "").split():
            self.tokens.append(("", attrs["class"], attrs.get("data-alt"), self.in_block))

    def handle_endtag(self, tag):
        self.open.pop()

    def handle_data(self, data):
        if self.open and "tok" in self.open[-1][1].split():
            text, cls, alt, block = self.tokens[-1]
            self.tokens[-1] = (text + data, cls, alt, block)

    @property
    def in_block(self) -> bool:
        return any(cls == "cascade-code" for _, cls, _ in self.open)


def block_text(markup: str) -> str:
    """The text in the code block (refused drafts, not part of the text, left out)."""
    return "".join(text for text, cls, _, block in Tokens(markup).tokens if block and "discarded" not in cls)


def topped(e: TokenEvent) -> TokenEvent:
    """The event with both models' likeliest tokens, so its span carries the hover's data."""
    return replace(e, draft_top=((e.text, 0.9),), target_top=((e.text, 0.8),))


# An answer with prose, a fence split across three tokens ("``", "`py", "thon\n"), code with a token of the
# big model's and a refused draft in it, a closing fence in the same token as the prose after it.
FENCED = [topped(e) for e in [
    ev(0, "Here", draft_ppl=1.1), ev(1, ":\n", draft_ppl=1.2), ev(2, "``", draft_ppl=1.3),
    ev(3, "`py", source="target", draft_ppl=8.0, target_ppl=1.1), ev(4, "thon\n", draft_ppl=1.1),
    ev(5, "def", draft_ppl=1.2), ev(6, " f():\n    ", draft_ppl=1.3),
    ev(7, " x", status="rejected", draft_ppl=1.5, target_ppl=30.0),
    ev(7, "pass", source="target", draft_ppl=9.0, target_ppl=1.2),
    ev(8, "\n```\n\nDone", draft_ppl=1.1)]]


def test_fenced_code_is_a_monospace_block_whose_tokens_keep_their_colour_and_hover():
    panel = tokens.text_panel(Routing(FENCED), RunView(AT_5))
    assert panel.count('<span class="cascade-code"') == 1
    style = re.search(r'<span class="cascade-code" style="([^"]*)"', panel).group(1)
    assert "monospace" in style and "white-space:pre-wrap;" in style and "display:block" in style
    found = Tokens(panel).tokens
    assert block_text(panel) == "```python\ndef f():\n    pass\n```\n"  # the fences' lines in the block, dimmed
    assert "code-fence" in panel and tokens.FENCE_STYLE in panel
    # Outside the block, prose: the text before the fence and after its closing line.
    assert "".join(t for t, _, _, block in found if not block) == "Here:\n\nDone"
    # Every token keeps its writer's class and its hover data, inside the block as outside it.
    assert ("pass", "tok red target") == next((t, c) for t, c, _, _ in found if t == "pass")
    assert all(alt for _, _, alt, _ in found)
    assert spans(panel, "discarded") == [" x"] and '<s class="tok discarded"' in panel.split("cascade-code")[1]
    # The whole text, in order, as the models wrote it: the plain text to copy is the same.
    assert "".join(t for t, c, _, _ in found if "discarded" not in c) == "".join(e.text for e in accepted(FENCED))


def test_a_token_across_the_edge_of_a_block_is_drawn_in_parts_each_with_its_class_and_data():
    found = Tokens(tokens.tokens_html(Routing(FENCED))).tokens
    closing = [(t, c, block) for t, c, alt, block in found if alt and json.loads(alt)[2] == 8]
    # "\n```\n\nDone": the code's last newline, the closing fence's line, then prose after the block.
    assert closing == [("\n", "tok draft", True), ("```\n", "tok draft", True), ("\nDone", "tok draft", False)]
    assert len({alt for _, _, alt, _ in found if alt and json.loads(alt)[2] == 8}) == 1  # the same data


def test_a_fence_still_open_while_the_answer_streams_runs_to_the_end_of_the_text():
    streaming = FENCED[:7]  # "…def f():\n    ", no closing fence yet
    panel = tokens.text_panel(Routing(streaming), RunView(AT_5))
    assert block_text(panel) == "```python\ndef f():\n    "
    assert panel.count("<span") == panel.count("</span>")  # the block is closed in the HTML all the same
    half = tokens.tokens_html(Routing(FENCED[:3]))  # "Here:\n``": not a fence yet
    assert "cascade-code" not in half and block_text(tokens.tokens_html(Routing(FENCED[:4]))) == "```py"


def test_an_answer_start_that_opens_the_fence_puts_the_models_code_in_the_block():
    code = [ev(0, "def", draft_ppl=1.2), ev(1, " f", source="target", target_ppl=1.1), ev(2, "():\n", draft_ppl=1.1)]
    panel = tokens.text_panel(Routing(code), RunView(AT_5), given="```python\n")
    found = Tokens(panel).tokens
    assert [(t, c, block) for t, c, _, block in found] == [
        ("```python\n", "tok given", True), ("def", "tok draft", True), (" f", "tok red target", True),
        ("():\n", "tok draft", True)]
    assert panel.index("cascade-code") < panel.index("tok given")
    # A start that is prose, then the fence: the prose stays outside, grey all the same.
    found = Tokens(tokens.tokens_html(Routing(code), given="Sure:\n```python\n")).tokens
    assert [(t, block) for t, c, _, block in found if c == "tok given"] == [("Sure:\n", False), ("```python\n", True)]


def test_the_what_if_recolours_the_tokens_inside_the_block():
    panel = tokens.text_panel(Routing(FENCED), RunView(AT_5, threshold=1.15))
    assert 'data-view="whatif"' in panel and block_text(panel) == "```python\ndef f():\n    pass\n```\n"
    inside = [c for t, c, _, block in Tokens(panel).tokens if block]
    assert "tok red whatif-target" in inside and "tok whatif-draft" in inside


def test_text_without_a_fence_has_no_block():
    assert "cascade-code" not in tokens.text_panel(Routing(CASCADE), RunView(AT_5))


def test_the_saved_run_file_draws_the_same_block():
    config = GenerationConfig(policy="cascade", threshold=5.0, max_tokens=16, chat=True)
    page = run_html("Write f", config, FENCED, None, models={"draft": "d.gguf", "target": "t.gguf"},
                    machine={"cpu": "toy", "cores": 2, "threads": 2}, created="today")
    assert f'<span class="cascade-code" style="{tokens.CODE_STYLE}">' in page
    assert block_text(page.split('<section class="cascade-result">')[1].split("</section>")[0]).startswith("```python")


# ---- by a share of the tokens (a budget) ---------------------------------------------------------------

def test_a_what_if_by_a_share_recolours_by_the_replayed_thresholds_and_says_what_the_run_did():
    routing = Routing(CASCADE)
    panel = tokens.text_panel(routing, RunView(AT_5, budget=0.4))
    whatif = routing.whatif(Decision("perplexity", 5.0, 0.4))
    text = html.unescape(panel)
    assert 'data-view="whatif"' in panel and len(spans(panel, "whatif-target")) == whatif.counts[0]
    assert "40%" in text and f"{whatif.counts[0]} of 5 tokens" in text and "1 of 5" in text
    assert text.count("40%") > len(accepted(CASCADE))  # each token's hover names the share too


def test_a_run_a_share_decided_shows_as_it_was_at_its_share_and_a_threshold_is_a_what_if():
    routing = Routing(CASCADE)
    same = tokens.text_panel(routing, RunView(BY_SHARE, threshold=3.0, budget=0.2))
    assert 'data-view="run"' in same and same == tokens.text_panel(routing, RunView(BY_SHARE))
    by_threshold = html.unescape(tokens.text_panel(routing, RunView(BY_SHARE, threshold=1.5)))
    assert "1.5" in by_threshold and "20%" in by_threshold and "3 of 5 tokens" in by_threshold
    other_rule = html.unescape(tokens.text_panel(Routing(READ), RunView(BY_SHARE, rule="margin", budget=0.5)))
    assert all(words in other_rule for words in ("margin rule", "50%", "20%", "perplexity rule"))
