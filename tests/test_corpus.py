"""The router's training corpus (`lab/corpus.py`), its data (`lab/router_data.py`, `lab/study.py`), both
models reading a text neither wrote (`router_data.read_along`), and the router's recognition of its draft file."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from lab import router_data, study
from lab.corpus import (
    CODE,
    COMMENT,
    PROSE,
    STRING,
    CorpusItem,
    char_classes,
    code_item,
    functions_of,
    module_split,
    stdlib_corpus,
    stdlib_files,
    stdlib_root,
    token_classes,
)
from cascade.routing import router as router_module
from cascade.routing.identity import fingerprint
from cascade.routing.router import FEATURES, load_router, router_words, shipped_router_for
from lab.fitting import fit, fit_out_of_fold, share_for

from .helpers import engine_for

SOURCE = '''
def clamp(x, low, high):
    """Keep x between low and high."""
    # the lower bound first
    if x < low:
        return low
    return min(x, high)  # then the upper

def undocumented(x):
    return x
'''


def test_each_character_is_code_string_or_comment():
    src = 'x = "a#b"  # note\ny = 1\n'
    classes = char_classes(src)
    assert len(classes) == len(src)
    assert classes[src.index('"a')] == STRING and classes[src.index("#b")] == STRING
    assert classes[src.index("# note")] == COMMENT and classes[src.index("y")] == CODE
    assert char_classes("def (:\n  '''") == CODE * len("def (:\n  '''")  # unreadable source: all code


def test_documented_functions_become_prompts_of_their_signature_and_docstring():
    (f,) = functions_of("mod", SOURCE, min_body_lines=2)
    assert f.name == "clamp" and f.source.startswith("def clamp") and f.head.endswith('"""Keep x between low and high."""')
    raw = code_item(f, "raw")
    assert raw.prompt == f.head and raw.prompt + raw.text == f.source and not raw.chat
    assert len(raw.classes) == len(raw.text) and raw.classes[raw.text.index("# the")] == COMMENT
    qwen = code_item(f, "qwen")
    assert qwen.chat and f.head in qwen.prompt and qwen.answer_prefix == "```python\n"
    assert qwen.text == f.source + "\n```" and len(qwen.classes) == len(qwen.text)


def test_a_token_takes_the_class_of_the_first_character_it_writes():
    text = 'if x:  # why\n    s = "hi"'
    classes = char_classes(text)
    pieces = [b"if", b" x", b":", b"  #", b" why", b"\n", b"   ", b" s", b" =", b' "', b"hi", b'"']
    got = token_classes(pieces, classes, text)
    assert got == [CODE, CODE, CODE, COMMENT, COMMENT, CODE, CODE, CODE, CODE, STRING, STRING, STRING]
    assert token_classes([b"\xc3", b"\xa9t\xc3\xa9"], PROSE * 3, "été") == [PROSE, PROSE]


def test_the_split_is_by_module_and_stable():
    assert module_split("json.decoder") == module_split("json.decoder")
    splits = [module_split(f"m{i}") for i in range(2000)]
    assert 0.15 < splits.count("test") / len(splits) < 0.25


# Real standard-library modules the corpus reads (both splits, all three kinds; the same in every Python), and
# test-suite places (a package's test folder, a test module) where it must read nothing.
CORPUS_SAMPLE = ("json/__init__.py", "json/decoder.py", "json/encoder.py", "json/tool.py",
                 "textwrap.py", "shlex.py", "colorsys.py", "fnmatch.py", "bisect.py")
TEST_SUITE_PLACES = ("test/support/helpers.py", "email/test/helpers.py", "lib2to3/tests/helpers.py",
                     "idlelib/idle_test/helpers.py", "json/test_helpers.py")


def _stdlib_sample(root):
    """CORPUS_SAMPLE copied from the standard library into `root` at its own paths, and SOURCE (a documented
    function) at each of TEST_SUITE_PLACES."""
    for relative in CORPUS_SAMPLE + TEST_SUITE_PLACES:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        if relative in CORPUS_SAMPLE:
            shutil.copy(stdlib_root() / relative, root / relative)
        else:
            (root / relative).write_text(SOURCE, encoding="utf-8")
    return root


def test_the_stdlib_corpus_leaves_out_excluded_names_and_test_suites(tmp_path):
    root = _stdlib_sample(tmp_path)
    assert list(functions_of("helpers", SOURCE)), "read as a module, each test suite would give a prompt"
    assert any(it.text.startswith("def dumps(") for it in stdlib_corpus(root, excluded=set()))
    items = stdlib_corpus(root, excluded={"dumps"})
    assert not any(it.kind != "prose" and it.text.startswith("def dumps(") for it in items)
    assert {it.module for it in items} == {relative[:-3].replace("/", ".").removesuffix(".__init__")
                                           for relative in CORPUS_SAMPLE}, "a module read or left out wrongly"
    kinds = {it.kind for it in items}
    assert kinds == {"code-qwen", "code-raw", "prose"}
    assert {it.split for it in items} == {"train", "test"}
    assert all(len(it.classes) == len(it.text) for it in items)


def test_the_whole_stdlib_is_listed_without_its_test_suites():
    modules = dict(stdlib_files())
    assert len(modules) > 500 and {"json", "json.decoder", "textwrap"} <= set(modules)
    assert not any(m.startswith("test.") or m == "test" or ".test." in m or ".tests." in m or "idle_test" in m
                   or m.rsplit(".", 1)[-1].startswith("test_") for m in modules)


def test_share_for_agreement_on_known_values():
    doubt = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    differs = np.array([True, False, True, False, False])
    # 2 of 5 differ (60% agreement). Escalating the first fixes one (80%), the first three both (100%).
    assert share_for(doubt, differs, 0.6) == 0.0
    assert share_for(doubt, differs, 0.8) == pytest.approx(0.2)
    assert share_for(doubt, differs, 0.95) == pytest.approx(0.6)
    # A tie cannot be split: the first two go together.
    assert share_for(np.array([5.0, 5.0, 3.0, 2.0, 1.0]), differs, 0.8) == pytest.approx(0.4)


def _synthetic(logp, margin, entropy, differs, module):
    n = len(differs)
    x = np.zeros((n, len(FEATURES)), dtype=np.float32)
    for name, values in (("logp_token", logp), ("margin", margin), ("entropy", entropy)):
        x[:, FEATURES.index(name)] = values
    return router_data.CorpusData(x, np.asarray(differs, bool), np.zeros(n, np.uint8), np.arange(n, dtype=np.int32),
                                  np.asarray(module, np.int32), np.zeros(n, bool), np.zeros(n, np.uint8), {})


def test_the_study_reports_what_each_rule_sends_at_its_default_threshold():
    # Perplexities 10, 1.1, 2, 8 (default 5: the first and last go); margins 0.01, 0.9, 0.5, 0.03 (default 0.04:
    # the first and last); entropies 4, 0.1, 1, 0.5 (default 3.8: the first). The models differ at 0 and 2.
    data = _synthetic(-np.log([10.0, 1.1, 2.0, 8.0]), [0.01, 0.9, 0.5, 0.03], [4.0, 0.1, 1.0, 0.5],
                      [True, False, True, False], [0, 1, 2, 3])
    shares = study.default_shares(data, {})
    assert shares["perplexity"] == {"threshold": 5.0, "share": 0.5, "agreement": 0.75}
    assert shares["margin"]["share"] == 0.5 and shares["entropy"]["share"] == 0.25
    assert shares["entropy"]["agreement"] == 0.75
    router = _router_for("x")
    learned = study.default_shares(data, {"toy": router})["learned (toy)"]
    expected = np.asarray(router.probability(data.x.astype(np.float64))) > 0.7
    assert learned["share"] == pytest.approx(expected.mean()) and learned["threshold"] == 0.7
    table = study.markdown({"positions": 4, "texts": 4, "train_positions": 4, "train_modules": 4,
                                  "test_positions": 0, "test_modules": 0, "differs_share": 0.5, "held_out": {},
                                  "out_of_fold": {}, "at_default_held_out": shares})
    assert "perplexity 5 sends 50.0% (agreement 75.0%)" in table


def test_out_of_fold_a_row_is_never_judged_by_a_router_that_saw_its_group():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, len(FEATURES)))
    groups = np.repeat(np.arange(10), 20)
    y = (x[:, 0] > 0).astype(int)
    y[groups == 3] = 1 - y[groups == 3]  # group 3 alone has the rule reversed: seen in training, it would be learned
    predicted = fit_out_of_fold(x, y, groups, c=1.0, folds=5)
    in_fold_3 = groups % 5 == 3
    expected = fit(x[~in_fold_3], y[~in_fold_3]).probability(x[in_fold_3])
    assert predicted[in_fold_3] == pytest.approx(expected)


def test_both_models_read_a_text_neither_wrote(toy):
    engine = engine_for(toy.small, toy.related)
    prompt = engine.encode("Once upon a time", chat=False)
    text = engine.pair.target.llm.tokenize(b" the cat sat on the mat and looked at the dog", add_bos=False)
    positions = router_data.read_along(engine, CorpusItem("Once upon a time", "", "", "m", "prose", chat=False), text)
    assert len(positions) == len(text)
    for i in (0, 3, len(text) - 1):  # the target's own choice after the same prefix, one position at a time
        row = engine.pair.target.advance(prompt + text[:i], 1)[-1]
        assert positions[i].target_token == int(np.argmax(row))
        draft_row = engine.pair.draft.advance(prompt + text[:i], 1)[-1]
        assert positions[i].draft_token == int(np.argmax(draft_row))
    assert any(p.differs for p in positions) and not all(p.differs for p in positions)


def test_corpus_data_is_collected_in_shards_and_goes_on_where_it_stopped(toy, tmp_path):
    engine = engine_for(toy.small, toy.related)
    items = [CorpusItem(f"Tell me about {w}.", f"The {w} is a thing that people like to see.", PROSE * (36 + len(w)),
                        f"mod{i}", "prose", chat=True) for i, w in enumerate(["cat", "dog", "sun", "sea", "hill"])]
    router_data.SHARD, old = 2, router_data.SHARD
    try:
        router_data.collect(engine, items, tmp_path, positions=20, max_tokens=12, hidden=True)
        first = len(router_data.load(tmp_path))
        router_data.collect(engine, items, tmp_path, positions=10**6, max_tokens=12, hidden=True)
    finally:
        router_data.SHARD = old
    data = router_data.load(tmp_path)
    assert 20 <= first < len(data) and len(np.unique(data.item)) == 5
    assert data.x.shape[1] == len(FEATURES) + engine.pair.draft.n_embd and data.n_hidden == engine.pair.draft.n_embd
    assert set(np.unique(data.cls)) == {router_data.CLASS_CODES[PROSE]}
    assert data.info["draft_fingerprint"] == fingerprint(toy.small)
    with pytest.raises(ValueError, match="another pair"):
        router_data.collect(engine_for(toy.small, toy.large), items, tmp_path, positions=1, max_tokens=12)


def _router_for(draft_fingerprint: str):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, len(FEATURES)))
    y = (x[:, 0] > 0).astype(int)
    return fit(x, y, pair={"draft": "small.gguf", "target": "large.gguf", "draft_fingerprint": draft_fingerprint})


def test_the_shipped_router_is_chosen_by_the_draft_file_not_its_name(toy, tmp_path, monkeypatch):
    shipped = tmp_path / "routers"
    shipped.mkdir()
    _router_for(fingerprint(toy.small)).save(shipped / "toy.json")
    (shipped / "broken.json").write_text("{")  # a bad file among them is passed over
    monkeypatch.setattr(router_module, "ROUTERS", shipped)
    renamed = tmp_path / "renamed-copy.gguf"
    shutil.copy(toy.small, renamed)
    assert shipped_router_for(renamed) is not None and load_router("", renamed) is not None
    assert shipped_router_for(toy.large) is None and load_router("", toy.large) is None  # another file
    assert load_router("", None) is None and shipped_router_for(tmp_path / "missing.gguf") is None
    assert load_router("none", renamed) is None
    assert load_router(str(shipped / "toy.json"), toy.large) is not None  # a file named is used for any draft
    words = router_words("", None, "large.gguf")
    assert "no router was trained for this small model (large.gguf)" in words and "not offered" in words
    assert "trained for this small model" in router_words("", load_router("", renamed), "renamed-copy.gguf")


def test_every_shipped_router_names_the_draft_file_it_was_trained_with():
    for router in router_module.shipped_routers():
        assert len(router.pair.get("draft_fingerprint", "")) == 32, router.trained_on
