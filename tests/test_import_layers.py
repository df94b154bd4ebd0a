"""Imports follow docs/architecture.md's table, and no module imports itself
back through others.

The table ("Packages and the direction of imports") is read from the doc, so
the doc and the code cannot drift apart: each row names packages or modules
(``pyg_dist.store.remote_*``, ``store.connect``) and what they may import
(``errors, plugins``; ``anything above``; ``nothing``). Every import counts:
inside functions and under ``TYPE_CHECKING`` too, since an import hidden in a
function is still a dependency of the layer.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
ROOTS = {"pyg_dist": REPO / "pyg_dist", "pyg_dist_plugins": REPO / "plugins" / "pyg_dist_plugins",
         "pyg_dist_bench": REPO / "benchmarks" / "pyg_dist_bench"}
# Every layer may raise the typed errors and use the packages' lazy exports.
ALWAYS = ("pyg_dist.errors", "pyg_dist.lazy_exports")


def _name(text: str) -> str:
    """A table cell's package or module, as a dotted pattern; a file path
    (``pyg_dist/__main__.py``) names that one module and nothing below it."""
    text = text.strip().strip("`")
    if text.endswith(".py"):
        return "=" + text.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    text = re.sub(r"^(plugins|benchmarks)/", "", text)
    return text if text.startswith("pyg_dist") else f"pyg_dist.{text}"


@cache
def table() -> list[tuple[list[str], list[str]]]:
    """(patterns of the row, patterns it may import), in the doc's order."""
    section = DOC.read_text().split("## Packages and the direction of imports", 1)[1]
    rows: list[tuple[list[str], list[str]]] = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = [_name(n) for n in re.findall(r"`([^`]+)`", cells[0])]
        may = re.sub(r"\([^)]*\)", "", cells[-1]).strip()
        if may == "nothing":
            allowed: list[str] = []
        elif may == "anything above":
            allowed = [p for above, _ in rows for p in above]
        else:
            allowed = [_name(a) for a in may.split(",") if a.strip()]
        rows.append((names, allowed))
    return rows


def _matches(module: str, pattern: str) -> bool:
    if pattern.startswith("="):
        return module == pattern[1:]
    return fnmatch.fnmatchcase(module, pattern) or module.startswith(pattern + ".") or (
        "*" in pattern and fnmatch.fnmatchcase(module, pattern + ".*"))


def row_of(module: str) -> int | None:
    """The index of the most specific row naming ``module`` (its longest pattern)."""
    best, length = None, -1
    for i, (names, _) in enumerate(table()):
        for pattern in names:
            if _matches(module, pattern) and len(pattern) > length:
                best, length = i, len(pattern)
    return best


@cache
def modules() -> dict[str, Path]:
    """Every module of the library, its plugins and the benchmarks package."""
    found = {}
    for top, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(module: str) -> set[str]:
    """The project modules ``module`` imports, anywhere in its source."""
    path = modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports pkg.mod when that is a module.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n.split(".")[0] in ROOTS}
    return out


def _allowed(module: str, target: str) -> bool:
    if target in ("pyg_dist", "pyg_dist_plugins", "pyg_dist_bench") and module.startswith(
            target):
        return True  # a package's own __init__ (its lazy exports)
    own = row_of(module)
    if own is not None and row_of(target) == own:
        return True  # within one layer
    if any(_matches(target, p) for p in ALWAYS):
        return True
    if own is None:
        return False
    return any(_matches(target, p) for p in table()[own][1])


def test_the_table_is_read_and_names_every_module():
    assert len(table()) >= 15, table()
    unplaced = sorted(m for m in modules() if row_of(m) is None
                      and m not in ROOTS)
    assert not unplaced, f"modules in no row of docs/architecture.md's table: {unplaced}"


def test_no_module_imports_what_its_layer_may_not():
    broken = {f"{m} imports {t}" for m in modules() for t in imports(m) if not _allowed(m, t)}
    assert broken == set(), "imports against docs/architecture.md"


def test_no_import_cycles_between_modules():
    graph = {m: {t for t in imports(m) if t in modules() and t != m} for m in modules()}
    # Tarjan's strongly connected components: any with two modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"
