"""Final-answer extraction from model responses and reference solutions.

Only the *last* ``\\boxed{...}`` / ``\\fbox{...}`` counts: math-verify alone would parse two boxes
as a set, which is wrong for graded single answers. Braces are matched with a counter so that
nested groups (``\\boxed{\\frac{1}{2}}``) come out whole; escaped braces (``\\{``) do not count.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

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


def iter_boxed(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, content)`` of every balanced box, nested ones included, in text order."""
    for match in _BOX_COMMAND.finditer(text):
        open_index = match.end() - 1
        close_index = _matching_brace(text, open_index)
        if close_index is not None:
            yield match.start(), close_index + 1, text[open_index + 1 : close_index]


def all_boxed(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{}``/``\\fbox{}`` in order of appearance."""
    return [content for _, _, content in iter_boxed(text)]


def last_boxed(text: str | None) -> str | None:
    """Content of the last balanced ``\\boxed{}``/``\\fbox{}``, stripped; None if there is none.

    Nested boxes resolve to the outermost last one: ``\\boxed{\\boxed{3}}`` gives ``\\boxed{3}``,
    which normalisation then unwraps.
    """
    if not text:
        return None
    last: str | None = None
    last_end = -1
    for start, end, content in iter_boxed(text):
        if start < last_end:
            continue  # nested inside the previous box: the outer one is the answer
        last, last_end = content, end
    return last.strip() if last is not None else None


# --- multiple choice -------------------------------------------------------------------------

CHOICE_LETTERS = "ABCD"

# A box (or a gold answer) that holds just a letter: "B", "(B)", "\text{(B)}", "\textbf{B}.".
_CHOICE_ALONE = re.compile(
    r"\s*\$?\s*(?:\\(?:text|textbf|textrm|mathrm|mathbf)\s*\{\s*)?\(?\s*([A-Da-d])\s*\)?"
    r"\s*\}?\s*\$?\s*[.:]?\s*"
)
# A box that starts with an upper-case option and goes on with its text: "B) 10 eV", "C: 4".
_CHOICE_LEADING = re.compile(r"\s*\(?([A-D])[).:]\s+\S")
# "Answer: C", "**Answer:** (b)", "the answer is (B)", "The correct answer is option C".
_CHOICE_STATEMENT = re.compile(
    r"(?i:\banswer\b)[*_]*(?:\s+(?i:is)\b)?[*_]*\s*[:：]?[*_]*\s*\$?\s*"
    r"(?:(?i:option|choice)\s+)?(?P<open>\()?\s*(?P<letter>[A-Da-d])\s*(?P<close>\))?"
    r"(?![A-Za-z0-9])"
)


def choice_letter(text: str | None) -> str | None:
    """The option letter (upper case) that ``text`` consists of, or None."""
    if not text:
        return None
    match = _CHOICE_ALONE.fullmatch(text) or _CHOICE_LEADING.match(text)
    return match.group(1).upper() if match else None


def extract_choice(text: str | None) -> str | None:
    """The last option letter a response commits to, upper case; None if there is none.

    Accepted forms: ``\\boxed{X}``, ``\\boxed{(X)}``, ``\\boxed{\\text{(X)}}``,
    ``\\boxed{\\textbf{(X)}}``, ``Answer: X`` and ``answer is (X)``; the last occurrence wins.
    A bare lower-case letter after "answer is" counts only when it ends the phrase ("the answer
    is a prime" is not option A).
    """
    if not text:
        return None
    candidates: list[tuple[int, str]] = []
    for start, _, content in iter_boxed(text):
        letter = choice_letter(content)
        if letter:
            candidates.append((start, letter))
    for match in _CHOICE_STATEMENT.finditer(text):
        letter = match.group("letter")
        bracketed = match.group("open") and match.group("close")
        if letter.islower() and not bracketed:
            rest = text[match.end() : match.end() + 2]
            if rest and not re.match(r"\s*(?:$|[.,;:!*)\]\n])", rest):
                continue
        candidates.append((match.start("letter"), letter.upper()))
    return max(candidates)[1] if candidates else None
