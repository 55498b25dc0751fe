"""The task harness: reading tasks, turning answers into programs, checking them apart, caching, the command."""

from __future__ import annotations

import gzip
import json
import subprocess
import time

import pytest

from cascade import GenerationConfig
from cascade.bench import sandbox
from cascade.bench.tasks import STYLES, Task, TasksError, check_answer, load_tasks, program, subset
from cascade.bench.tasks_cache import AnswerCache, Setup, cache_key
from cascade.bench.tasks_configs import Configuration, configurations, parse_thresholds
from cascade.bench.tasks_report import head_to_head, head_to_head_markdown, markdown
from cascade.bench.tasks_results import Answer, ConfigResult, Paired, mcnemar_exact
from cascade.bench.tasks_run import run_tasks
from cascade.engine.events import Counts, Quality, Summary, Timings

from .helpers import cascade

ADD = Task("Toy/0", 'def add(a, b):\n    """The sum of a and b.\n    >>> add(2, 3)\n    5\n    """\n',
           "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n", "add")
QWEN, RAW = STYLES["qwen"], STYLES["raw"]
GOOD_CHAT = "```python\ndef add(a, b):\n    return a + b\n```"


def write_tasks(path, items) -> None:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))


def as_item(task: Task) -> dict:
    return {"task_id": task.task_id, "prompt": task.prompt, "test": task.test, "entry_point": task.entry_point}


# ---- reading tasks ---------------------------------------------------------------------------------

