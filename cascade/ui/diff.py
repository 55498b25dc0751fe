"""Text as prose and fenced code (`parts`), and where two texts differ: code line by line, prose word by
word (`diff_html`). Model text is escaped here."""

from __future__ import annotations

import difflib
import html
import re

from .style import GREEN, RED, TEXT_STYLE

# a fence: 3+ backticks or tildes opening a line (an opening one may name a language)
_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})[^`\n]*\n?")
_CLOSE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*\n?")

CODE_FONT = "ui-monospace,SFMono-Regular,Menlo,Consolas,'Liberation Mono',monospace"


def _lines(text: str) -> list[str]:
    """The lines of `text`, each with its newline (the last may have none)."""
    return re.findall(r"[^\n]*\n|[^\n]+", text)


def parts(text: str) -> list[tuple[str, int, int]]:
    """`text` cut into (kind, start, end): "prose", "open" (a fence), "code", "close"; an open fence runs to the end."""
    out: list[tuple[str, int, int]] = []

    def add(kind: str, start: int, end: int) -> None:
        if end > start:
            out.append((kind, start, end))

    fence, start, pos = "", 0, 0  # fence: the open fence's marker ("```"), "" outside one
    for line in _lines(text):
        end = pos + len(line)
        if not fence and (m := _OPEN.fullmatch(line)):
            add("prose", start, pos)
            add("open", pos, end)
            fence, start = m.group(1), end
        elif fence and (m := _CLOSE.fullmatch(line)) and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            add("code", start, pos)
            add("close", pos, end)
            fence, start = "", end
        pos = end
    add("code" if fence else "prose", start, len(text))
    return out


def _units(text: str) -> list[tuple[str, str]]:
    """(kind, text) units to compare: prose as words and whitespace, fenced code (fences too) as lines."""
    units: list[tuple[str, str]] = []
    for kind, start, end in parts(text):
        chunk = text[start:end]
        if kind == "prose":
            units += [("prose", w) for w in re.findall(r"\s+|\S+", chunk)]
        else:
            units += [("code", line) for line in _lines(chunk)]
    return units


def _changes(ua: list, ub: list) -> list[tuple[str, int, int, int, int]]:
    """SequenceMatcher's opcodes, with changes that only whitespace separates merged into one."""
    merged: list[list] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ua, ub, autojunk=False).get_opcodes():
        gap = merged[-2:]
        if (op != "equal" and len(gap) == 2 and gap[0][0] != "equal" and gap[1][0] == "equal"
                and all(kind == "prose" and not text.strip() for kind, text in ua[gap[1][1]:gap[1][2]])):
            merged[-2:] = [["replace", gap[0][1], i2, gap[0][3], j2]]
        else:
            merged.append([op, i1, i2, j1, j2])
    return [tuple(m) for m in merged]


def pieces(a: str, b: str) -> list[tuple[str, str, str]]:
    """(op, kind, text) pieces: equal+delete join to `a`, equal+insert to `b`, deletes first; kind prose/code."""
    ua, ub = _units(a), _units(b)
    out: list[tuple[str, str, str]] = []

    def add(op: str, units: list[tuple[str, str]]) -> None:
        for kind, text in units:
            if out and out[-1][:2] == (op, kind):
                out[-1] = (op, kind, out[-1][2] + text)
            else:
                out.append((op, kind, text))

    for op, i1, i2, j1, j2 in _changes(ua, ub):
        if op == "equal":
            add("equal", ua[i1:i2])
        else:
            add("delete", ua[i1:i2])
            add("insert", ub[j1:j2])
    return out


def changed(a: str, b: str) -> str:
    """How much differs, in words ("2 lines and 3 words changed"), each change by its longer side."""
    lines = words = 0
    ua, ub = _units(a), _units(b)
    for op, i1, i2, j1, j2 in _changes(ua, ub):
        if op != "equal":
            sides = (ua[i1:i2], ub[j1:j2])
            lines += max(sum(kind == "code" for kind, _ in side) for side in sides)
            words += max(sum(len(text.split()) for kind, text in side if kind == "prose") for side in sides)
    if not lines and not words:
        return "only spaces or line breaks changed"
    said = [f"{n} {unit}{'s' * (n != 1)}" for n, unit in ((lines, "line"), (words, "word")) if n]
    return " and ".join(said) + " changed"


_DELETE = f"color:{RED};text-decoration:line-through;background:rgba(198,40,40,.08)"
_INSERT = f"color:{GREEN};text-decoration:underline;background:rgba(27,122,52,.10)"
_LINE = (f"display:block;font-family:{CODE_FONT};white-space:pre;overflow-x:auto;font-size:.9em;"
         f"padding:0 8px;border-left:3px solid")
_CODE = _LINE + " rgba(128,128,128,.35);background:rgba(128,128,128,.06)"
_DELETED_LINES = f"{_LINE} {RED};color:{RED};text-decoration:line-through;background:rgba(198,40,40,.10)"
_INSERTED_LINES = f"{_LINE} {GREEN};color:{GREEN};text-decoration:underline;background:rgba(27,122,52,.12)"
_CODE_LOOK = {"equal": ("span", "diff-code", _CODE), "delete": ("del", "diff-delete diff-lines", _DELETED_LINES),
              "insert": ("ins", "diff-insert diff-lines", _INSERTED_LINES)}  # (tag, class, style) of code lines
# an insert right after a delete keeps a margin from it ("if elif", not "ifelif"), not a space in the text
_APART = ";margin-left:.35em"


def diff_html(a: str, b: str) -> str:
    """The two texts as one, escaped: deletions struck in red, insertions underlined in green, code by lines."""
    out: list[str] = []
    previous = None
    for op, kind, text in pieces(a, b):
        body = html.escape(text)
        if kind == "code":
            tag, cls, style = _CODE_LOOK[op]
            out.append(f'<{tag} class="{cls}" style="{style}">{body}</{tag}>')
        elif op == "equal":
            out.append(body)
        elif op == "delete":
            out.append(f'<del class="diff-delete" style="{_DELETE}">{body}</del>')
        else:
            apart = _APART if previous == ("delete", "prose") else ""
            out.append(f'<ins class="diff-insert" style="{_INSERT}{apart}">{body}</ins>')
        previous = (op, kind)
    return "".join(out)


def comparison_diff(a: str, b: str) -> str:
    """The comparison's "where the texts differ": `a`, this run's text, against `b`, the big model's."""
    if a == b:
        return "<p>The two texts are <b>identical</b>.</p>"
    return (f"<p>The texts differ ({changed(a, b)}). "
            f'<del style="color:{RED}">Struck through</del>: only in this run; '
            f'<ins style="color:{GREEN}">underlined</ins>: only in the big model\'s text.</p>'
            f'<div class="cascade-diff" style="{TEXT_STYLE}">{diff_html(a, b)}</div>')
