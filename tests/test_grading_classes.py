"""Correctness classes of issue 10: scientific notation, small numbers, equations, base-n
numbers, and words and units in ``\\text{}``."""

from fractions import Fraction

import pytest

from tagrpo.grading.normalize import NormalizedAnswer, normalize_answer, normalize_full, unit_name
from tagrpo.grading.verify import (
    GradeResult,
    NumberValue,
    grade_response,
    numbers_match,
    plain_number,
)

pytestmark = pytest.mark.core


def graded(pred: str, gold: str) -> tuple[bool, str]:
    result = grade_response(f"Hence the answer is $\\boxed{{{pred}}}$.", gold)
    assert result.pred == pred
    return result.correct, result.reason


# --- scientific notation ---------------------------------------------------------------------

SCIENTIFIC = [
    # (pred, gold, correct, reason)
    ("1.325 \\times 10^{-27}", "1.325e-27", True, "exact"),
    ("1.325e-27", "1.325 \\times 10^{-27}", True, "exact"),
    ("1.325 \\cdot 10^{-27}", "1.325e-27", True, "exact"),
    ("1.325\\times10^{-27}", "1.325e-27", True, "exact"),
    ("1.325 × 10^-27", "1.325e-27", True, "exact"),
    ("1.325E-27", "1.325e-27", True, "exact"),
    ("0.001", "1e-3", True, "numeric"),
    ("1e-3", "0.001", True, "numeric"),
    ("10^{-3}", "1e-3", True, "numeric"),
    ("4.5 \\times 10^{33}", "4.5e33", True, "exact"),
    ("4500000000000000000000000000000000", "4.5e33", True, "numeric"),
    ("13250 \\times 10^{-31}", "1.325e-27", True, "numeric"),
    ("1.325e-26", "1.325e-27", False, "mismatch"),
    ("1.325", "1.325e-27", False, "mismatch"),
    ("-1.325e-27", "1.325e-27", False, "mismatch"),
    # Euler's e is untouched: only digits-e-digits is a number token
    ("e^{2}", "e^{2}", True, "exact"),
    ("2e", "2e", True, "exact"),
    ("e", "2.718281828", True, "math_verify"),  # Euler's e against its decimal value
    ("2e", "5.43656365692", True, "math_verify"),  # 2 times Euler's e, not 2 x 10^0
    ("e^{-3}", "e^{-3}", True, "exact"),
    ("7p+4e", "4e+7p", True, "math_verify"),
]


@pytest.mark.parametrize(("pred", "gold", "correct", "reason"), SCIENTIFIC)
def test_scientific_notation(pred, gold, correct, reason):
    assert graded(pred, gold) == (correct, reason)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("1.325e-27", "1.325 \\times 10^{-27}"),
        ("4.5e33", "4.5 \\times 10^{33}"),
        ("2E+08", "2 \\times 10^{8}"),
        ("1.5 \\cdot 10^{3}", "1.5 \\times 10^{3}"),
        ("10^-5", "10^{-5}"),
        ("e^{2}", "e^{2}"),
        ("2e - 3", "2e - 3"),  # spaced: Euler's number minus three
        ("3e", "3e"),
        ("x_1e3", "x_1e3"),  # part of a name, not a number token
    ],
)
def test_scientific_notation_is_normalised_without_touching_euler(raw, normalized):
    assert normalize_answer(raw) == normalized


# --- tolerance near zero and Minerva's tolerance ---------------------------------------------