def test_tasks_are_read_from_json_lines_plain_or_gzipped(tmp_path):
    items = [as_item(ADD), {**as_item(ADD), "task_id": "Toy/1"}]
    write_tasks(tmp_path / "t.jsonl", items)
    with gzip.open(tmp_path / "t.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(i) + "\n" for i in items))
    assert load_tasks(tmp_path / "t.jsonl") == load_tasks(tmp_path / "t.jsonl.gz") == [ADD, ADD.__class__(
        "Toy/1", ADD.prompt, ADD.test, ADD.entry_point)]


def test_humaneval_is_the_default_and_has_its_164_problems():
    tasks = load_tasks()
    assert len(tasks) == 164 and tasks[0].task_id == "HumanEval/0" and tasks[0].entry_point == "has_close_elements"
    assert [t.task_id for t in subset(tasks, limit=3, every=4)] == ["HumanEval/0", "HumanEval/4", "HumanEval/8"]


@pytest.mark.parametrize("content, message", [
    ("{not json\n", "line 1: not JSON"),
    ('{"task_id": "a", "prompt": "p", "test": "t"}\n', "line 1: 'entry_point' is missing or not text"),
    ('[1, 2]\n', "line 1: expected an object"),
    ('{"task_id": "a", "prompt": "p", "test": "t", "entry_point": "f"}\n' * 2, "line 2: task_id 'a' appears twice"),
    ("\n\n", "no tasks in the file"),
])
def test_a_bad_tasks_file_is_named_in_one_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(TasksError, match=message) as e:
        load_tasks(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_the_command_names_a_bad_tasks_file_in_one_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json\n")
    r = cascade("tasks", "--draft", "x.gguf", "--target", "y.gguf", "--tasks", str(path))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "line 1: not JSON" in r.stderr
    missing = cascade("tasks", "--draft", "x.gguf", "--target", "y.gguf", "--tasks", str(tmp_path / "none.jsonl"))
    assert missing.returncode == 2 and "cannot read the tasks file" in missing.stderr


# ---- answers into programs -------------------------------------------------------------------------

@pytest.mark.parametrize("style, answer, kind", [
    (QWEN, GOOD_CHAT, "passed"),
    (QWEN, GOOD_CHAT.replace("a + b", "a - b"), "wrong_answer"),
    (QWEN, "```python\n    return a + b\n```", "passed"),  # the body alone continues the prompt
    (QWEN, "```python\nfrom operator import add as plus\n\ndef add(a, b):\n    return plus(a, b)\n\nprint(add(1, 2))",
     "passed"),
    (QWEN, "```python\ndef add(a, b):\n    return a + b\n\nassert add(1, 1) == 3\nadd(", "passed"),  # own tests dropped
    (QWEN, "```python\nimport functools\n@functools.lru_cache\ndef add(a, b):\n    return a + b\n```", "passed"),
    (QWEN, "```python\ndef add(a, b)\n    return a + b\n```", "exception"),  # a syntax error
    (QWEN, "```python\n```", "no_code"),
    (QWEN, "```python\n# nothing here\n", "no_code"),
    (RAW, "    return a + b\n\ndef main():\n", "passed"),
    (RAW, "    return a * b\n", "wrong_answer"),
    (RAW, "    return undefined_name\n", "exception"),
    (RAW, "\n", "no_code"),
])
def test_known_good_and_known_bad_answers_are_scored_right(style, answer, kind):
    assert check_answer(ADD, style, answer).kind == kind


def test_the_program_keeps_the_tasks_imports_and_replaces_its_stub():
    task = Task("Toy/1", "from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n",
                "def check(c):\n    assert c([1, 2]) == 3\n", "total")
    source = program(task, QWEN, "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```")
    assert source.startswith(task.prompt) and source.rstrip().endswith("return sum(xs)")
    assert check_answer(task, QWEN, "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```").passed


# ---- the sandbox: a bad program fails on time and stops nothing else -------------------------------

BAD_PROGRAMS = {
    "hangs": ("while True:\n    pass\n", "timeout"),
    "sleeps": ("import time\ntime.sleep(600)\n", "timeout"),
    "crashes": ("import ctypes\nctypes.string_at(0)\n", "exception"),
    "allocates 10 GB": ("block = bytearray(10 * 1024 ** 3)\n", "exception"),
    "allocates without end": ("grow = []\nwhile True:\n    grow.append(' ' * 10 ** 7)\n", None),
    "forks without end": ("import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n", "timeout"),
    "exits early": ("import sys\nsys.exit(0)\n", "exception"),
    "floods its output": ("while True:\n    print('x' * 100000)\n", "exception"),
    "reaches for the network": ("import urllib.request\nurllib.request.urlopen('http://1.1.1.1', timeout=3)\n",
                                "exception"),
}


LIMIT_S = 1.0


@pytest.mark.parametrize("name", list(BAD_PROGRAMS))
def test_a_bad_program_fails_within_its_limit_and_the_next_one_runs(name):
    source, kind = BAD_PROGRAMS[name]
    started = time.perf_counter()
    # One second: a program that fails on its own (a crash, a memory or network refusal) fails well within
    # it, and those that never end are stopped at it.
    check = sandbox.run_program(source, timeout_s=LIMIT_S, memory_mb=512)
    assert time.perf_counter() - started < LIMIT_S + 3.0, "a check must end soon after its time limit"
    assert not check.passed and (check.kind == kind if kind else check.kind in ("exception", "timeout"))
    assert sandbox.run_program("assert 1 + 1 == 2\n", timeout_s=5).passed  # nothing else was stopped


def test_a_fork_bomb_stops_at_the_process_limit_and_leaves_nothing_behind():
    source = ("import ctypes, time\nlibc = ctypes.CDLL(None)\nforked = 0\nfor _ in range(300):\n"
              "    pid = libc.fork()\n    if pid == 0:\n        time.sleep(60)\n        libc._exit(0)\n"
              "    forked += pid > 0\nraise RuntimeError(f'forked {forked}')\n")
    check = sandbox.run_program(source, timeout_s=10)
    assert check.kind == "exception" and check.detail.startswith("RuntimeError: forked ")
    assert int(check.detail.split()[-1]) < 300  # the limit stopped it
    # Its processes are gone once the kernel has reaped them: asked until none is left (five seconds at most).
    deadline = time.monotonic() + 5
    while True:
        left = subprocess.run(["pgrep", "-f", "sandbox_child.py"], capture_output=True, text=True).stdout.split()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, "processes of a finished check are still running"


def test_the_checks_isolation_is_described_for_the_results():
    words = sandbox.isolation().describe(10, 2048)
    assert "Not a security sandbox" in words and "10 s" in words and "2048 MB" in words


# ---- configurations --------------------------------------------------------------------------------

def test_each_policy_runs_at_its_default_unless_given_thresholds_or_ks():
    labels = [c.label for c in configurations(["draft", "cascade", "speculative"])]
    assert labels == ["target", "draft", "cascade perplexity 5", "speculative k=4"]
    swept = configurations(["cascade", "bild"], ["perplexity", "margin"], ["perplexity:2,5", "margin:0.1"])
    assert [c.label for c in swept] == ["target", "cascade perplexity 2", "cascade perplexity 5",
                                        "cascade margin 0.1", "bild perplexity 2", "bild perplexity 5",
                                        "bild margin 0.1"]


def test_a_budget_is_a_configuration_of_its_own_beside_or_instead_of_thresholds():
    budgets = configurations(["cascade", "speculative"], ["perplexity", "margin"], budgets=[0.1, 0.2])
    assert [c.label for c in budgets] == ["target", "cascade perplexity budget 0.1", "cascade perplexity budget 0.2",
                                          "cascade margin budget 0.1", "cascade margin budget 0.2", "speculative k=4"]
    margin = budgets[3]
    assert margin.config.budget == 0.1 and margin.budget == 0.1 and margin.threshold is None
    assert margin.settings()["budget"] == 0.1 and "threshold" not in margin.settings()  # a budget reads none
    beside = configurations(["cascade"], ["perplexity", "margin"], ["margin:0.1"], budgets=[0.1])
    assert [c.label for c in beside] == ["target", "cascade margin 0.1", "cascade perplexity budget 0.1",
                                         "cascade margin budget 0.1"]
    # A configuration without a budget keeps its settings (and so the answers cached under them).
    assert "budget" not in configurations(["cascade"])[1].settings()
    with pytest.raises(TasksError, match="a budget is a share of the tokens, from 0 to 1"):
        configurations(["cascade"], budgets=[10])


def test_budgets_can_be_given_to_one_rule():
    """A frontier's rows as one command: the router at three budgets, perplexity at one."""
    rows = configurations(["cascade"], ["perplexity", "learned"], budgets=["0.1", "learned:0.05,0.2"])
    assert [c.label for c in rows] == ["target", "cascade perplexity budget 0.1", "cascade learned budget 0.1",
                                       "cascade learned budget 0.05", "cascade learned budget 0.2"]
    alone = configurations(["cascade"], ["perplexity", "learned"], budgets=["learned:0.1"])
    assert [c.label for c in alone] == ["target", "cascade perplexity 5", "cascade learned budget 0.1"]
    for items, message in ((["margin:0.1"], "the rule 'margin' is not among --rules"),
                           (["learned:0.1,x"], "'x' is not a number"), (["learned:1.5"], "from 0 to 1")):
        with pytest.raises(TasksError, match=message):
            configurations(["cascade"], ["perplexity", "learned"], budgets=items)


def test_each_escalation_grain_is_a_configuration_and_the_seeds_one_token_keeps_its_cache_key():
    spans = configurations(["cascade", "speculative"], ["perplexity"], budgets=[0.1], spans=["token", "line"])
    assert [c.label for c in spans] == ["target", "cascade perplexity budget 0.1",
                                        "cascade perplexity budget 0.1 span=line", "speculative k=4"]
    assert "span" not in spans[1].settings() and spans[2].settings()["span"] == "line"
    assert spans[2].config.span == "line" and spans[3].span is None  # speculative has no rule, so no grain


@pytest.mark.parametrize("items, message", [
    (["entropy:1"], "the rule 'entropy' is not among --rules"),
    (["margin:5"], "threshold must be between 0 and 1 for the margin rule"),
    (["0.5,x"], "'x' is not a number"),
])
def test_bad_thresholds_are_named(items, message):
    with pytest.raises(TasksError, match=message):
        parse_thresholds(items, ["perplexity", "margin"])


def test_the_cache_key_leaves_out_what_a_configuration_does_not_read():
    setup = Setup(draft="d:1:aa", target="t:1:bb", n_threads=2, n_ctx=4096)
    target = Configuration(GenerationConfig(policy="target", threshold=2.0))
    assert cache_key(setup, target, QWEN) == cache_key(Setup("other-draft", "t:1:bb", n_threads=2, n_ctx=4096),
                                                       Configuration(GenerationConfig(policy="target")), QWEN)
    cascade5 = Configuration(GenerationConfig(policy="cascade", threshold=5.0))
    assert cache_key(setup, cascade5, QWEN) != cache_key(setup, cascade5, RAW)
    assert cache_key(setup, cascade5, QWEN) != cache_key(setup, Configuration(GenerationConfig(threshold=2.0)), QWEN)


def test_a_build_without_the_batch_kernels_keeps_answers_of_its_own():
    """The exact build reads prompts and checks proposals with other rounding: its answers are not the
    default build's, and the default build's answers keep the keys they were cached under."""
    default = Setup(draft="d:1:aa", target="t:1:bb", n_threads=2, n_ctx=4096)
    exact = Setup(draft="d:1:aa", target="t:1:bb", n_threads=2, n_ctx=4096, batch_kernels=())
    for policy in ("target", "speculative", "cascade"):
        configuration = Configuration(GenerationConfig(policy=policy))
        assert cache_key(default, configuration, QWEN) != cache_key(exact, configuration, QWEN)
    assert cache_key(default, Configuration(GenerationConfig(policy="target")), QWEN) == "d2c3aa76e9ad673ed3b19a97"


def test_policies_whose_first_check_reads_past_the_prompt_have_answers_of_their_own():
    """Since the runner reads a prompt apart from the proposals after it, the answers of every policy whose
    first check holds both are keyed anew; the others (the target alone, the draft, cascade) keep theirs."""
    from cascade.bench.tasks_cache import PROMPT_READ_APART
    from cascade.engine.policies import POLICY_TABLE

    config = GenerationConfig()
    checks = {name for name, p in POLICY_TABLE.items() if not p.own_loop and
              (p.window(config, 4) > 0 or p.looks_up or p.steered)}
    assert checks == set(PROMPT_READ_APART)
    setup = Setup(draft="d:1:aa", target="t:1:bb", n_threads=2, n_ctx=4096)
    cascade = Configuration(GenerationConfig(policy="cascade", threshold=5.0))
    assert cache_key(setup, cascade, QWEN) == "d82a5866a6e7a7c923b77a72"  # as before the change

# ---- running, caching, resuming --------------------------------------------------------------------

class ScriptedEngine:
    """Answers every task with the same code, counting the requests it is asked."""

    def __init__(self, answer: str = "def add(a, b):\n    return a + b\n```", fail_after: int | None = None) -> None:
        self.answer, self.fail_after, self.asked = answer, fail_after, []

    def generate(self, prompt, config):
        if self.fail_after is not None and len(self.asked) >= self.fail_after:
            raise KeyboardInterrupt  # an interrupted run
        self.asked.append((prompt, config))
        n = 10
        alone = config.policy == "target"
        yield Summary(text=self.answer, policy=config.policy, stop_reason="stop_string", prompt_tokens=50,
                      counts=Counts(n_tokens=n, n_draft_tokens=0 if alone else n - 1, n_target_tokens=n if alone else 1),
                      timings=Timings(wall_s=1.0 if alone else 0.5), answer_prefix=config.answer_prefix,
                      quality=Quality(text_ppl_by_target=1.5, target_agreement=0.9))


def test_the_run_reports_pass_rates_shares_and_speed_against_the_target(tmp_path):
    tasks = [ADD, Task("Toy/1", ADD.prompt, ADD.test.replace("== 5", "== 6"), "add")]
    engine = ScriptedEngine()
    configs = configurations(["draft"])
    results = run_tasks(tasks, configs, QWEN, lambda: engine, Setup("d", "t"), AnswerCache(tmp_path))
    target, draft = (r.to_dict() for r in results)
    assert target["passed"] == draft["passed"] == 1 and target["pass_at_1"] == 0.5
    assert target["failures"] == {"wrong_answer": 1, "exception": 0, "timeout": 0, "no_code": 0}
    assert draft["target_share"] == 0.1 and draft["vs_target"] == pytest.approx(2.0) and target["vs_target"] == 1.0
    assert draft["text_ppl_by_target"] == pytest.approx(1.5) and draft["mean_tokens"] == 10
    prompt, config = engine.asked[0]
    assert "Can you complete the following Python function?" in prompt and config.answer_prefix == "```python\n"
    assert config.system.startswith("You are an intelligent programming assistant") and config.chat


def test_mcnemars_exact_test_on_known_values():
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32) and mcnemar_exact(5, 0) == mcnemar_exact(0, 5)
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)  # 2 · (C(10,0) + C(10,1)) / 2^10
    assert mcnemar_exact(2, 12) == pytest.approx(0.01294, abs=1e-5)  # as statsmodels' mcnemar(exact=True) gives


