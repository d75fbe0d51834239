"""Final-answer extraction from model responses and reference solutions.

Only the *last* ``\\boxed{...}`` / ``\\fbox{...}`` counts: math-verify alone would parse two boxes
as a set, which is wrong for graded single answers. Braces are matched with a stack so that
nested groups (``\\boxed{\\frac{1}{2}}``) come out whole; escaped braces (``\\{``) do not count.

Bounded work: every scan here is linear in the text (one pass pairs all braces; the
multiple-choice patterns use possessive quantifiers, so they cannot backtrack), and a response
is scanned over its last :data:`MAX_SCANNED_CHARS` characters only, where its final answer is.
A box that opens before that window is not seen. This module imports nothing heavy: the data
loaders and the command line use it without paying for sympy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Responses are scanned over their last 200,000 characters (about 50k tokens, twice the longest
# generation the project configures); the final answer is at the end.
MAX_SCANNED_CHARS = 200_000

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)\s*+\{")
# An escape (a backslash and the character after it) or a brace: the only tokens that matter
# for pairing braces. DOTALL: "\<newline>" is an escape too.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def scanned_window(text: str) -> str:
    """The part of a response that extraction looks at: its last ``MAX_SCANNED_CHARS``."""
    return text if len(text) <= MAX_SCANNED_CHARS else text[-MAX_SCANNED_CHARS:]


def brace_pairs(text: str) -> dict[int, int]:
    """``{index of "{": index of its "}"}`` for every balanced pair, in one linear pass.

    Escaped braces (``\\{``, ``\\}``) are skipped; a ``}`` with no open brace is ignored, and an
    unclosed ``{`` has no entry.
    """
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for token in _BRACE_TOKEN.finditer(text):
        char = token.group()
        if char == "{":
            stack.append(token.start())
        elif char == "}" and stack:
            pairs[stack.pop()] = token.start()
    return pairs


def _iter_box_spans(text: str) -> Iterator[tuple[int, int, int]]:
    """``(start, open_index, close_index)`` of every balanced box, in text order."""
    if "box" not in text:  # most reference texts and many responses: no scan at all
        return
    pairs = brace_pairs(text)
    for match in _BOX_COMMAND.finditer(text):
        open_index = match.end() - 1
        close_index = pairs.get(open_index)
        if close_index is not None:
            yield match.start(), open_index, close_index


def iter_boxed(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, content)`` of every balanced box, nested ones included, in text order."""
    for start, open_index, close_index in _iter_box_spans(text):
        yield start, close_index + 1, text[open_index + 1 : close_index]


def all_boxed(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{}``/``\\fbox{}`` in order of appearance."""
    return [content for _, _, content in iter_boxed(text)]


def last_boxed(text: str | None) -> str | None:
    """Content of the last balanced ``\\boxed{}``/``\\fbox{}``, stripped; None if there is none.

    Nested boxes resolve to the outermost last one: ``\\boxed{\\boxed{3}}`` gives ``\\boxed{3}``,
    which normalisation then unwraps. Only the last ``MAX_SCANNED_CHARS`` are scanned.
    """
    if not text:
        return None
    text = scanned_window(text)
    last: tuple[int, int] | None = None
    last_end = -1
    for start, open_index, close_index in _iter_box_spans(text):
        if start < last_end:
            continue  # nested inside the previous box: the outer one is the answer
        last, last_end = (open_index, close_index), close_index + 1
    if last is None:
        return None
    return text[last[0] + 1 : last[1]].strip()


# --- multiple choice -------------------------------------------------------------------------

# Option letters: GPQA has four options, the mini world's multiple-choice benchmark up to 26 (so
# that guessing cannot reach its pass@32). A letter past a question's last option is wrong anyway,
# so one letter set serves both.
CHOICE_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# Possessive quantifiers (*+, ?+) throughout: each piece takes what it can and never gives it
# back, so a long run of spaces, newlines or "*" is read once instead of in every split.
# A box (or a gold answer) that holds just a letter: "B", "(B)", "\text{(B)}", "\textbf{B}.".
_CHOICE_ALONE = re.compile(
    r"\s*+\$?+\s*+(?:\\(?:text|textbf|textrm|mathrm|mathbf)\s*+\{\s*+)?+\(?+\s*+([A-Za-z])"
    r"\s*+\)?+\s*+\}?+\s*+\$?+\s*+[.:]?+\s*+"
)
# A box that starts with an upper-case option and goes on with its text: "B) 10 eV", "C: 4".
_CHOICE_LEADING = re.compile(r"\s*+\(?+([A-Z])[).:]\s++\S")
# "Answer: C", "**Answer:** (b)", "the answer is (B)", "The correct answer is option C".
_CHOICE_STATEMENT = re.compile(
    r"(?i:\banswer\b)[*_]*+(?:\s++(?i:is)\b)?+[*_]*+\s*+[:：]?+[*_]*+\s*+\$?+\s*+"
    r"(?:(?i:option|choice)\s++)?+(?P<open>\()?+\s*+(?P<letter>[A-Za-z])"
    r"(?:\s*+(?P<close>\)))?+(?![A-Za-z0-9])"
)
_LETTER_ENDS_PHRASE = re.compile(r"\s*+(?:$|[.,;:!*)\]\n])")


def _choice_letter_in(text: str, start: int, end: int) -> str | None:
    """The option letter that ``text[start:end]`` consists of, without copying the slice."""
    match = _CHOICE_ALONE.fullmatch(text, start, end) or _CHOICE_LEADING.match(text, start, end)
    return match.group(1).upper() if match else None


def choice_letter(text: str | None) -> str | None:
    """The option letter (upper case) that ``text`` consists of, or None."""
    if not text:
        return None
    return _choice_letter_in(text, 0, len(text))


def extract_choice(text: str | None) -> str | None:
    """The last option letter a response commits to, upper case; None if there is none.

    Accepted forms: ``\\boxed{X}``, ``\\boxed{(X)}``, ``\\boxed{\\text{(X)}}``,
    ``\\boxed{\\textbf{(X)}}``, ``Answer: X`` and ``answer is (X)``; the last occurrence wins.
    A bare lower-case letter after "answer is" counts only when it ends the phrase ("the answer
    is a prime" is not option A). Only the last ``MAX_SCANNED_CHARS`` are scanned.
    """
    if not text:
        return None
    text = scanned_window(text)
    candidates: list[tuple[int, str]] = []
    for start, open_index, close_index in _iter_box_spans(text):
        letter = _choice_letter_in(text, open_index + 1, close_index)
        if letter:
            candidates.append((start, letter))
    for match in _CHOICE_STATEMENT.finditer(text):
        letter = match.group("letter")
        bracketed = match.group("open") and match.group("close")
        if letter.islower() and not bracketed:
            end = match.end()
            if end < len(text) and not _LETTER_ENDS_PHRASE.match(text, end, end + 2):
                continue
        candidates.append((match.start("letter"), letter.upper()))
    return max(candidates)[1] if candidates else None
