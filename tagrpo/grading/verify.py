"""Grading one response against a gold answer.

Math answers: the content of the last ``\\boxed{}``/``\\fbox{}`` of the response, normalised
(:mod:`tagrpo.grading.normalize`), then decided by the first rule that applies:

1. ``exact``: identical normalised strings (whitespace ignored);
2. ``integer``: both are plain integers, compared as integers (equal or not: decisive);
3. ``numeric``: both are plain numbers (decimals, ``\\frac{a}{b}``, ``a/b``): equal values are
   correct, values too far apart for math-verify's 6-decimal rounding are wrong, anything in
   between goes on to math-verify;
4. ``tuple``: both are ``(a, b, ...)``/``[a, b]`` with the same brackets, compared element by
   element. math-verify reads a gold ``(1, 2)`` as an open interval (and ``(2, 1)`` as an
   empty one); element-wise comparison is right for both points and intervals;
5. ``math_verify``: math-verify on the normalised strings; when both sides are plain numeric
   expressions whose values clearly differ, its costly ``simplify`` step is skipped.

Multiple choice: the last option letter the response commits to
(:func:`tagrpo.grading.extract.extract_choice`), compared case-insensitively.

Safety: math-verify is used with ``LatexExtractionConfig`` only. ``ExprExtractionConfig`` hands
text to sympy's ``parse_expr``, which calls Python's ``eval``; model output must never reach
it. The LaTeX path has one such call too (``sympy.Number(token)`` for numeric tokens, which
goes through ``sympify``); :func:`_install_safe_number_parsing` replaces it with ``int``/
``Float`` construction, so no model text is ever evaluated as code. math-verify's own
``signal.alarm`` timeouts are switched off (they only work in a main thread and would fight
ours); :mod:`tagrpo.grading.pool` enforces a hard per-item limit in worker processes.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import sympy
from latex2sympy2_extended import latex2sympy2 as _latex2sympy2
from math_verify import LatexExtractionConfig, parse, verify

from tagrpo.grading.extract import choice_letter, extract_choice, last_boxed
from tagrpo.grading.normalize import compact, normalize_answer, split_tuple

ANSWER_KINDS = ("math", "multiple_choice")
# Benchmarks whose gold answer is an option letter. "mini_choice" is the mini world's name for
# its multiple-choice benchmark (tagrpo.miniworld.dataset).
MULTIPLE_CHOICE_BENCHMARKS = frozenset({"gpqa_diamond", "miniworld_choice", "mini_choice"})

# math-verify warns once per process that its timeout is off: that is deliberate here.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_INTEGER = re.compile(r"[-+]?\d+")
_DECIMAL_TOKEN = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SIMPLE_NUMBER = re.compile(
    r"(?P<sign>[-+]?)\s*(?:(?P<decimal>\d+(?:\.\d*)?|\.\d+)"
    r"|\\frac\{(?P<num1>\d+)\}\{(?P<den1>\d+)\}|(?P<num2>\d+)\s*/\s*(?P<den2>\d+))"
)
_BASE_NUMBER = re.compile(r"(?P<digits>[0-9A-Za-z]+)_\{?(?P<base>\d+)\}?")
_LATEX_ONLY = (LatexExtractionConfig(),)


@dataclass(frozen=True)
class GradeResult:
    correct: bool
    pred: str  # the extracted final answer: box content or option letter, "" if none
    # exact | integer | numeric | tuple | math_verify (correct); mismatch | no_answer |
    # empty_gold | timeout | error (incorrect)
    reason: str


# --- no eval of model text -------------------------------------------------------------------


def _safe_parse_number(self: Any, text: str) -> sympy.Number:
    """Drop-in for latex2sympy's ``parse_number`` that never goes through ``sympify``.

    The original calls ``sympy.Number(text)``, i.e. ``sympify`` -> ``parse_expr`` -> ``eval``
    on the token. The token is lexer-constrained to digits, but we keep the rule absolute:
    model text is never evaluated. Results are identical (``Integer``/``Float`` from the
    string, with the precision the digits imply).
    """
    text = text.replace(",", "")
    if text.isascii() and text.isdigit():
        return sympy.Integer(int(text))  # int() handles leading zeros and is not eval
    if _DECIMAL_TOKEN.fullmatch(text):
        return sympy.Float(text)
    raise ValueError(f"not a number token: {text[:40]!r}")


def _install_safe_number_parsing() -> None:
    _latex2sympy2._Latex2Sympy.parse_number = _safe_parse_number


_install_safe_number_parsing()


# --- answer kinds ----------------------------------------------------------------------------


def answer_kind_for(benchmark: str | None, answer: str) -> str:
    """``multiple_choice`` for a registered benchmark whose gold is an option letter, else math.

    An explicit ``answer_kind`` given with the data always wins; callers check it first. A
    registered benchmark whose gold is not a letter (e.g. a copy that stores the option text)
    is graded as math rather than never matching.
    """
    if benchmark in MULTIPLE_CHOICE_BENCHMARKS and choice_letter(answer) is not None:
        return "multiple_choice"
    return "math"


# --- math ------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _normalized_gold(answer: str, keep_lhs: bool = False) -> str:
    return normalize_answer(answer, keep_lhs)


@dataclass(frozen=True)
class _Parsed:
    items: tuple[Any, ...]  # math-verify's parse: sympy objects, then its normalised string
    number: complex | None  # the value when the answer is a plain numeric expression


@lru_cache(maxsize=8192)
def _parse_latex(normalized: str) -> _Parsed:
    """math-verify's parse of one normalised answer, LaTeX only, cached.

    Gold answers repeat across the samples of a question and wrong answers repeat across
    samples too, so one cache serves both sides.
    """
    items = tuple(
        parse(f"${normalized}$", extraction_config=_LATEX_ONLY, parsing_timeout=None)  # type: ignore[arg-type]
    )
    return _Parsed(items, _numeric_value(items[0]) if items else None)


def _numeric_value(expr: Any) -> complex | None:
    """Value of a symbol-free numeric expression (not a set, tuple, relation or matrix)."""
    if not isinstance(expr, sympy.Expr) or expr.free_symbols or not expr.is_number:
        return None
    try:
        value = complex(expr.evalf(30))
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not (math.isfinite(value.real) and math.isfinite(value.imag)):
        return None
    return value


def _clearly_different(gold: complex, pred: complex) -> bool:
    """True when math-verify could not call these equal (it rounds floats to 6 decimals).

    This skips its ``simplify(gold - pred)``, the most expensive step, for wrong numbers.
    """
    return abs(gold - pred) > 1e-6 + 1e-12 * max(abs(gold), abs(pred))


def _rational(normalized: str) -> Fraction | None:
    """Exact value of a plain number: ``-12``, ``0.375``, ``\\frac{3}{8}``, ``-3/8``; else None.

    The most common answers never need the LaTeX parser, whose first parse of a shape costs
    milliseconds in every worker process.
    """
    match = _SIMPLE_NUMBER.fullmatch(normalized)
    if match is None:
        return None
    sign = -1 if match.group("sign") == "-" else 1
    try:
        if match.group("decimal") is not None:
            return sign * Fraction(match.group("decimal"))
        numerator = int(match.group("num1") or match.group("num2"))
        denominator = int(match.group("den1") or match.group("den2"))
    except ValueError:  # over Python's digit limit for int(): leave it to the parser
        return None
    return sign * Fraction(numerator, denominator) if denominator else None


def _math_verify(pred: str, gold: str) -> bool:
    gold_parsed = _parse_latex(gold)
    pred_parsed = _parse_latex(pred)
    if not gold_parsed.items or not pred_parsed.items:
        return False
    if (
        gold_parsed.number is not None
        and pred_parsed.number is not None
        and _clearly_different(gold_parsed.number, pred_parsed.number)
    ):
        return False
    return bool(
        verify(
            list(gold_parsed.items),
            list(pred_parsed.items),
            allow_set_relation_comp=True,  # "(-\infty, 2]" vs "x \le 2"
            timeout_seconds=None,
        )
    )


def equivalent(pred: str, gold: str) -> tuple[bool, str]:
    """Whether two *normalised* answers are equivalent, and the rule that decided it."""
    if compact(pred) == compact(gold):
        return True, "exact"
    if _INTEGER.fullmatch(pred) and _INTEGER.fullmatch(gold):
        return int(pred) == int(gold), "integer"
    gold_base = _BASE_NUMBER.fullmatch(gold)
    if gold_base:
        # "52_8": math-verify drops the subscript, so 52_8 would equal 52_10. Same digits (case
        # aside) and the same base, or the bare digits, count; anything else does not.
        pred_base = _BASE_NUMBER.fullmatch(pred)
        digits = gold_base.group("digits").lower()
        if pred_base:
            same = (pred_base.group("digits").lower(), pred_base.group("base")) == (
                digits,
                gold_base.group("base"),
            )
            return same, "exact"
        return pred.lower() == digits, "exact"
    pred_number, gold_number = _rational(pred), _rational(gold)
    if pred_number is not None and gold_number is not None:
        if pred_number == gold_number:
            return True, "numeric"
        if _clearly_different(complex(gold_number), complex(pred_number)):
            return False, "numeric"
        # Close but unequal (1/3 vs 0.333333): math-verify's rounding rules decide.
    gold_tuple, pred_tuple = split_tuple(gold), split_tuple(pred)
    if gold_tuple and pred_tuple:
        gold_open, gold_close, gold_items = gold_tuple
        pred_open, pred_close, pred_items = pred_tuple
        if (gold_open, gold_close, len(gold_items)) != (pred_open, pred_close, len(pred_items)):
            return False, "tuple"
        same = all(equivalent(p, g)[0] for p, g in zip(pred_items, gold_items, strict=True))
        return same, "tuple"
    return _math_verify(pred, gold), "math_verify"


def extract_pred(response: str | None, answer_kind: str = "math") -> str:
    """The answer a response gives, as reported in ``GradeResult.pred`` ("" if none)."""
    if answer_kind == "multiple_choice":
        return extract_choice(response) or ""
    return last_boxed(response) or ""


def grade_response(response: str, answer: str, answer_kind: str = "math") -> GradeResult:
    """Grade one response against its gold answer (no time limit here: the pool has one)."""
    response = response or ""
    if answer_kind == "multiple_choice":
        letter = extract_choice(response)
        if letter is None:
            return GradeResult(False, "", "no_answer")
        gold_letter = choice_letter(answer)
        if gold_letter is None:
            return GradeResult(False, letter, "empty_gold")
        return GradeResult(
            letter == gold_letter, letter, "exact" if letter == gold_letter else "mismatch"
        )
    if answer_kind != "math":
        raise ValueError(f"answer_kind must be one of {ANSWER_KINDS}, got {answer_kind!r}")

    boxed = last_boxed(response)
    if boxed is None:
        return GradeResult(False, "", "no_answer")
    answer = answer or ""
    gold = _normalized_gold(answer)
    if not gold:
        return GradeResult(False, boxed, "empty_gold")
    pred = normalize_answer(boxed)
    if not pred:
        return GradeResult(False, boxed, "no_answer")
    if "=" in boxed and "=" in answer:
        # Both sides name a variable ("y = 3" vs "x = 3"): compare the equations themselves.
        gold_equation = _normalized_gold(answer, keep_lhs=True)
        pred_equation = normalize_answer(boxed, keep_lhs=True)
        if gold_equation != gold and pred_equation != pred:
            gold, pred = gold_equation, pred_equation
    try:
        correct, rule = equivalent(pred, gold)
    except Exception:  # a parser bug on odd input is a wrong answer, not a crashed batch
        logging.getLogger(__name__).debug("grading failed", exc_info=True)
        return GradeResult(False, boxed, "error")
    return GradeResult(correct, boxed, rule if correct else "mismatch")


# --- warm-up ---------------------------------------------------------------------------------

# Typical answer shapes (MATH, AMC, AIME, GPQA letters). A fresh process spends most of its
# first seconds building the LaTeX parser's prediction cache (ANTLR's DFA) and sympy's caches;
# grading these once in the forkserver hands every worker, restarts included, a warm copy.
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
    "\\mathbf{v}",
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
            for answer in (gold, f"x = {gold}", _near_miss(gold), "0.5", "7"):
                grade_response(f"So the answer is $\\boxed{{{answer}}}$.", gold)
        for letter in "ABCD":
            grade_response(f"The answer is ({letter}).", "B", "multiple_choice")
    except Exception:  # pragma: no cover - defensive: warm-up is an optimisation only
        logging.getLogger(__name__).debug("grading warm-up failed", exc_info=True)


# Set by GradingPool while it starts the forkserver, whose preload imports this module.
WARM_UP_ON_IMPORT_ENV = "TAGRPO_GRADING_WARM_UP_ON_IMPORT"
if os.environ.get(WARM_UP_ON_IMPORT_ENV) == "1":
    warm_up()


__all__ = [
    "ANSWER_KINDS",
    "MULTIPLE_CHOICE_BENCHMARKS",
    "GradeResult",
    "answer_kind_for",
    "equivalent",
    "extract_pred",
    "grade_response",
    "warm_up",
]
