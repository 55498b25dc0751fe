"""The layers run one way: every module's imports, read with `ast`, against the order the tree shows.

From the bottom: `routing` (when the big model steps in: pure functions on the draft's rows), `engine`
(the loop, its policies, the models' KV cursors), `serving` (engines shared by the page and the API, the
one event pump), then `ui` and `api` side by side (neither imports the other), `bench`, the command line,
and the entry points (`python -m cascade`, `app.py`). A module may import its own layer and the layers
below it, never one above. Above them all, outside the package, the lab (`lab/`, not installed): it may
import any of the package, and nothing of the package (nor `app.py`) imports it. docs/architecture.md
draws the same picture; `test_the_architecture_doc_*` keeps it true.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .helpers import ROOT

# (layer, the packages or modules in it); side-by-side packages share a layer and may not import each other.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("routing", ("cascade.routing",)),
    ("engine", ("cascade.engine", "cascade")),  # `cascade` itself: the package's face, naming the engine's parts
    ("serving", ("cascade.serving",)),
    ("front ends", ("cascade.ui", "cascade.api")),
    ("measurement", ("cascade.bench",)),
    ("command line", ("cascade.cli", "cascade.__main__")),
    ("launcher", ("app",)),
    ("lab", ("lab",)),  # outside the package: it imports cascade, never the other way
]
SIDE_BY_SIDE = {"cascade.ui", "cascade.api"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lab_files() -> list[Path]:
    """The lab's modules (its scripts, run by path, are not modules)."""
    return [p for p in (ROOT / "lab").rglob("*.py") if "scripts" not in p.relative_to(ROOT / "lab").parts]


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in [*(ROOT / "cascade").rglob("*.py"), *lab_files()]}
    found["app"] = ROOT / "app.py"
    return found


def group_of(module: str) -> str:
    """The package (or module) of LAYERS a module belongs to: the longest that contains it."""
    names = [name for _, names in LAYERS for name in names]
    owners = [n for n in names if module == n or module.startswith(n + ".")]
    if module in ("cascade", "cascade.__main__", "app"):
        return module
    return max((n for n in owners if n != "cascade"), key=len)


def layer_of(module: str) -> int:
    group = group_of(module)
    return next(i for i, (_, names) in enumerate(LAYERS) if group in names)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def imports(path: Path, module: str, known: set[str], with_type_checking: bool = True) -> set[str]:
    """The project's modules that `module` imports anywhere in its file (at the top, in functions, and,
    if `with_type_checking`, under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skipped: set[int] = set()
    if not with_type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking(node):
                skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}  # `from . import chart`: a module
    out = set()
    for name in found:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def graph(with_type_checking: bool = True) -> dict[str, set[str]]:
    found = modules()
    return {m: imports(p, m, set(found), with_type_checking) for m, p in found.items()}


def test_the_layers_cover_every_module():
    for module in modules():
        assert layer_of(module) >= 0


def test_no_module_imports_a_layer_above_its_own():
    against = []
    for module, targets in graph().items():
        for target in targets:
            if layer_of(target) > layer_of(module):
                against.append(f"{module} imports {target} ({LAYERS[layer_of(target)][0]}, above "
                               f"{LAYERS[layer_of(module)][0]})")
    assert not against, "imports against the layers:\n" + "\n".join(sorted(against))


def test_the_page_and_the_api_do_not_import_each_other():
    crossing = [f"{m} imports {t}" for m, targets in graph().items() for t in targets
                if group_of(m) in SIDE_BY_SIDE and group_of(t) in SIDE_BY_SIDE and group_of(m) != group_of(t)]
    assert not crossing, "\n".join(crossing)


def test_nothing_in_the_package_imports_the_lab():
    """The lab is not installed: a module of `cascade/` (or `app.py`) that imported it would fail for every user."""
    into_lab = [f"{m} imports {t}" for m, targets in graph().items() for t in targets
                if group_of(m) != "lab" and group_of(t) == "lab"]
    assert not into_lab, "\n".join(into_lab)
    assert modules().keys() >= {"lab", "lab.router_data", "lab.__main__"}, "the guard does not see the lab"


def test_no_import_cycle():
    """No cycle among the imports, type-only ones (under TYPE_CHECKING) included."""
    edges = graph()
    # The package faces (`__init__`) hand names on; a module importing its own package's face is no cycle.
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        state[m] = 2
        path.pop()
        return None

    for module in sorted(edges):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_module_that_imports_against_the_layers_is_caught(tmp_path):
    """The guard itself: the import reader resolves relative imports, submodules named in `from . import`,
    and type-only imports, so a stray upward import cannot hide in any of those shapes."""
    known = {"cascade.engine.loop", "cascade.ui.chart", "cascade.ui", "cascade.serving.pump", "cascade.engine"}
    source = tmp_path / "loop.py"
    source.write_text("from typing import TYPE_CHECKING\nfrom ..ui import chart\n"
                      "if TYPE_CHECKING:\n    from ..serving.pump import EventPump\n", encoding="utf-8")
    assert imports(source, "cascade.engine.loop", known) == {"cascade.ui.chart", "cascade.ui", "cascade.serving.pump"}
    assert imports(source, "cascade.engine.loop", known, with_type_checking=False) == {"cascade.ui.chart", "cascade.ui"}
    assert layer_of("cascade.ui.chart") > layer_of("cascade.engine.loop")


@pytest.mark.parametrize("module", sorted(m for m in modules() if m != "app"))
def test_no_module_is_over_400_lines(module):
    lines = len(modules()[module].read_text(encoding="utf-8").splitlines())
    assert lines <= 400, f"{module} has {lines} lines: split it along its concepts"


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def named_modules(text: str) -> set[str]:
    """The files a document names in backticks: `cascade/engine/loop.py`, `lab/study.py`, `app.py`."""
    return set(re.findall(r"`((?:cascade/[\w/]+|lab/[\w/]+|app)\.py)`", text))


def test_the_architecture_doc_names_only_modules_that_exist():
    named = named_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    assert named, "docs/architecture.md names no module"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_architecture_doc_names_every_module():
    named = named_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    every = {str(p.relative_to(ROOT)) for p in [*(ROOT / "cascade").rglob("*.py"), *lab_files()]
             if p.name != "__init__.py"}
    unnamed = sorted(every - named)
    assert not unnamed, f"docs/architecture.md does not say where these live: {unnamed}"


def test_the_architecture_docs_layers_are_the_tests():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    for name, groups in LAYERS:
        for group in groups:
            if (group.startswith("cascade.") or group == "lab") and (ROOT / group.replace(".", "/")).is_dir():
                assert f"`{group.replace('.', '/')}/`" in text, f"docs/architecture.md does not place {group}"
