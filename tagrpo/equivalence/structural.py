"""Layer 1 of the equivalence checks: cheap structural tests on the text alone.

In order, a rephrasing is rejected when it is

``empty``             nothing left after stripping;
``identical``         the original again (case, spacing and final punctuation ignored);
``too_short`` / ``too_long``
                      outside ``[min_ratio * L - slack, max_ratio * L + slack]`` characters,
                      ``L`` the original's length (the slack lets a 14-character "What is
                      3 + 4?" become a story, while truncated or runaway replies fail);
``numbers_missing``   a number of the original is gone (``numbers: set``: each distinct value
                      must occur; ``multiset``, the default: as often as in the original;
                      ``strict``: multiset and every formula of the original verbatim up to
                      spacing, ``\\left``/``\\right`` and ``\\dfrac``; ``off``: no test);
``formula_missing``   (``strict`` only) a formula of the original is gone;
``numbers_added``     (``reject_new_numbers: true`` only) a number occurs more often than in
                      the original;
``answer_revealed``   the gold answer occurs more often than in the original, or a
                      ``\\boxed{}`` appears: the rephrasing leaks the result.

Numbers are maximal digit runs with an optional decimal part (``1,000`` and ``1{,}000`` are
one number; ``2.50`` equals ``2.5``) and the number words ``two`` .. ``ninety``, which are
compared as digits (``one`` is left out: it is far more often a pronoun than a number).
Signs are ignored: ``-3`` and ``3`` are the same number here.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from tagrpo.config.equivalence import StructuralConfig
from tagrpo.rephrase.rules import mask_formulas

NUMBER_LEVELS = ("off", "set", "multiset", "strict")

STRUCTURAL_REASONS: dict[str, str] = {
    "empty": "empty after stripping",
    "identical": "the original text again",
    "too_short": "much shorter than the original",
    "too_long": "much longer than the original",
    "numbers_missing": "a number of the original is missing",
    "formula_missing": "a formula of the original is missing (strict)",
    "numbers_added": "a number not in the original appears (reject_new_numbers)",
    "answer_revealed": "the gold answer is newly written in the text",
}

_NUMBER = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(\.\d+)?")
_NUMBER_WORDS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)
_FRAC_SHORTHAND = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")


@dataclass(frozen=True)
class StructuralOutcome:
    passed: bool
    reason: str | None = None  # a key of STRUCTURAL_REASONS when rejected
    detail: str | None = None


def _canonical_number(integer: str, fraction: str | None) -> str:
    text = integer.replace(",", "") + (fraction or "")
    try:
        value = Decimal(text)
    except InvalidOperation:
        return text
    normalized = value.normalize()
    # Decimal("100").normalize() is 1E+2: print integers plainly.
    return str(int(normalized)) if normalized == normalized.to_integral() else str(normalized)


def extract_numbers(text: str) -> Counter[str]:
    """The numbers in ``text`` (digits and number words), canonical, with multiplicity."""
    text = _FRAC_SHORTHAND.sub(r"\\frac{\1}{\2}", text.replace("{,}", ","))
    found: Counter[str] = Counter(
        _canonical_number(match.group(1), match.group(2)) for match in _NUMBER.finditer(text)
    )
    for match in _NUMBER_WORD.finditer(text):
        found[str(_NUMBER_WORDS[match.group(1).lower()])] += 1
    return found


def compact_formula(text: str) -> str:
    """A formula (or any text) with spacing and cosmetic LaTeX removed, for containment."""
    text = re.sub(r"\\(?:left|right)(?![a-zA-Z])|\\[,;:!]|\\(?:q?quad)(?![a-zA-Z])", "", text)
    text = re.sub(r"\\[dt]frac", r"\\frac", text)
    return re.sub(r"\s+", "", text)


def formulas(text: str) -> list[str]:
    """The protected spans of ``text`` (math, environments, figures), delimiters stripped."""
    _, spans = mask_formulas(text)
    stripped = []
    for span in spans:
        inner = re.sub(r"^(\$\$|\$|\\\[|\\\()|(\$\$|\$|\\\]|\\\))$", "", span.strip())
        inner = compact_formula(inner).rstrip(".,;")
        if inner:
            stripped.append(inner)
    return stripped


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().rstrip(".?!").casefold()


def answer_revealed(original: str, rephrasing: str, answer: str, answer_kind: str) -> bool:
    """Whether ``rephrasing`` writes the gold answer (or a box) more often than ``original``.

    Numeric golds are compared as numbers; other golds of at least three characters as
    spacing-free substrings; shorter non-numeric golds (``x``, a choice letter) cannot be
    told apart from ordinary text and are not tested.
    """
    if "\\boxed" in rephrasing and "\\boxed" not in original:
        return True
    if answer_kind != "math" or not answer.strip():
        return False
    gold = answer.strip().strip("$").strip()
    gold_numbers = extract_numbers(gold.lstrip("-"))
    if len(gold_numbers) == 1 and _NUMBER.fullmatch(gold.lstrip("-").replace("{,}", ",")):
        (value,) = gold_numbers
        return extract_numbers(rephrasing)[value] > extract_numbers(original)[value]
    compact_gold = compact_formula(gold)
    if len(compact_gold) < 3:
        return False
    return compact_formula(rephrasing).count(compact_gold) > compact_formula(original).count(
        compact_gold
    )


def check_structural(
    original: str,
    rephrasing: str | None,
    answer: str,
    answer_kind: str = "math",
    *,
    config: StructuralConfig,
) -> StructuralOutcome:
    """The first failing structural test for one rephrasing (see the module docstring);
    ``config`` is ``check_equivalence.structural``."""
    text = (rephrasing or "").strip()
    if not text:
        return StructuralOutcome(False, "empty")
    if _plain(text) == _plain(original):
        return StructuralOutcome(False, "identical")
    length, reference = len(text), len(original.strip())
    low = config.min_length_ratio * reference - config.length_slack_chars
    high = config.max_length_ratio * reference + config.length_slack_chars
    if length < low:
        return StructuralOutcome(False, "too_short", f"{length} < {low:.0f} characters")
    if length > high:
        return StructuralOutcome(False, "too_long", f"{length} > {high:.0f} characters")
    if config.numbers != "off" or config.reject_new_numbers:
        before, after = extract_numbers(original), extract_numbers(text)
        if config.numbers == "set":
            missing = sorted(set(before) - set(after))
        elif config.numbers in ("multiset", "strict"):
            missing = sorted((before - after).elements())
        else:
            missing = []
        if missing:
            return StructuralOutcome(False, "numbers_missing", ", ".join(missing[:10]))
        if config.numbers == "strict":
            compact_text = compact_formula(text)
            lost = [f for f in formulas(original) if f not in compact_text]
            if lost:
                return StructuralOutcome(False, "formula_missing", lost[0][:120])
        if config.reject_new_numbers:
            added = sorted((after - before).elements())
            if added:
                return StructuralOutcome(False, "numbers_added", ", ".join(added[:10]))
    if config.answer_revealed and answer_revealed(original, text, answer, answer_kind):
        return StructuralOutcome(False, "answer_revealed", answer[:60])
    return StructuralOutcome(True)