TOLERANCE = [
    # exact values compare exactly, however small
    ("\\frac{1}{2005!}", "\\frac{1}{2004!}", False, "mismatch"),
    ("\\frac{2}{2004!}", "\\frac{1}{2004!}", False, "mismatch"),
    ("\\frac{1}{2004!}", "\\frac{1}{2004!}", True, "exact"),
    ("\\frac{1}{2004 \\cdot 2003!}", "\\frac{1}{2004!}", True, "math_verify"),
    ("\\frac{1}{3^{40}}", "\\frac{1}{3^{41}}", False, "mismatch"),
    ("10^{-12}", "0", False, "mismatch"),
    # approximate values: relative, not absolute
    ("3.2 \\times 10^{-19}", "1.6 \\times 10^{-19}", False, "mismatch"),
    ("1.6 \\times 10^{-18}", "1.6 \\times 10^{-19}", False, "mismatch"),
    ("1.6 \\times 10^{-19}", "1.6e-19", True, "exact"),
    ("1.62 \\times 10^{-19}", "1.6e-19", True, "numeric"),  # the gold shows 2 digits
    (".0000673", ".0000672", False, "mismatch"),
    ("0.0000672", ".0000672", True, "exact"),
    # Minerva: a decimal gold is rounded to the digits it shows
    ("1.57", "1.6", True, "numeric"),
    ("1.5708", "1.6", True, "numeric"),
    ("1.7", "1.6", False, "mismatch"),
    ("2", "1.6", False, "mismatch"),
    ("1.3254e-27", "1.325e-27", True, "numeric"),
    ("1.33e-27", "1.325e-27", False, "mismatch"),  # less precise than the gold
    ("56", "56.0", True, "numeric"),
    # a decimal against an exact value: relative 1e-6
    ("0.333333", "\\frac{1}{3}", True, "numeric"),
    ("0.33", "\\frac{1}{3}", False, "mismatch"),
    ("3.14", "\\pi", False, "mismatch"),
    ("3.14159265", "\\pi", True, "math_verify"),
    ("\\pi", "3.14", False, "mismatch"),
    ("1.4142136", "\\sqrt{2}", True, "math_verify"),
    ("1.41", "\\sqrt{2}", False, "mismatch"),
]


@pytest.mark.parametrize(("pred", "gold", "correct", "reason"), TOLERANCE)
def test_tolerance(pred, gold, correct, reason):
    assert graded(pred, gold) == (correct, reason)


def test_plain_number_records_the_digits_shown():
    assert plain_number("1.6") == NumberValue(Fraction(8, 5), True, True, Fraction(1, 20))
    assert plain_number("1.325 \\times 10^{-27}") == NumberValue(
        Fraction(1325, 10**30), True, True, Fraction(1, 2 * 10**30)
    )
    assert plain_number("-\\frac{3}{8}") == NumberValue(Fraction(-3, 8), False, True)
    assert plain_number("10^{6}") == NumberValue(Fraction(10**6), False, True)
    assert plain_number("2 \\times 10^{999}") is None  # left to the parser (and its budget)
    assert plain_number("x") is None


def test_numbers_match_is_relative_near_zero():
    tiny = NumberValue(Fraction(16, 10**20), True, True, Fraction(5, 10**21))
    double = NumberValue(Fraction(32, 10**20), True, True, Fraction(5, 10**21))
    assert numbers_match(double, tiny) is False
    assert numbers_match(tiny, tiny) is True
    zero = NumberValue(Fraction(0), False, True)
    assert numbers_match(NumberValue(Fraction(1, 10**9), True, True, None), zero) is False


# --- equations -------------------------------------------------------------------------------

EQUATIONS = [
    ("x - 3z = 0", "0", False, "mismatch"),
    ("3 = 4", "4", False, "mismatch"),
    ("2x + y = 7", "7", False, "mismatch"),
    ("f(x) = 4", "4", False, "mismatch"),
    ("x = 4", "4", True, "exact"),  # a bare variable on the left may be dropped
    ("x_1 = 4", "4", True, "exact"),
    ("\\theta = \\frac{\\pi}{3}", "\\frac{\\pi}{3}", True, "exact"),
    ("4", "x - 3z = 4", False, "mismatch"),  # and the other way round
    ("x - 3z = 0", "x - 3z = 0", True, "exact"),
    ("x = 3z", "x - 3z = 0", True, "math_verify"),
    ("y = 2x + 3", "2x + 3", True, "exact"),
    ("\\sum_{i=1}^{3} i", "6", True, "math_verify"),  # "=" inside a subscript is no equation
]


@pytest.mark.parametrize(("pred", "gold", "correct", "reason"), EQUATIONS)
def test_equations(pred, gold, correct, reason):
    assert graded(pred, gold) == (correct, reason)


# --- base-n numbers --------------------------------------------------------------------------

