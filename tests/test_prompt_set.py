"""The router's fixed prompt set (examples/router/) and its loader."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lab.prompts import PROMPT_SET_DIR, SPLITS, PromptItem, load_prompts, load_split

KINDS = ("prose", "list", "dialogue", "code", "arithmetic", "factual", "instructions", "creative",
         "translation", "summarise", "structured")


@pytest.fixture(scope="module")
def splits() -> dict[str, list[PromptItem]]:
    return {split: load_split(split) for split in SPLITS}


def test_the_set_is_large_and_distinct(splits):
    prompts = [item.prompt for items in splits.values() for item in items]
    assert len(prompts) >= 200
    assert len(set(prompts)) == len(prompts), [p for p, n in Counter(prompts).items() if n > 1]


def test_train_and_test_share_no_prompt(splits):
    assert not {i.prompt for i in splits["train"]} & {i.prompt for i in splits["test"]}
    assert len(splits["test"]) >= 40 and len(splits["train"]) > len(splits["test"])


def test_every_kind_in_both_splits_and_no_other(splits):
    for split, items in splits.items():
        kinds = Counter(item.kind for item in items)
        assert set(kinds) == set(KINDS), (split, kinds)
    # stratified: each kind's share of the test split is close to its share of the whole set
    total = len(splits["train"]) + len(splits["test"])
    for kind in KINDS:
        whole = sum(item.kind == kind for items in splits.values() for item in items)
        tested = sum(item.kind == kind for item in splits["test"])
        assert abs(tested - whole * len(splits["test"]) / total) <= 1.5, kind


def test_languages(splits):
    items = [item for items in splits.values() for item in items]
    assert all(item.language for item in items)
    assert sum(item.language != "en" for item in items) >= 30
    assert {"fr", "de", "es", "it", "pt", "zh", "ja", "ru"} <= {item.language for item in items}
    for split, its in splits.items():
        assert sum(item.language != "en" for item in its) >= 5, split


def test_chat_and_raw_in_each_split(splits):
    for split, items in splits.items():
        chat = sum(item.chat for item in items)
        assert 0 < chat < len(items), split
        assert 0.55 <= chat / len(items) <= 0.85, (split, chat / len(items))


def test_each_shipped_line_is_well_formed():
    for split in SPLITS:
        path = PROMPT_SET_DIR / f"{split}.jsonl"
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        assert len(load_prompts(path)) == len(lines)
        for line in lines:
            item = json.loads(line)
            assert set(item) == {"prompt", "chat", "kind", "language"}
            assert isinstance(item["chat"], bool)
            assert len(item["prompt"]) <= 400


def test_load_split_rejects_an_unknown_split():
    with pytest.raises(ValueError, match=r"'dev'.*train or test"):
        load_split("dev")


def _write(tmp_path, *lines: str):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_prompts_reads_defaults_and_skips_blank_lines(tmp_path):
    path = _write(tmp_path, '{"prompt": "Hello"}', "", "   ",
                  '{"prompt": "Once", "chat": false, "kind": "creative", "language": "en"}')
    assert load_prompts(str(path)) == [PromptItem("Hello", True), PromptItem("Once", False, "creative", "en")]


@pytest.mark.parametrize(("lines", "message"), [
    (['{"prompt": "ok"}', '{"prompt": "broken",'], r"line 2: not JSON"),
    (['["a", "list"]'], r"line 1: expected a JSON object"),
    (['{"prompt": "ok"}', "", '{"chat": true}'], r"line 3: no \"prompt\""),
    (['{"prompt": ""}'], r"line 1: \"prompt\" must be non-empty text"),
    (['{"prompt": 42}'], r"line 1: \"prompt\" must be non-empty text"),
    (['{"prompt": "ok", "chat": "yes"}'], r"line 1: \"chat\" must be true or false, got 'yes'"),
    (['{"prompt": "ok", "chat": 1}'], r"line 1: \"chat\" must be true or false"),
    (['{"prompt": "ok", "lang": "en"}'], r"line 1: unknown key 'lang' \(known: prompt, chat, kind, language\)"),
    (['{"prompt": "ok", "kind": 3}'], r"line 1: \"kind\" must be text"),
])
def test_load_prompts_names_the_file_and_line_of_a_fault(tmp_path, lines, message):
    path = _write(tmp_path, *lines)
    with pytest.raises(ValueError, match=message) as error:
        load_prompts(path)
    assert str(path) in str(error.value)


def test_load_prompts_rejects_a_file_without_prompts(tmp_path):
    path = _write(tmp_path, "", "  ")
    with pytest.raises(ValueError, match="no prompts") as error:
        load_prompts(path)
    assert str(path) in str(error.value)
