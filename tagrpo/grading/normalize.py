"""String normalisation of final answers before any equivalence check.

MATH-style gold answers and model answers differ in presentation far more often than in value:
``\\dfrac`` vs ``\\frac``, ``50\\%`` vs ``50``, ``30^\\circ`` vs ``30``, ``5\\text{ cm}`` vs ``5``,
``1,000`` vs ``1000``, ``x = 3`` vs ``3``. :func:`normalize_answer` removes that presentation so
that most correct answers are decided by a string or integer comparison, and what reaches
math-verify is clean LaTeX (math-verify, for instance, fails to parse ``50\\%``).

Everything here is plain string processing: nothing is ever evaluated.
"""

from __future__ import annotations

import re

from tagrpo.grading.extract import _matching_brace

# Commands whose argument is text rather than mathematics.
_TEXT_COMMAND = re.compile(r"\\(?:text|textrm|textbf|textit|textnormal|textsf|mbox|mathrm)\s*\{")
# Inside \text{}, words such as units ("cm", "square units", "dollars") carry no value.
_UNIT_WORDS = re.compile(r"[A-Za-z][A-Za-z.\s]*")
# Words that join several answers: "1 \text{ and } 2" means the list "1, 2".
_CONNECTORS = {"and", "or", ","}
# Bare unit words after a number ("5 cm", "12 square units"): a conservative list, since a
# trailing letter may also be a variable ("5 m" stays, "5 meters" goes).
_TRAILING_UNITS = re.compile(
    r"(?<=[\d}])\s+(?:square\s+|cubic\s+)?(?:units?|cm|mm|km|meters?|metres?|feet|foot|ft|"
    r"inches|inch|miles?|mph|degrees?|dollars?|cents?|hours?|minutes?|seconds?|days?|"
    r"weeks?|years?|pounds?|ounces?|grams?|kg|liters?|litres?|people|students)"
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?$"
)
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_MIXED_NUMBER = re.compile(r"(-?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
# A simple left-hand side of "x = 3", "x_1 = 3", "\theta = 3": dropped on both sides.
_SIMPLE_LHS = re.compile(r"\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?\s*")
_WHOLE_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Spacing commands; "(?<!\\)" keeps the row separator "\\" of matrices ("\\ 0", "\\,") intact.
_SPACING = re.compile(r"(?<!\\)\\[!,;:>]|\\displaystyle|\\textstyle")
_WIDE_SPACE = re.compile(r"\\q?quad(?![A-Za-z])|~|(?<!\\)\\ ")
_SIZING = re.compile(r"\\left\.|\\right\.|\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ\s*$|°|\\degree(?![A-Za-z])")
_FRAC_SHORTHAND = (
    (re.compile(r"\\frac\s*(\d)\s*(\d)"), r"\\frac{\1}{\2}"),
    (re.compile(r"\\frac\s*(\d)\s*\{"), r"\\frac{\1}{"),
    (re.compile(r"\\frac\s*(\{[^{}]*\})\s*(\d)"), r"\\frac\1{\2}"),
    (re.compile(r"\\sqrt\s*(\d)"), r"\\sqrt{\1}"),
)


def _strip_text_commands(text: str) -> str:
    """Drop unit-like ``\\text{...}`` next to a value; unwrap every other text command."""
    pieces: list[tuple[str, bool]] = []  # (fragment, is_text_argument)
    position = 0
    for match in _TEXT_COMMAND.finditer(text):
        if match.start() < position:
            continue  # nested inside a text command already consumed
        close = _matching_brace(text, match.end() - 1)
        if close is None:
            break
        pieces.append((text[position : match.start()], False))
        pieces.append((text[match.end() : close], True))
        position = close + 1
    if not pieces:
        return text
    pieces.append((text[position:], False))

    outside = "".join(fragment for fragment, is_text in pieces if not is_text)
    if outside.count("=") == 1:  # in "x = \text{Evelyn}" the text is the value, not a unit
        outside = outside.split("=")[1]
    has_value = bool(re.search(r"[0-9A-Za-z\\]", outside))
    result: list[str] = []
    for fragment, is_text in pieces:
        if not is_text:
            result.append(fragment)
            continue
        words = fragment.strip()
        if words in _CONNECTORS:
            result.append(", ")
        elif (
            has_value
            and _UNIT_WORDS.fullmatch(words or "-")
            and (len(words) > 1 or fragment[:1].isspace())
        ):
            result.append(" ")  # a unit such as "\text{ cm}": the value is outside
        else:
            result.append(fragment)
    joined = "".join(result)
    # A unit's exponent ("\text{cm}^2") would now dangle after the value.
    return re.sub(r"\s\^\s*\{?\s*[23]\s*\}?\s*$", "", joined)


def _unwrap_whole(text: str) -> str:
    """``\\boxed{x}`` -> ``x`` and ``{x}`` -> ``x`` when the group spans the whole string."""
    while True:
        text = text.strip()
        match = _WHOLE_BOX.match(text)
        open_index = match.end() - 1 if match else (0 if text.startswith("{") else None)
        if open_index is None or _matching_brace(text, open_index) != len(text) - 1:
            return text
        text = text[open_index + 1 : -1]


def _strip_math_delimiters(text: str) -> str:
    text = text.replace("\\$", "").replace("$", "")  # currency and inline-math markers
    for opener, closer in (("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(opener) and text.endswith(closer):
            text = text[len(opener) : -len(closer)]
    return text.strip()


def _drop_simple_lhs(text: str) -> str:
    """``x = 3`` -> ``3``; leaves equations, chains and systems (``a=1, b=2``) alone."""
    if text.count("=") != 1 or re.search(r"[<>]|\\[lg]eq?|\\ne", text):
        return text
    lhs, rhs = text.split("=")
    if rhs.strip() and _SIMPLE_LHS.fullmatch(lhs):
        return rhs.strip()
    return text


def _mixed_number(text: str) -> str:
    """``137 \\frac{1}{2}`` (a MATH-style mixed number) -> ``\\frac{275}{2}``."""
    match = _MIXED_NUMBER.fullmatch(text)
    if not match:
        return text
    sign, whole, numerator, denominator = match.groups()
    if int(denominator) == 0 or len(whole) > 12:
        return text
    return f"{sign}\\frac{{{int(whole) * int(denominator) + int(numerator)}}}{{{denominator}}}"


def normalize_answer(answer: str | None, keep_lhs: bool = False) -> str:
    """Presentation-free form of one final answer (a box's content or a gold answer).

    ``x = 3`` becomes ``3`` unless ``keep_lhs``: the grader keeps left-hand sides when both
    answers have one, so that the lines ``y = 3`` and ``x = 3`` stay different.
    """
    if not answer:
        return ""
    text = answer.replace("\n", " ").strip()
    text = _strip_math_delimiters(text)
    text = _unwrap_whole(text)
    text = _SIZING.sub("", text)
    text = _WIDE_SPACE.sub(" ", _SPACING.sub("", text))
    text = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", text)
    text = re.sub(r"\\[dt]binom(?![A-Za-z])", r"\\binom", text)
    text = _DEGREES.sub("", text)
    text = text.replace("\\%", "").replace("%", "")
    text = _strip_text_commands(text)
    text = text.replace("{,}", ",")
    text = re.sub(r"\s+", " ", text).strip()
    text = _TRAILING_UNITS.sub("", text)
    text = re.sub(r"(?:\s|\.|\\\.)+$", "", text)  # trailing full stop
    if not keep_lhs:
        text = _drop_simple_lhs(text)
    text = _unwrap_whole(text)
    for pattern, replacement in _FRAC_SHORTHAND:
        text = pattern.sub(replacement, text)
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    text = re.sub(r"^(-?)\.(\d)", r"\g<1>0.\2", text)  # ".5" -> "0.5"
    text = _mixed_number(text)
    return text.strip()


def compact(normalized: str) -> str:
    """Whitespace-free key for the exact comparison of two normalised answers."""
    return re.sub(r"\s+", "", normalized)


def split_tuple(normalized: str) -> tuple[str, str, list[str]] | None:
    """``(a, b, c)`` -> ``("(", ")", ["a", "b", "c"])`` when one bracket pair spans the string.

    Only round and square brackets with at least two top-level elements qualify; sets
    (``\\{...\\}``) and unions (``(0,1) \\cup (2,3)``) do not.
    """
    text = normalized.strip()
    if len(text) < 5 or text[0] not in "([" or text[-1] not in ")]":
        return None
    depth = 0
    parts: list[str] = []
    start = 1
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0 and index != len(text) - 1:
                return None  # the opening bracket closes early: not one group
        elif char == "," and depth == 1:
            parts.append(text[start:index].strip())
            start = index + 1
        index += 1
    if depth != 0:
        return None
    parts.append(text[start:-1].strip())
    if len(parts) < 2 or not all(parts):
        return None
    return text[0], text[-1], parts