BASES = [
    ("-221_4", "-221_3", False, "mismatch"),
    ("-221_3", "-221_3", True, "exact"),
    ("-221_{3}", "-221_3", True, "exact"),
    ("221_3", "-221_3", False, "mismatch"),
    ("-221", "-221_3", True, "exact"),  # bare digits are read in the gold's base
    ("0.0011_{3}", "0.0011_{2}", False, "mismatch"),
    ("0.0011_{2}", "0.0011_2", True, "exact"),
    ("0.0011", "0.0011_{2}", True, "exact"),
    ("2112_7", "2112_6", False, "mismatch"),
    ("52_{10}", "52_8", False, "mismatch"),
    ("52_8", "42", True, "exact"),  # a plain gold: compared by value
    ("52_8", "52", False, "mismatch"),
    ("1A_{16}", "26", True, "exact"),
    ("x_2", "x_2", True, "exact"),  # a subscripted variable is not a base-2 number
    ("x", "x_2", False, "mismatch"),
]


@pytest.mark.parametrize(("pred", "gold", "correct", "reason"), BASES)
def test_base_n_numbers(pred, gold, correct, reason):
    assert graded(pred, gold) == (correct, reason)


# --- words and units -------------------------------------------------------------------------

WORDS_AND_UNITS = [
    ("3 \\text{ or more}", "3", False, "mismatch"),
    ("\\text{not } 3", "3", False, "mismatch"),
    ("3", "3 \\text{ or more}", False, "mismatch"),
    ("3 \\text{ or more}", "3 \\text{ or more}", True, "exact"),
    ("\\text{at least } 3", "3", False, "mismatch"),
    ("\\text{Evelyn}", "\\text{evelyn}", True, "exact"),  # words compare case-insensitively
    ("\\text{odd}", "\\text{even}", False, "mismatch"),
    ("5 \\text{ m}", "5 \\text{ cm}", False, "mismatch"),  # a different unit
    ("5 \\text{ km}", "5 \\text{ miles}", False, "mismatch"),
    ("5 \\text{ cm}", "5", True, "exact"),  # one side without a unit: presentation
    ("5", "5 \\text{ cm}", True, "exact"),
    ("5 \\text{ centimeters}", "5 \\text{ cm}", True, "exact"),
    ("5 cm", "5 \\text{ cm}", True, "exact"),
    ("12 \\text{ cm}^2", "12 \\text{ square centimeters}", True, "exact"),
    ("12 \\text{ sq. units}", "12", True, "exact"),
    ("45 \\text{ km/h}", "45", True, "exact"),
    ("45 \\text{ km/h}", "45 \\text{ m/s}", False, "mismatch"),
    ("1.6 \\mathrm{~km} / \\mathrm{s}", "1.6 \\text{ km/s}", True, "exact"),
    ("10 \\text{ ways}", "10", True, "exact"),
    ("10 \\text{ arrangements}", "10 \\text{ ways}", True, "exact"),  # counts never conflict
    ("\\$18.90", "18.90", True, "exact"),
    ("1 \\text{ and } 2", "1, 2", True, "exact"),
]


@pytest.mark.parametrize(("pred", "gold", "correct", "reason"), WORDS_AND_UNITS)
def test_words_and_units(pred, gold, correct, reason):
    assert graded(pred, gold) == (correct, reason)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("5 \\text{ cm}", NormalizedAnswer("5", ("cm",), False)),
        ("3 \\text{ or more}", NormalizedAnswer("3 or more", (), True)),
        ("12 \\text{ square units}", NormalizedAnswer("12", ("sq unit",), False)),
        ("2 \\mathrm{e}", NormalizedAnswer("2 e", (), False)),  # one letter, no space: a symbol
        ("\\text{(C)}", NormalizedAnswer("(C)", (), False)),
    ],
)
def test_normalize_full_reports_units_and_words(raw, expected):
    assert normalize_full(raw) == expected


@pytest.mark.parametrize(
    ("phrase", "name"),
    [
        ("cm", "cm"),
        ("Centimeters", "cm"),
        ("square units", "sq unit"),
        ("km/h", "km / h"),
        ("m s^{-1}", "m s^-1"),
        ("or more", None),
        ("not", None),
        ("cm and", None),
    ],
)
def test_unit_name(phrase, name):
    assert unit_name(phrase) == name


def test_grade_result_keeps_the_box_as_written():
    assert grade_response("\\boxed{1.325e-27}", "1.325 \\times 10^{-27}") == GradeResult(
        True, "1.325e-27", "exact"
    )