def test_the_run_names_the_problems_that_flipped_against_the_target(tmp_path):
    add = "def add(a, b):\n    return a + b\n```"
    wrong = "def add(a, b):\n    return a - b\n```"

    class Flipping(ScriptedEngine):  # the target solves Toy/0 and Toy/1; the draft Toy/1 and Toy/2
        def generate(self, prompt, config):
            task = int(prompt.split("Toy")[-1][:1]) if "Toy" in prompt else 0
            good = {"target": {0, 1}, "draft": {1, 2}}[config.policy]
            self.answer = add if task in good else wrong
            yield from super().generate(prompt, config)

    tasks = [Task(f"Toy/{i}", ADD.prompt.replace('"""The sum', f'"""Toy{i}: the sum'), ADD.test, "add") for i in range(3)]
    engine = Flipping()
    target, draft = run_tasks(tasks, configurations(["draft"]), QWEN, lambda: engine, Setup("d", "t"),
                              AnswerCache(tmp_path))
    assert target.paired is None and draft.paired == Paired(gained=("Toy/2",), lost=("Toy/0",),
                                                            differing=("Toy/0", "Toy/2"), n=3)
    row = draft.to_dict()
    assert row["paired"] == {"gained": ["Toy/2"], "lost": ["Toy/0"], "mcnemar_p": 1.0,
                             "same_text": 1, "differing": ["Toy/0", "Toy/2"]}
    table = markdown([target.to_dict(), row])
    assert "| draft | 66.7% | 2/3 | +1 −1 (p 1) | 1/3 | 10.0% | — |" in table
    assert "| target | 66.7% | 2/3 | — | — | 100.0% | — |" in table


