"""Final-answer extraction from model responses and reference solutions.

Only the *last* ``\\boxed{...}`` / ``\\fbox{...}`` counts: math-verify alone would parse two boxes
as a set, which is wrong for graded single answers. Braces are matched with a counter so that
nested groups (``\\boxed{\\frac{1}{2}}``) come out whole; escaped braces (``\\{``) do not count.
"""

from __future__ import annotations

import re

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _matching_brace(text: str, open_index: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_index``, or None if unbalanced."""
    depth = 0
    index = open_index
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2  # skip escaped characters such as \{ and \}
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def all_boxed(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{}``/``\\fbox{}`` in order of appearance."""
    contents: list[str] = []
    for match in _BOX_COMMAND.finditer(text):
        open_index = match.end() - 1
        close_index = _matching_brace(text, open_index)
        if close_index is not None:
            contents.append(text[open_index + 1 : close_index])
    return contents


def last_boxed(text: str | None) -> str | None:
    """Content of the last balanced ``\\boxed{}``/``\\fbox{}``, stripped; None if there is none.

    Nested boxes resolve to the outermost last one: ``\\boxed{\\boxed{3}}`` gives ``\\boxed{3}``,
    which normalisation then unwraps.
    """
    if not text:
        return None
    last: str | None = None
    last_close = -1
    for match in _BOX_COMMAND.finditer(text):
        if match.start() < last_close:
            continue  # nested inside the previous box: the outer one is the answer
        open_index = match.end() - 1
        close_index = _matching_brace(text, open_index)
        if close_index is None:
            continue
        last, last_close = text[open_index + 1 : close_index], close_index
    return last.strip() if last is not None else None
