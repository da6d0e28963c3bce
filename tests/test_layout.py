"""The package layout: no import cycles between modules, and each folder imports only what
docs/architecture.md's table "Who may import whom" allows (the rule is written there once; this
test reads the table from the page)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
FOLDERS = {"context_paging": "context_paging", "server": "context_paging.server",
           "index": "context_paging.index", "paging": "context_paging.paging"}
PAGE = PROJECT / "docs" / "architecture.md"
THIRD_PARTY_PREFIXES = ("whoosh", "mcp", "tiktoken", "starlette", "uvicorn", "httpx")


def modules() -> dict[str, Path]:
    """Dotted name → file, for every module the wheel installs."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((PROJECT / folder).rglob("*.py")):
            parts = list(path.relative_to(PROJECT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _target(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(project modules, top-level third-party packages) that ``name`` imports anywhere: at the
    top, inside functions and under ``TYPE_CHECKING`` alike."""
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            target = _target(name, path, node)
            names = [f"{target}.{alias.name}" for alias in node.names]
            targets = [n for n in names if n in known] or [target]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            if target.startswith("context_paging"):
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    inside.add(target)
            else:
                outside.add(target.split(".")[0])
    return inside, outside


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    known = modules()
    edges, external = {}, {}
    for name, path in known.items():
        edges[name], external[name] = imports(name, path, known)
    return edges, external


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def rules(page: str) -> dict[str, tuple[set[str], set[str]]]:
    """The table under "Who may import whom": row → (may import, third-party packages that only
    this row may import)."""
    section = page.split("## Who may import whom", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        names = [re.findall(r"`([^`]+)`", cell) for cell in cells]
        table[names[0][0]] = (set(names[1]), set(names[2]))
    return table


def row_of(module: str, table: dict[str, tuple[set[str], set[str]]]) -> str:
    """The most specific row whose name is the module or a package holding it."""
    if module in table:  # the root package and its __main__ are rows of their own
        return module
    short = module.removeprefix("context_paging.")
    best = max((r for r in table if short == r or short.startswith(r + ".")), key=len,
               default=None)
    assert best is not None, f"{module} belongs to no row of the table in {PAGE.name}"
    return best


def allowed(row: str, target_row: str, may: set[str]) -> bool:
    if target_row == row:
        return True
    return any(target_row == m or (m.endswith(".*") and (target_row == m[:-2]
               or target_row.startswith(m[:-1]))) for m in may)


def test_the_modules_import_each_other_without_a_cycle():
    edges, _ = graph()
    assert cycles(edges) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c"]]


def test_each_folder_imports_only_what_the_architecture_page_allows():
    table = rules(PAGE.read_text(encoding="utf-8"))
    assert {"paging", "index", "index.search", "index.window", "server", "server.mcp",
            "server.proxy", "server.cli"} <= set(table)
    edges, external = graph()
    owners = {package: row for row, (_, only) in table.items() for package in only}
    wrong = []
    for module, targets in sorted(edges.items()):
        row = row_of(module, table)
        may = table[row][0]
        for target in sorted(targets):
            if target == "context_paging":  # the root package: the version, for everyone
                continue
            target_row = row_of(target, table)
            if not allowed(row, target_row, may):
                wrong.append(f"{module} ({row}) imports {target} ({target_row})")
        for package in sorted(external[module]):
            if package in owners and owners[package] != row:
                wrong.append(f"{module} ({row}) imports {package}, which only "
                             f"{owners[package]} may")
    assert wrong == []


@pytest.mark.parametrize("row, target, may, expected", [
    ("server.setup", "server.proxy", {"server", "index.*"}, False),
    ("server.proxy", "server.setup", {"server", "server.setup"}, True),
    ("server.mcp", "index.search", {"index.*"}, True),
    ("server.mcp", "index", {"index.*"}, True),
    ("index", "index.search", {"paging", "index.sources"}, False),
])
def test_the_allowed_rule(row, target, may, expected):
    assert allowed(row, target, may) is expected


def test_every_package_says_what_it_is_and_what_it_may_import():
    for folder in ("server", "index", "paging"):
        for init in sorted((PROJECT / folder).rglob("__init__.py")):
            text = init.read_text(encoding="utf-8")
            docstring = ast.get_docstring(ast.parse(text))
            assert docstring, f"{init.relative_to(PROJECT)} has no docstring"
            assert "import" in docstring, \
                f"{init.relative_to(PROJECT)} does not say what it may import"