def test_the_big_models_share_is_spread_over_answers_by_percentile():
    def answer(i: int, n_target: int) -> Answer:
        return Answer(f"Toy/{i}", "x", 10, n_target, 1.0, "eos", None, None, sandbox.Check("passed"))

    result = ConfigResult(Configuration(GenerationConfig(policy="cascade", budget=0.1)),
                          [answer(i, n) for i, n in enumerate([0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 5])])
    p10, p50, p90 = result.share_spread
    assert (p10, p50, p90) == (pytest.approx(0.1), pytest.approx(0.1), pytest.approx(0.1))
    row = result.to_dict()
    assert row["share_spread"] == (p10, p50, p90)
    assert "| 10–10% |" in markdown([row])
    wide = ConfigResult(result.configuration, [answer(i, n) for i, n in enumerate(range(11))])
    assert wide.share_spread == (pytest.approx(0.1), pytest.approx(0.5), pytest.approx(0.9))
    assert ConfigResult(result.configuration).share_spread is None


def test_an_interrupted_run_resumes_from_the_cache(tmp_path):
    tasks = [Task(f"Toy/{i}", ADD.prompt, ADD.test, "add") for i in range(3)]
    configs = configurations(["cascade"])
    interrupted = ScriptedEngine(fail_after=4)
    with pytest.raises(KeyboardInterrupt):
        run_tasks(tasks, configs, QWEN, lambda: interrupted, Setup("d", "t"), AnswerCache(tmp_path))
    again = ScriptedEngine()
    results = run_tasks(tasks, configs, QWEN, lambda: again, Setup("d", "t"), AnswerCache(tmp_path))
    assert len(again.asked) == 2  # the four answers written before the interruption were kept
    assert all(r.n_tasks == 3 and r.passed == 3 for r in results)
    warm = ScriptedEngine()
    run_tasks(tasks, configs, QWEN, lambda: warm, Setup("d", "t"), AnswerCache(tmp_path))
    assert warm.asked == []
    # A changed task is answered again; a sweep reuses the target's answers.
    sweep = ScriptedEngine()
    run_tasks(tasks, configurations(["cascade"], thresholds=["2"]), QWEN, lambda: sweep, Setup("d", "t"),
              AnswerCache(tmp_path))
    assert [c.policy for _, c in sweep.asked] == ["cascade"] * 3


