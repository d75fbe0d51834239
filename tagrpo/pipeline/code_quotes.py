"""Constants the code declares, quoted in the docs: a benchmark's target, a test's tolerance, a
deadline, as the file that holds them states them, never typed again.

A block in Markdown (the syntax of the docs' other quoted blocks)::

    <!-- quote: constants benchmarks/advantages_speed.py TARGET_MS Makefile TEST_DEADLINE_S -->
    (rendered text)
    <!-- end quote -->

Each word that is not a Python name is a file (a ``.py`` file or a Makefile), the names after it
its constants: a module-level assignment of a ``.py`` file (its expression as written and the
comment on its line), a Makefile variable (``NAME ?= value``, ``:=``, ``=``).
:data:`CODE_SOURCES` maps the source's name to its renderer (the docs' registry of sources takes
it whole).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path


def _python_constants(text: str, relative: str) -> dict[str, tuple[str, str]]:
    """A module's top-level assignments: name -> (the expression as written, its line's
    comment)."""
    lines = text.splitlines()
    found: dict[str, tuple[str, str]] = {}
    for node in ast.parse(text, relative).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            rest = lines[(node.end_lineno or node.lineno) - 1][node.end_col_offset or 0 :]
            comment = rest.strip()[1:].strip() if rest.strip().startswith("#") else ""
            found[target.id] = (ast.get_source_segment(text, value) or "", comment)
    return found


MAKE_VARIABLE = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*(?:\?|:|::)?=\s*(?P<value>.*?)\s*$")


def _make_variables(text: str) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        match = MAKE_VARIABLE.match(line)
        if match and not line.endswith("\\"):
            found.setdefault(match["name"], (match["value"], ""))
    return found


def constants(root: Path, args: list[str]) -> str:
    """``constants FILE NAME ... [FILE NAME ...]``: a table of each constant's file, name,
    value as the code writes it and the comment on its line."""
    rows: list[str] = []
    declared: dict[str, tuple[str, str]] | None = None
    relative = ""
    for word in args:
        if not word.isidentifier() or word == "Makefile":
            relative, path = word, root / word
            if not path.is_file():
                raise ValueError(f"constants: {relative}: no such file (the block's source)")
            text = path.read_text(encoding="utf-8")
            if word.endswith(".py"):
                declared = _python_constants(text, relative)
            else:
                declared = _make_variables(text)
            continue
        if declared is None:
            raise ValueError(f"constants: {word!r} before any file (constants FILE NAME ...)")
        if word not in declared:
            raise ValueError(f"constants: {relative} declares no {word} at its top level")
        value, comment = (part.replace("|", "\\|") for part in declared[word])
        rows.append(f"| `{relative}` | `{word}` | `{value}` | {comment} |")
    if not rows:
        raise ValueError("constants: a file and at least one name (constants FILE NAME ...)")
    return "\n".join(["| file | constant | value | its comment |", "|---|---|---|---|", *rows])


CODE_SOURCES: dict[str, Callable[[Path, list[str]], str]] = {"constants": constants}
