"""The package's import graph has no cycles, of any length, counting imports inside functions.

Every module under ``tagrpo/`` is parsed with :mod:`ast` (nothing is imported); each import of
a project module, at module level, inside a function or under ``TYPE_CHECKING``, is an edge to
the most specific project module it names (``from tagrpo.x import y`` is an edge to
``tagrpo.x.y`` when that is a module, else to ``tagrpo.x``). A strongly connected component of
more than one module is a cycle: two modules that need each other, however indirectly, cannot
be read, tested or moved apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "tagrpo"


def project_modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package ``__init__``) for every module under ``tagrpo/``."""
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


def import_graph(modules: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in its source)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    targets.append(full if full in modules else known(source))
            graph[name].update(t for t in targets if t and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
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
                    found.append(tuple(sorted(component)))
    return sorted(found)


def test_the_project_has_no_import_cycles() -> None:
    found = cycles(import_graph(project_modules()))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(cycle) for cycle in found)


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        # two modules, one import inside a function
        (
            {"a.py": "import tagrpo.b\n", "b.py": "def f():\n    from tagrpo import a\n"},
            [("tagrpo.a", "tagrpo.b")],
        ),
        # three modules in a ring, relative imports and a package __init__
        (
            {
                "__init__.py": "",
                "p/__init__.py": "from .x import X\n",
                "p/x.py": "from ..y import Y\n",
                "y.py": "from tagrpo.p import thing\n",
            },
            [("tagrpo.p", "tagrpo.p.x", "tagrpo.y")],
        ),
        # a chain is not a cycle; an import of a module's own name is not one either
        (
            {"a.py": "import tagrpo.b\nimport tagrpo.a\n", "b.py": "import os\n"},
            [],
        ),
        # under TYPE_CHECKING counts too
        (
            {
                "a.py": "import typing\nif typing.TYPE_CHECKING:\n    import tagrpo.b\n",
                "b.py": "from tagrpo.a import A\n",
            },
            [("tagrpo.a", "tagrpo.b")],
        ),
    ],
)
def test_cycles_are_found(
    tmp_path: Path, sources: dict[str, str], expected: list[tuple[str, ...]]
) -> None:
    for relative, text in sources.items():
        path = tmp_path / PACKAGE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert cycles(import_graph(project_modules(tmp_path))) == expected