def test_a_budget_reaches_the_engine_and_its_answers_are_cached_apart(tmp_path):
    cache, setup, first = AnswerCache(tmp_path), Setup("d", "t"), ScriptedEngine()
    run_tasks([ADD], configurations(["cascade"]), QWEN, lambda: first, setup, cache)
    engine = ScriptedEngine()
    _, budget = run_tasks([ADD], configurations(["cascade"], budgets=[0.1]), QWEN, lambda: engine, setup, cache)
    assert [c.budget for _, c in engine.asked] == [0.1]  # the target's answer from the cache, not the threshold's
    row = budget.to_dict()
    assert row["budget"] == 0.1 and row["threshold"] is None and row["label"] == "cascade perplexity budget 0.1"


def test_the_command_end_to_end_on_toy_models(toy, tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, [as_item(ADD), {**as_item(ADD), "task_id": "Toy/1"}])
    env = {"CASCADE_CACHE": str(tmp_path / "cache")}
    args = ["tasks", "--draft", str(toy.small), "--target", str(toy.related), "--tasks", str(path), "--threads", "1",
            "--policies", "draft", "cascade", "--max-tokens", "8", "--json", str(tmp_path / "r.json"),
            "--html", str(tmp_path / "r.html"), "--router", "none"]
    r = cascade(*args, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    rows = report["results"]
    assert [row["label"] for row in rows] == ["target", "draft", "cascade perplexity 5"]
    for row in rows:
        assert {"policy", "rule", "threshold", "budget", "k", "n_tasks", "passed", "pass_at_1", "target_share",
                "tokens_per_s", "vs_target", "failures"} <= set(row) and row["n_tasks"] == 2
        assert set(row["failures"]) == {"wrong_answer", "exception", "timeout", "no_code"}
    assert rows[0]["vs_target"] == 1.0 and rows[0]["target_share"] == 1.0 and report["loaded_models"]
    assert "| cascade perplexity 5 |" in r.stdout and "Plotly" in (tmp_path / "r.html").read_text()[:100000]
    started = time.perf_counter()
    warm = cascade(*args, env=env, timeout=120)
    assert warm.returncode == 0 and time.perf_counter() - started < 20
    assert not json.loads((tmp_path / "r.json").read_text())["loaded_models"]  # answered from the cache


def test_the_help_says_plainly_that_it_runs_model_written_code():
    r = cascade("tasks", "--help")
    words = " ".join(r.stdout.split())
    assert r.returncode == 0 and "RUNS MODEL-WRITTEN CODE" in words and "not a security sandbox" in words


def test_rules_are_compared_at_thresholds_chosen_for_equal_shares(toy, tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, [as_item(ADD), {**as_item(ADD), "task_id": "Toy/1", "prompt": ADD.prompt + "    # sum\n"}])
    env = {"CASCADE_CACHE": str(tmp_path / "cache")}
    args = ["tasks", "--draft", str(toy.small), "--target", str(toy.related), "--tasks", str(path), "--threads", "1",
            "--policies", "target", "--rules", "perplexity", "margin", "--shares", "0.25", "0.5", "--max-tokens", "12",
            "--json", str(tmp_path / "r.json"), "--router", "none"]
    r = cascade(*args, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "[thresholds for shares 0.25, 0.5: perplexity" in r.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    by_rule = {rule: [row["threshold"] for row in rows if row["rule"] == rule] for rule in ("perplexity", "margin")}
    assert all(1 <= len(ts) <= 2 for ts in by_rule.values()), by_rule
    assert all(0 <= t <= 1 for t in by_rule["margin"]) and all(t >= 1 for t in by_rule["perplexity"])
    warm = cascade(*args, env=env, timeout=120)  # the thresholds and the answers come from the cache
    assert warm.returncode == 0 and not json.loads((tmp_path / "r.json").read_text())["loaded_models"]


def test_a_threshold_is_rounded_only_as_far_as_it_sends_the_same_positions():
    from cascade.bench.tasks_shares import readable_threshold
    from cascade.routing.rules import RULE_TABLE

    perplexity, margin = RULE_TABLE["perplexity"], RULE_TABLE["margin"]
    # On code most perplexities lie within a thousandth of 1: three digits ("1") would send them all.
    scores = [1.0001, 1.0002, 1.0003, 1.0006, 1.2, 3.0]
    assert readable_threshold(perplexity, 1.00045, scores) == 1.0005  # the same three escalate
    assert readable_threshold(perplexity, 2.0123456, scores) == 2.01
    assert readable_threshold(margin, 0.0432109, [0.01, 0.05, 0.9]) == 0.0432


def test_rules_at_the_same_budget_are_compared_problem_by_problem():
    def row(rule: str, budget: float | None, passed: set[int]) -> dict:
        return {"label": f"cascade {rule} budget {budget}", "policy": "cascade", "rule": rule, "budget": budget,
                "settings": {}, "answers": [{"task_id": f"T/{i}", "kind": "passed" if i in passed else "wrong_answer"}
                                            for i in range(6)]}

    rows = [row("perplexity", 0.1, {0, 1, 2}), row("learned", 0.1, {0, 3, 4, 5}), row("learned", 0.2, {0}),
            {**row("perplexity", None, {0}), "threshold": 5.0}]
    (pair,) = head_to_head(rows)  # only the two rules that shared a budget
    assert (pair["a"], pair["b"], pair["n"]) == ("cascade perplexity budget 0.1", "cascade learned budget 0.1", 6)
    assert pair["only_a"] == ["T/1", "T/2"] and pair["only_b"] == ["T/3", "T/4", "T/5"]
    assert pair["mcnemar_p"] == pytest.approx(mcnemar_exact(2, 3))
    assert "| 10% | cascade perplexity budget 0.1 | cascade learned budget 0.1 | 2 | 3 | 1 |" in head_to_head_markdown(rows)
    assert head_to_head_markdown(rows[2:]) == ""
