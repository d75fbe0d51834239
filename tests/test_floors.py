"""The library's floor plan: each folder of ``tagrpo/`` on one floor, imports pointing down.

A folder may import folders on its own floor or below, never above, and the folder graph has no
cycle (so no two folders import each other, however indirectly). Edges are every import of a
project module (module level, inside functions, under ``TYPE_CHECKING``), read with :mod:`ast`
by ``test_import_graph.import_graph``. The floors are docs/design.md's numbered list; a new
folder is placed there before it can land.
"""

from __future__ import annotations

import re

from test_import_graph import ROOT, cycles, import_graph, project_modules

# Bottom to top; docs/design.md ("The library's floors") names the same folders in this order.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("plumbing",),
    ("metrics", "algorithms", "grading", "data"),
    ("config",),
    ("backends", "miniworld"),
    ("splits", "rephrase", "equivalence", "evaluation", "training", "report", "verl_ext"),
    ("pipeline",),
)


def folder_of(module: str) -> str | None:
    """``tagrpo.<folder>.…`` -> ``<folder>``; the package's own ``__init__`` -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def folder_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(importing folder, imported folder) -> the module imports behind that arrow."""
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for module, targets in graph.items():
        for target in targets:
            source, dest = folder_of(module), folder_of(target)
            if source and dest and source != dest:
                edges.setdefault((source, dest), []).append((module, target))
    return edges


def floor_violations(
    edges: dict[tuple[str, str], list[tuple[str, str]]], floors: tuple[tuple[str, ...], ...]
) -> list[str]:
    """Each arrow from a folder to one on a higher floor, with the imports behind it."""
    level = {name: i for i, floor in enumerate(floors) for name in floor}
    found = []
    for (source, dest), imports in sorted(edges.items()):
        if level[dest] > level[source]:
            shown = ", ".join(f"{a} -> {b}" for a, b in sorted(imports)[:3])
            found.append(
                f"{source} (floor {level[source] + 1}) imports {dest} "
                f"(floor {level[dest] + 1}): {shown}"
            )
    return found


def test_every_folder_has_a_floor() -> None:
    folders = {p.name for p in (ROOT / "tagrpo").iterdir() if p.is_dir() and any(p.glob("*.py"))}
    placed = [name for floor in FLOORS for name in floor]
    assert len(placed) == len(set(placed)), "a folder on two floors"
    assert folders == set(placed), (
        f"not on a floor: {sorted(folders - set(placed))}; "
        f"no such folder: {sorted(set(placed) - folders)}"
    )


def test_no_folder_imports_a_higher_floor() -> None:
    edges = folder_edges(import_graph(project_modules()))
    assert floor_violations(edges, FLOORS) == []


def test_no_two_folders_import_each_other() -> None:
    edges = folder_edges(import_graph(project_modules()))
    folder_graph: dict[str, set[str]] = {}
    for source, dest in edges:
        folder_graph.setdefault(source, set()).add(dest)
        folder_graph.setdefault(dest, set())
    assert cycles(folder_graph) == []


def test_the_check_sees_an_arrow_up_and_a_cycle() -> None:
    graph = {
        "tagrpo.plumbing.paths": {"tagrpo.config.params"},  # ground floor reaching up
        "tagrpo.config.params": {"tagrpo.plumbing.paths"},
    }
    edges = folder_edges(graph)
    [violation] = floor_violations(edges, FLOORS)
    assert violation.startswith("plumbing (floor 1) imports config (floor 3)")
    assert cycles({"plumbing": {"config"}, "config": {"plumbing"}}) == [("config", "plumbing")]


def test_design_doc_lists_the_same_floors() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("**The library's floors.**") :]
    section = section[: section.index("\n- **Library**")]
    listed: list[list[str]] = []
    for line in section.splitlines():
        if re.match(r"^\d+\. ", line):
            listed.append([])
        if listed:
            # a folder is named as `name/` at the start of a line's item or list entry
            listed[-1] += re.findall(r"`([a-z_]+)/`", line)
    assert [set(floor) for floor in listed] == [set(floor) for floor in FLOORS]
