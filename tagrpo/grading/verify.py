"""Grading one response against a gold answer.

Math answers: the content of the last ``\\boxed{}``/``\\fbox{}`` of the response, normalised
(:mod:`tagrpo.grading.normalize`), then decided by the first rule that applies:

1. units and words: two different measurement units (``5 cm`` vs ``5 m``) are a mismatch; an
   answer that keeps words other than units (``3 \\text{ or more}``) is compared as a string
   (case aside), never by value;
2. ``exact``: identical normalised strings (whitespace ignored);
3. equations: an equation never matches a non-equation (``x - 3z = 0`` is not ``0``, ``3 = 4``
   is not ``4``); normalisation has already dropped a bare variable on the left (``x = 4``);
4. ``integer``: both are plain integers, compared as integers (equal or not: decisive);
5. base-n numbers (``52_8``, ``-221_4``, ``0.0011_{3}``): sign, digits and base must agree; a
   bare pred is read in the gold's base; a pred in another base than a plain gold is compared
   by value;
6. ``numeric``: both are plain numbers (integers, decimals, ``\\frac{a}{b}``, ``a/b``, scientific
   notation ``a \\times 10^{k}``), decided exactly with fractions by :func:`numbers_match`;
7. ``tuple``: both are ``(a, b, ...)``/``[a, b]`` with the same brackets, compared element by
   element. math-verify reads a gold ``(1, 2)`` as an open interval (and ``(2, 1)`` as an
   empty one); element-wise comparison is right for both points and intervals;
8. ``math_verify``: math-verify on the normalised strings; when both sides are numeric
   expressions without symbols (``\\frac{1}{2005!}``, ``\\sqrt{2}/2``), their values decide by
   the same :func:`numbers_match` rule, at 60 significant digits, instead of math-verify's
   rounding to 6 decimals (which calls every number below 5e-7 zero).

Numeric tolerance (:func:`numbers_match`), the same for every benchmark:

* exact values (integers, fractions, closed forms) compare exactly: ``1/2005!`` is not
  ``1/2004!``;
* a decimal gold (a decimal point or scientific notation: ``1.6``, ``1.325e-27``) is read as
  rounded to the digits it shows, as Minerva's physics answers are: a decimal pred matches when
  it lies within half a unit of the gold's last digit (``1.57`` for ``1.6``; not ``1.33e-27``
  for ``1.325e-27``, which is less precise than the gold; not ``3.2e-19`` for ``1.6e-19``). The
  price: 83 of MATH test's 5,000 golds are decimals (``2.5``), and ``2.54`` matches those;
* otherwise, a value written as a decimal must agree with the other within a relative 1e-6
  (``0.333333`` is ``1/3``; ``0.33`` and ``3.14`` are not ``1/3`` and ``\\pi``).

Multiple choice: the last option letter the response commits to
(:func:`tagrpo.grading.extract.extract_choice`), compared case-insensitively.

Bounded work: answers longer than :data:`MAX_ANSWER_CHARS` are compared as normalised strings
only (no parser). Extraction and every other step are linear in the response; the time limit
itself is the pool's (:mod:`tagrpo.grading.pool`).

Safety: math-verify is used with ``LatexExtractionConfig`` only. ``ExprExtractionConfig`` hands
text to sympy's ``parse_expr``, which calls Python's ``eval``; model output must never reach
it. The LaTeX path has one such call too (``sympy.Number(token)`` for numeric tokens, which
goes through ``sympify``); :func:`_math_verify_api` replaces it with ``int``/
``Float`` construction, so no model text is ever evaluated as code. math-verify's own
``signal.alarm`` timeouts are switched off (they only work in a main thread and would fight
ours).

Imports: sympy and math-verify (about two seconds) load on the first answer that needs them;
most answers (integers, plain numbers, identical strings, option letters) never do.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from tagrpo.grading.extract import choice_letter, extract_choice, last_boxed
from tagrpo.grading.kinds import ANSWER_KINDS
from tagrpo.grading.normalize import (
    NormalizedAnswer,
    compact,
    measurement_units,
    normalize_full,
    split_tuple,
    top_level_equals,
)

# Longer answers (box contents or golds) are compared as normalised strings only: real answers
# are far shorter (the longest gold of MATH, OlympiadBench and Minerva has 250 characters), and
# the LaTeX parser's cost grows quickly with length.
MAX_ANSWER_CHARS = 2_000
# Relative tolerance when a decimal meets an exact value (see the module docstring).
RELATIVE_TOLERANCE = Fraction(1, 10**6)
# Plain-number exponents beyond this are left to the parser (10^{10^6} has a million digits).
_MAX_EXPONENT = 400
_MAX_DIGITS = 400
_WORKING_DIGITS = 60  # significant digits of the numeric comparison of closed forms

_INTEGER = re.compile(r"[-+]?\d+")
_DECIMAL_TOKEN = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# Plain numbers as normalisation writes them (scientific notation: "a \times 10^{k}").
_PLAIN_NUMBER = re.compile(
    r"(?P<sign>[-+]?)\s*+(?:"
    r"(?P<mantissa>\d+(?:\.\d*+)?+|\.\d++)(?:\s*+\\times\s*+10\^\{(?P<exponent>-?\d+)\})?+"
    r"|\\frac\{(?P<num1>\d++)\}\{(?P<den1>\d++)\}"
    r"|(?P<num2>\d++)\s*+/\s*+(?P<den2>\d++)"
    r"|10\^\{(?P<power>-?\d+)\})"
)
_BASE_NUMBER = re.compile(
    r"(?P<sign>[-+]?)(?P<digits>[0-9A-Za-z]++(?:\.[0-9A-Za-z]++)?+)_\{?(?P<base>\d{1,2})\}?"
)
_INEQUALITY = re.compile(r"[<>!]=|\\(?:le|ge|leq|geq|neq|ne|approx|equiv)(?![A-Za-z])")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GradeResult:
    correct: bool
    pred: str  # the extracted final answer: box content or option letter, "" if none
    # exact | integer | numeric | tuple | math_verify (correct); mismatch | no_answer |
    # empty_gold | timeout | wall_timeout | error (incorrect)
    reason: str


# --- heavy imports, on first use; no eval of model text ---------------------------------------


@lru_cache(maxsize=1)
def _math_verify_api() -> Any:
    """sympy and math-verify, imported and made safe once per process."""
    import latex2sympy2_extended.latex2sympy2 as latex2sympy2
    import math_verify

    # math-verify warns once per process that its timeout is off: that is deliberate here.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    latex2sympy2._Latex2Sympy.parse_number = _safe_parse_number
    return math_verify


def _latex_only() -> tuple[Any, ...]:
    return (_math_verify_api().LatexExtractionConfig(),)


def _safe_parse_number(self: Any, text: str) -> Any:
    """Drop-in for latex2sympy's ``parse_number`` that never goes through ``sympify``.

    The original calls ``sympy.Number(text)``, i.e. ``sympify`` -> ``parse_expr`` -> ``eval``
    on the token. The token is lexer-constrained to digits, but we keep the rule absolute:
    model text is never evaluated. Results are identical (``Integer``/``Float`` from the
    string, with the precision the digits imply).
    """
    import sympy

    text = text.replace(",", "")
    if text.isascii() and text.isdigit():
        return sympy.Integer(int(text))  # int() handles leading zeros and is not eval
    if _DECIMAL_TOKEN.fullmatch(text):
        return sympy.Float(text)
    raise ValueError(f"not a number token: {text[:40]!r}")


# --- numbers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NumberValue:
    """A numeric answer's value and how it was written.

    ``value``: exact (a Fraction) for plain numbers, else a 60-digit ``mpmath`` complex.
    ``decimal``: written as a decimal or in scientific notation, i.e. possibly rounded.
    ``half_unit``: half a unit of the last digit shown, for a plain decimal; else None.
    ``exact``: no rounded number inside (closed forms such as ``\\sqrt{2}`` are exact).
    """

    value: Any
    decimal: bool
    exact: bool
    half_unit: Fraction | None = None


def plain_number(normalized: str) -> NumberValue | None:
    """Value of a plain number: ``-12``, ``0.375``, ``\\frac{3}{8}``, ``-3/8``, ``1.5 \\times
    10^{-3}``, ``10^{6}``; None for anything else.

    The most common answers never need the LaTeX parser, whose first parse of a shape costs
    milliseconds in every worker process.
    """
    match = _PLAIN_NUMBER.fullmatch(normalized)
    if match is None:
        return None
    sign = -1 if match.group("sign") == "-" else 1
    try:
        mantissa = match.group("mantissa")
        if mantissa is not None:
            exponent = int(match.group("exponent") or 0)
            if abs(exponent) > _MAX_EXPONENT or len(mantissa) > _MAX_DIGITS:
                return None
            decimals = len(mantissa.partition(".")[2])
            scale = Fraction(10) ** exponent
            value = sign * Fraction(mantissa) * scale
            written_as_decimal = "." in mantissa or match.group("exponent") is not None
            half_unit = Fraction(1, 2) * scale / 10**decimals if written_as_decimal else None
            return NumberValue(value, written_as_decimal, True, half_unit)
        if match.group("power") is not None:
            power = int(match.group("power"))
            if abs(power) > _MAX_EXPONENT:
                return None
            return NumberValue(sign * Fraction(10) ** power, False, True)
        numerator = match.group("num1") or match.group("num2")
        denominator = match.group("den1") or match.group("den2")
        if len(numerator) > _MAX_DIGITS or len(denominator) > _MAX_DIGITS:
            return None
        if int(denominator) == 0:
            return None
        return NumberValue(sign * Fraction(int(numerator), int(denominator)), False, True)
    except (ValueError, ZeroDivisionError):
        return None


def _as_mp(value: Any) -> Any:
    import mpmath

    if isinstance(value, Fraction):
        return mpmath.mpf(value.numerator) / value.denominator
    return value


class _CloseCall(Exception):
    """Two irrational closed forms agree to 48 digits: only symbolic simplification can tell."""


def numbers_match(pred: NumberValue, gold: NumberValue) -> bool:
    """The numeric tolerance rule (module docstring): exact, gold's digits, or relative 1e-6.

    Raises :class:`_CloseCall` for two irrational closed forms whose values agree to 48 of
    60 digits: equal or not, that is for math-verify's symbolic check to decide.
    """
    if isinstance(pred.value, Fraction) and isinstance(gold.value, Fraction):
        difference = abs(pred.value - gold.value)
        magnitude = abs(gold.value)
        if difference == 0:
            return True
        if gold.decimal and pred.decimal and gold.half_unit is not None:
            return difference <= max(gold.half_unit, RELATIVE_TOLERANCE * magnitude)
        if pred.decimal or gold.decimal or not (pred.exact and gold.exact):
            return difference <= RELATIVE_TOLERANCE * magnitude
        return False
    import mpmath

    with mpmath.workdps(_WORKING_DIGITS):
        pred_value, gold_value = _as_mp(pred.value), _as_mp(gold.value)
        difference = abs(pred_value - gold_value)
        magnitude = max(abs(pred_value), abs(gold_value))
        if pred.exact and gold.exact and not (pred.decimal or gold.decimal):
            # Closed forms that differ in their first 48 digits differ; closer ones are not
            # called equal here (2^2005 sqrt(2) + 1 is not 2^2005 sqrt(2)): see CLOSE_CALL.
            if difference > mpmath.mpf(10) ** (12 - _WORKING_DIGITS) * magnitude:
                return False
            raise _CloseCall
        if difference == 0:
            return True
        if gold.decimal and pred.decimal and gold.half_unit is not None:
            tolerance = max(_as_mp(gold.half_unit), abs(gold_value) * mpmath.mpf("1e-6"))
            return bool(difference <= tolerance)
        return bool(difference <= abs(gold_value) * mpmath.mpf("1e-6"))


def _sympy_number(expr: Any) -> NumberValue | None:
    """Value of a symbol-free numeric sympy expression (not a set, tuple, relation, matrix)."""
    import mpmath
    import sympy

    if not isinstance(expr, sympy.Expr) or expr.free_symbols or not expr.is_number:
        return None
    if expr.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return None
    if expr.is_rational and not expr.atoms(sympy.Float):
        # Integer arithmetic, however large (2^{2005} + 1, 100!/2^{50}): exact. The parse is
        # unevaluated; doit() computes it (within the item's CPU budget).
        value = expr if expr.is_Rational else expr.doit()
        if value.is_Rational:
            return NumberValue(Fraction(int(value.p), int(value.q)), False, True)
    try:
        evaluated = expr.evalf(_WORKING_DIGITS)
        real, imaginary = evaluated.as_real_imag()
        with mpmath.workdps(_WORKING_DIGITS):
            value = mpmath.mpc(
                mpmath.mpf(sympy.Float(real, _WORKING_DIGITS)._mpf_),
                mpmath.mpf(sympy.Float(imaginary, _WORKING_DIGITS)._mpf_),
            )
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return None
    if not (mpmath.isfinite(value.real) and mpmath.isfinite(value.imag)):
        return None
    has_float = bool(expr.atoms(sympy.Float))
    return NumberValue(value, has_float, not has_float)


# --- math ------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _normalized_gold(answer: str, keep_lhs: bool = False) -> NormalizedAnswer:
    return normalize_full(answer, keep_lhs)


@dataclass(frozen=True)
class _Parsed:
    items: tuple[Any, ...]  # math-verify's parse: sympy objects, then its normalised string
    number: NumberValue | None  # the value when the answer is a symbol-free numeric expression


@lru_cache(maxsize=8192)
def _parse_latex(normalized: str) -> _Parsed:
    """math-verify's parse of one normalised answer, LaTeX only, cached.

    Gold answers repeat across the samples of a question and wrong answers repeat across
    samples too, so one cache serves both sides.
    """
    api = _math_verify_api()
    items = tuple(
        api.parse(f"${normalized}$", extraction_config=_latex_only(), parsing_timeout=None)
    )
    return _Parsed(items, _sympy_number(items[0]) if items else None)


def _is_zero(number: NumberValue) -> bool:
    return number.value == 0


def _math_verify(pred: str, gold: str) -> bool:
    gold_parsed = _parse_latex(gold)
    pred_parsed = _parse_latex(pred)
    if not gold_parsed.items or not pred_parsed.items:
        return False
    gold_number, pred_number = gold_parsed.number, pred_parsed.number
    if gold_number is not None and pred_number is not None:
        plain_gold = plain_number(gold)
        if plain_gold is not None:
            gold_number = plain_gold  # keeps the digits the gold shows
        # Number pairs are decided here, never by math-verify's rounding to 6 decimals, with
        # two exceptions left to its symbolic check: two irrational closed forms that agree to
        # 48 digits, and a closed form whose 60-digit value is a rounding residue against an
        # exact zero (it may be zero).
        try:
            if numbers_match(pred_number, gold_number):
                return True
            if not (_is_zero(gold_number) or _is_zero(pred_number)):
                return False
        except _CloseCall:
            # sympy's evalf raises its precision through cancellation: a difference it can
            # resolve to 30 digits is not zero unless it is exactly 0 (2^{2005} sqrt(2) + 1 is
            # not 2^{2005} sqrt(2)); one it cannot resolve (PrecisionExhausted) may be zero,
            # and goes on to math-verify's simplification.
            from sympy.core.evalf import PrecisionExhausted

            try:
                difference = (pred_parsed.items[0] - gold_parsed.items[0]).evalf(30, strict=True)
                return bool(difference == 0)  # exactly zero when sympy cancelled it outright
            except PrecisionExhausted:
                pass
    return bool(
        _math_verify_api().verify(
            list(gold_parsed.items),
            list(pred_parsed.items),
            allow_set_relation_comp=True,  # "(-\infty, 2]" vs "x \le 2"
            timeout_seconds=None,
        )
    )


def _is_equation(normalized: str) -> bool:
    return top_level_equals(normalized) > 0 and _INEQUALITY.search(normalized) is None


def _base_value(sign: str, digits: str, base: int) -> Fraction | None:
    """Exact value of base-``base`` digits (``"0.0011"`` included); None if a digit is invalid."""
    whole, _, fraction = digits.lower().partition(".")
    try:
        value = Fraction(int(whole, base)) if whole else Fraction(0)
        if fraction:
            value += Fraction(int(fraction, base), base ** len(fraction))
    except ValueError:
        return None
    return -value if sign == "-" else value


def _base_number(normalized: str) -> tuple[str, str, int] | None:
    """``(sign, digits, base)`` of ``52_8``, ``-221_4``, ``0.0011_{3}``; None if not one.

    Every digit must be valid in the base, so a subscripted variable (``x_2``) is not a number.
    """
    match = _BASE_NUMBER.fullmatch(normalized)
    if match is None:
        return None
    base = int(match.group("base"))
    sign, digits = match.group("sign"), match.group("digits")
    if not 2 <= base <= 36 or _base_value(sign, digits, base) is None:
        return None
    return ("-" if sign == "-" else ""), digits.lower(), base


def _compare_base(pred: str, gold: str) -> bool | None:
    """Decision for base-n numbers; None when neither side is one."""
    gold_base, pred_base = _base_number(gold), _base_number(pred)
    if gold_base is not None:
        sign, digits, base = gold_base
        if pred_base is not None:
            return pred_base == gold_base
        # A bare pred is read in the gold's base: "52" for "52_8".
        bare = re.fullmatch(r"([-+]?)([0-9A-Za-z]+(?:\.[0-9A-Za-z]+)?)", pred)
        if bare is None:
            return False
        return (("-" if bare.group(1) == "-" else ""), bare.group(2).lower()) == (sign, digits)
    if pred_base is not None:
        sign, digits, base = pred_base
        gold_number = plain_number(gold)
        if gold_number is None:
            return False
        return _base_value(sign, digits, base) == gold_number.value
    return None


def equivalent(pred: str, gold: str) -> tuple[bool, str]:
    """Whether two *normalised* answers are equivalent, and the rule that decided it."""
    if compact(pred) == compact(gold):
        return True, "exact"
    if _is_equation(pred) != _is_equation(gold):
        return False, "equation"  # "x - 3z = 0" vs "0": only a bare variable may be dropped
    if _INTEGER.fullmatch(pred) and _INTEGER.fullmatch(gold):
        return int(pred) == int(gold), "integer"
    base_decision = _compare_base(pred, gold)
    if base_decision is not None:
        return base_decision, "exact"
    pred_number, gold_number = plain_number(pred), plain_number(gold)
    if pred_number is not None and gold_number is not None:
        return numbers_match(pred_number, gold_number), "numeric"
    gold_tuple, pred_tuple = split_tuple(gold), split_tuple(pred)
    if gold_tuple and pred_tuple:
        gold_open, gold_close, gold_items = gold_tuple
        pred_open, pred_close, pred_items = pred_tuple
        if (gold_open, gold_close, len(gold_items)) != (pred_open, pred_close, len(pred_items)):
            return False, "tuple"
        same = all(equivalent(p, g)[0] for p, g in zip(pred_items, gold_items, strict=True))
        return same, "tuple"
    return _math_verify(pred, gold), "math_verify"


def extract_answer(response: str | None, answer_kind: str = "math") -> str | None:
    """The raw answer a response gives: box content (stripped) or option letter; None if none."""
    if answer_kind == "multiple_choice":
        return extract_choice(response)
    if answer_kind != "math":
        raise ValueError(f"answer_kind must be one of {ANSWER_KINDS}, got {answer_kind!r}")
    return last_boxed(response)


def extract_pred(response: str | None, answer_kind: str = "math") -> str:
    """The answer a response gives, as reported in ``GradeResult.pred`` ("" if none)."""
    return extract_answer(response, answer_kind) or ""


def grade_answer(extracted: str | None, answer: str, answer_kind: str = "math") -> GradeResult:
    """Grade an answer already extracted by :func:`extract_answer` against its gold."""
    answer = answer or ""
    if answer_kind == "multiple_choice":
        if extracted is None:
            return GradeResult(False, "", "no_answer")
        gold_letter = choice_letter(answer)
        if gold_letter is None:
            return GradeResult(False, extracted, "empty_gold")
        same = extracted == gold_letter
        return GradeResult(same, extracted, "exact" if same else "mismatch")
    if answer_kind != "math":
        raise ValueError(f"answer_kind must be one of {ANSWER_KINDS}, got {answer_kind!r}")

    boxed = extracted
    if boxed is None:
        return GradeResult(False, "", "no_answer")
    gold = _normalized_gold(answer)
    if not gold.text:
        return GradeResult(False, boxed, "empty_gold")
    pred = normalize_full(boxed)
    if not pred.text:
        return GradeResult(False, boxed, "no_answer")
    if len(boxed) > MAX_ANSWER_CHARS or len(answer) > MAX_ANSWER_CHARS:
        same = compact(pred.text) == compact(gold.text)
        return GradeResult(same, boxed, "exact" if same else "mismatch")
    if "=" in boxed and "=" in answer:
        # Both sides are equations ("y = 3" vs "x = 3", "x = 3z" vs "x - 3z = 0"): compare the
        # equations themselves, left-hand sides kept.
        gold, pred = _normalized_gold(answer, keep_lhs=True), normalize_full(boxed, keep_lhs=True)
    pred_units, gold_units = measurement_units(pred.units), measurement_units(gold.units)
    if pred_units and gold_units and pred_units != gold_units:
        return GradeResult(False, boxed, "mismatch")  # 5 cm is not 5 m
    if pred.words or gold.words:
        # Words other than units ("3 or more", "not 3", "Evelyn") are part of the answer.
        same = compact(pred.text).casefold() == compact(gold.text).casefold()
        return GradeResult(same, boxed, "exact" if same else "mismatch")
    try:
        correct, rule = equivalent(pred.text, gold.text)
    except Exception:  # a parser bug on odd input is a wrong answer, not a crashed batch
        logger.debug("grading failed", exc_info=True)
        return GradeResult(False, boxed, "error")
    return GradeResult(correct, boxed, rule if correct else "mismatch")


def grade_response(response: str | None, answer: str, answer_kind: str = "math") -> GradeResult:
    """Grade one response against its gold answer (no time limit here: the pool has one)."""
    return grade_answer(extract_answer(response or "", answer_kind), answer, answer_kind)


# --- warm-up ---------------------------------------------------------------------------------

# Typical answer shapes (MATH, AMC, AIME, Minerva, GPQA letters). A fresh process spends most of
# its first seconds building the LaTeX parser's prediction cache (ANTLR's DFA) and sympy's
# caches; grading these once in the forkserver hands every worker, restarts included, a warm
# copy.
_WARM_UP_GOLDS = (
    "3", "-4", "1000", "0.35625", "\\frac{1}{2}", "-\\frac{7}{4}", "\\frac{\\sqrt{3}}{2}",
    "\\frac{3\\sqrt{5}}{5}", "2\\sqrt{2}", "\\sqrt[3]{2}", "3 \\pm 2 \\sqrt{2}", "6 - 5i", "\\pi",
    "288 \\pi", "\\frac{\\pi}{4}", "3\\pi - 2", "e^{2}", "2^{10}", "\\log_2 3", "\\sin x",
    "\\cos \\theta", "\\binom{5}{2}", "|x|", "\\infty", "p - q", "x^2 + 2x + 1", "-13x+3",
    "\\frac{x+1}{x-1}", "a^2 b", "y = 2x + 3", "(2, 3)", "(6,31,-1)", "(3, \\frac{\\pi}{2})",
    "[1, 3)", "(-\\infty, 2]", "(0,9) \\cup (9,36)", "(-\\infty, 2) \\cup (3, \\infty)",
    "[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} ]", "x \\in [-2,7]", "\\{1, 2\\}",
    "\\{1\\pm\\sqrt{5},-2\\}", "1, 2, 3", "-2, 1", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
    "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", "\\text{Evelyn}", "\\text{(C)}",
    "\\mathbf{v}", "1.325e-27", "4.5e33", "\\frac{1}{\\sqrt{2}}c",
)  # fmt: skip


def _near_miss(gold: str) -> str:
    """The gold with its first number changed: a typical wrong answer of the same shape."""
    match = re.search(r"\d+", gold)
    if match is None:
        return f"{gold} + 1"
    return f"{gold[: match.start()]}{int(match.group()) + 1}{gold[match.end() :]}"


def warm_up() -> None:
    """Grade a built-in corpus once so that later items find the parser caches warm.

    Never raises: it runs at import time in the forkserver, where an exception would stop
    every worker from starting.
    """
    try:
        for gold in _WARM_UP_GOLDS:
            for answer in (gold, f"x = {gold}", _near_miss(gold), "0.5", "7", "\\sqrt{2}"):
                grade_response(f"So the answer is $\\boxed{{{answer}}}$.", gold)
        for letter in "ABCD":
            grade_response(f"The answer is ({letter}).", "B", "multiple_choice")
    except Exception:  # pragma: no cover - defensive: warm-up is an optimisation only
        logger.debug("grading warm-up failed", exc_info=True)


# Set by GradingPool while it starts the forkserver, whose preload imports this module.
WARM_UP_ON_IMPORT_ENV = "TAGRPO_GRADING_WARM_UP_ON_IMPORT"
if os.environ.get(WARM_UP_ON_IMPORT_ENV) == "1":
    warm_up()


__all__ = [
    "ANSWER_KINDS",
    "MAX_ANSWER_CHARS",
    "GradeResult",
    "NumberValue",
    "equivalent",
    "extract_answer",
    "extract_pred",
    "grade_answer",
    "grade_response",
    "numbers_match",
    "plain_number",
    "warm_up",
]
