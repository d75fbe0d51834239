"""Turning an LLM's reply into rephrasing texts, whatever shape the reply takes.

Replies seen in practice: a bare rephrasing; the prompt's cue echoed (``Rephrasing it: ...``,
``the above question: ...``, the question itself); a chat preamble (``Sure! Here are three
rephrasings:``); numbered lists in several styles (``1.``, ``2)``, ``(3)``, ``**1.**``,
``Rephrasing 2:``); items separated by blank lines or by single lines; markdown bold, quotes
and code fences; fewer or more items than asked. :func:`parse_reply` returns the items it
found, at most ``expected`` of them, and names every repair it made in ``issues`` so that the
stage can count them. It never invents text: a reply with no usable item gives no items.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A list marker at the start of a line: optional bullet/bold/label, a number, a delimiter.
_MARKER = re.compile(
    r"""^\s*(?:[-*\u2022]\s+)?(?:\*\*|__)?\s*
    (?:(?:rephras(?:ing|ed\ question|e)|version|variant|option|alternative)\s*\#?\s*)?
    (?:\((?P<a>\d{1,2})\)|\[(?P<b>\d{1,2})\]|(?P<c>\d{1,2})(?:[.):]|\s*[-\u2013]\s))
    \s*(?:\*\*|__)?\s*:?\s*""",
    re.IGNORECASE | re.VERBOSE,
)
# Labelled items without a delimiter after the number ("Rephrasing 2 What is ...") are not
# accepted: a rephrasing may itself begin with a number.
_CUE = re.compile(
    r"^\s*(?:\*\*|__)?\s*(?:rephras(?:ing|ed)(?:\s+it|\s+question|\s+version)?|rephrase|"
    r"the\s+above\s+question|question)\s*(?:\*\*|__)?\s*:\s*(?:\*\*|__)?\s*",
    re.IGNORECASE,
)
_INNER_CUE = re.compile(
    r"\n\s*(?:\*\*)?rephras(?:ing|ed)(?:\s+it|\s+question)?(?:\*\*)?\s*:\s*", re.I
)
_PREAMBLE = re.compile(
    r"^\s*(?:sure|certainly|of course|okay|ok|here\s+(?:is|are)|below\s+(?:is|are))\b.*:\s*$",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^\s*```\w*\s*$")
_QUOTES = {('"', '"'), ("\u201c", "\u201d"), ("'", "'"), ("\u2018", "\u2019")}


@dataclass(frozen=True)
class ParsedReply:
    """Items found in one reply (at most the number expected) and the repairs made."""

    items: list[str]
    issues: list[str] = field(default_factory=list)


def _marker_number(line: str) -> tuple[int, int] | None:
    """(item number, end of the marker) if ``line`` starts with a list marker."""
    match = _MARKER.match(line)
    if not match:
        return None
    number = match.group("a") or match.group("b") or match.group("c")
    return int(number), match.end()


def _clean_item(text: str) -> str:
    """Remove echoed cues, bold, quotes and surplus whitespace from one item."""
    inner = list(_INNER_CUE.finditer("\n" + text))
    if inner:  # an echoed "Question: ...\nRephrasing it: X" keeps only X
        text = ("\n" + text)[inner[-1].end() :]
    previous = None
    while previous != text:
        previous = text
        text = _CUE.sub("", text, count=1).strip()
        if text.startswith(("**", "__")) and text.endswith(("**", "__")) and len(text) > 4:
            text = text[2:-2].strip()
        if len(text) >= 2 and (text[0], text[-1]) in _QUOTES:
            text = text[1:-1].strip()
    lines = [line.rstrip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _numbered_items(lines: list[str]) -> tuple[list[str], bool] | None:
    """Split at markers numbered 1, 2, 3, ...; None unless at least two are found.

    Only a marker continuing the sequence starts an item, so the ``1.`` of a list inside a
    rephrasing does not split it (its ``2.`` would). Returns the items and whether text came
    before the first marker (a preamble).
    """
    starts: list[tuple[int, int]] = []  # (line index, marker end)
    expected_number = 1
    for index, line in enumerate(lines):
        found = _marker_number(line)
        if found and found[0] == expected_number:
            starts.append((index, found[1]))
            expected_number += 1
    if len(starts) < 2:
        return None
    items = []
    for position, (index, marker_end) in enumerate(starts):
        stop = starts[position + 1][0] if position + 1 < len(starts) else len(lines)
        items.append("\n".join([lines[index][marker_end:], *lines[index + 1 : stop]]))
    preamble = any(line.strip() for line in lines[: starts[0][0]])
    return items, preamble


def parse_reply(text: str | None, expected: int) -> ParsedReply:
    """The rephrasings in ``text``: at most ``expected``, in reply order, duplicates removed.

    ``issues`` codes: ``empty`` (nothing usable), ``fence``, ``preamble``, ``numbered``,
    ``blocks``/``lines`` (how several items were separated), ``duplicate``, ``extra:K``
    (K more items than expected, dropped), ``short:K`` (K fewer).
    """
    if expected < 1:
        raise ValueError(f"expected must be >= 1, got {expected}")
    issues: list[str] = []
    if text is None or not text.strip():
        return ParsedReply([], ["empty", f"short:{expected}"])
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if any(_FENCE.match(line) for line in lines):
        lines = [line for line in lines if not _FENCE.match(line)]
        issues.append("fence")
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines and _PREAMBLE.match(lines[0]):
        lines.pop(0)
        issues.append("preamble")

    numbered = _numbered_items(lines)
    starts_numbered = bool(lines) and (_marker_number(lines[0]) or (0, 0))[0] == 1
    if numbered and (expected > 1 or starts_numbered):
        raw_items, preamble = numbered
        issues.append("numbered")
        if preamble and "preamble" not in issues:
            issues.append("preamble")
    elif expected == 1:
        # One rephrasing was asked for: its own line breaks (a display formula, a list of
        # conditions) are part of it.
        raw_items = ["\n".join(lines)]
    else:
        body = "\n".join(lines).strip()
        blocks = [block for block in re.split(r"\n\s*\n", body) if block.strip()]
        if len(blocks) >= 2:
            raw_items = blocks
            issues.append("blocks")
        else:
            raw_items = [line for line in body.split("\n") if line.strip()]
            if len(raw_items) >= 2:
                issues.append("lines")

    items: list[str] = []
    for raw in raw_items:
        item = _clean_item(raw)
        if not item:
            continue
        if item in items:
            issues.append("duplicate")
            continue
        items.append(item)
    if not items:
        issues.append("empty")
    if len(items) > expected:
        issues.append(f"extra:{len(items) - expected}")
        items = items[:expected]
    elif len(items) < expected:
        issues.append(f"short:{expected - len(items)}")
    return ParsedReply(items, issues)
