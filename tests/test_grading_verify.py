"""Equivalence of math answers, multiple choice, and the rule that model text is never eval'd."""

import builtins

import pytest
import sympy
import sympy.parsing.sympy_parser as sympy_parser
from math_verify import LatexExtractionConfig

from tagrpo.grading import verify
from tagrpo.grading.normalize import normalize_answer, split_tuple
from tagrpo.grading.verify import GradeResult, grade_response

pytestmark = pytest.mark.core


def boxed(answer: str) -> str:
    return f"Some reasoning first. Therefore the answer is $\\boxed{{{answer}}}$."


PMATRIX = "\\begin{{pmatrix}} {} & {} \\\\ 0 & -1 \\end{{pmatrix}}"

# (boxed prediction, gold, correct, reason)
MATH_CASES = [
    # cheap paths
    ("42", "42", True, "exact"),
    ("007", "7", True, "integer"),
    ("8", "7", False, "mismatch"),
    ("-3", "-3", True, "exact"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}", True, "exact"),
    ("\\tfrac{3}{4}", "\\frac34", True, "exact"),
    ("\\frac 59", "\\frac{5}{9}", True, "exact"),
    ("0.5", "\\frac{1}{2}", True, "numeric"),
    ("1/2", "0.5", True, "numeric"),
    ("0.35625", ".35625", True, "exact"),
    ("0.33", "\\frac{1}{3}", False, "mismatch"),
    ("0.333333", "\\frac{1}{3}", True, "numeric"),  # a decimal vs an exact value: relative 1e-6
    # percent, degrees, units, currency, prefixes, punctuation
    ("50\\%", "50", True, "exact"),
    ("50", "50\\%", True, "exact"),
    ("30^\\circ", "30", True, "exact"),
    ("30^{\\circ}", "30", True, "exact"),
    ("45", "45^\\circ", True, "exact"),
    ("5\\text{ cm}", "5", True, "exact"),
    ("5 \\mbox{ inches}", "5", True, "exact"),
    ("12\\text{ cm}^2", "12", True, "exact"),
    ("8 \\text{ square units}", "8", True, "exact"),
    ("\\$18.90", "18.90", True, "exact"),
    ("\\$18.9", "18.90", True, "numeric"),
    ("x = 5", "5", True, "exact"),
    ("y=2x+3", "2x + 3", True, "exact"),
    ("y = 2x + 3", "y=2x+3", True, "exact"),
    ("x = 3", "y = 3", False, "mismatch"),  # different lines: left-hand sides kept
    ("k=5", "5", True, "exact"),
    ("5.", "5", True, "exact"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True, "exact"),
    ("3\\!\\cdot\\!2", "3 \\cdot 2", True, "exact"),
    ("\\displaystyle\\frac{1}{2}", "\\frac{1}{2}", True, "exact"),
    # thousands separators, without breaking tuples and lists
    ("1,000", "1000", True, "exact"),
    ("1{,}000", "1000", True, "exact"),
    ("1,\\!000,\\!000", "1000000", True, "exact"),
    ("12,345.5", "12345.5", True, "exact"),
    ("(1,2)", "(1, 2)", True, "exact"),
    ("2, 1", "1, 2", True, "math_verify"),  # a list of solutions is a set
    ("1, 2", "12", False, "mismatch"),
    # math-verify pitfalls: a gold "(1, 2)" is an open interval to math-verify
    ("(2, 1)", "(1, 2)", False, "mismatch"),
    ("(3, 0)", "(2, 1)", False, "mismatch"),  # both "empty intervals" to math-verify
    ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)", True, "tuple"),
    ("(6, 31, -1)", "(6,31,-1)", True, "exact"),
    ("(6, 31, 1)", "(6,31,-1)", False, "mismatch"),
    ("[1,3)", "[1, 3)", True, "exact"),
    ("(1,3]", "[1, 3)", False, "mismatch"),
    ("x \\le 2", "(-\\infty, 2]", True, "math_verify"),  # allow_set_relation_comp
    ("x < 2", "(-\\infty, 2]", False, "mismatch"),
    ("(0,9)\\cup(9,36)", "(0,9) \\cup (9,36)", True, "exact"),
    # symbolic equivalence through math-verify
    ("2\\sqrt{2}", "\\sqrt{8}", True, "math_verify"),
    ("(x+1)^2", "x^2 + 2x + 1", True, "math_verify"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", True, "exact"),
    ("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", True, "math_verify"),
    ("\\sqrt{3}", "\\frac{\\sqrt{3}}{2}", False, "mismatch"),
    ("137.5", "137 \\frac{1}{2}", True, "numeric"),  # a mixed number
    ("\\pi", "3.14", False, "mismatch"),
    ("\\{3,2,1\\}", "\\{1,2,3\\}", True, "math_verify"),
    ("Evelyn", "\\text{Evelyn}", True, "exact"),
    ("\\text{(C)}", "\\text{(C)}", True, "exact"),
    ("1 \\text{ and } 2", "1, 2", True, "exact"),
    ("x = \\text{Evelyn}", "\\text{Evelyn}", True, "exact"),  # a name, not a unit
    ("x = \\text{Bob}", "x = \\text{Evelyn}", False, "mismatch"),
    # numbers in other bases: math-verify alone drops the subscript
    ("52_{8}", "52_8", True, "exact"),
    ("52", "52_8", True, "exact"),
    ("52_{10}", "52_8", False, "mismatch"),
    ("4210_7", "4210_{5}", False, "mismatch"),
    # matrices: the row separator survives normalisation
    (PMATRIX.format("-1", "0"), PMATRIX.format("-1", " 0"), True, "exact"),
    (PMATRIX.format("-1", "2"), PMATRIX.format("-1", "0"), False, "mismatch"),
    (PMATRIX.format("-2/2", "0"), PMATRIX.format("-1", "0"), True, "math_verify"),
]


@pytest.mark.parametrize(("pred", "gold", "correct", "reason"), MATH_CASES)
def test_math_equivalence(pred, gold, correct, reason):
    result = grade_response(boxed(pred), gold)
    assert result == GradeResult(correct, pred, reason)


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("First \\boxed{3}, then \\boxed{4}.", "4", GradeResult(True, "4", "exact")),
        ("First \\boxed{3}, then \\boxed{4}.", "3", GradeResult(False, "4", "mismatch")),
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}",
         GradeResult(True, "\\frac{1}{\\sqrt{2}}", "math_verify")),
        ("\\boxed{\\boxed{7}}", "7", GradeResult(True, "\\boxed{7}", "exact")),
        ("The answer is 5.", "5", GradeResult(False, "", "no_answer")),  # no box
        ("", "5", GradeResult(False, "", "no_answer")),
        (None, "5", GradeResult(False, "", "no_answer")),
        ("\\boxed{}", "5", GradeResult(False, "", "no_answer")),
        ("\\boxed{5}", "", GradeResult(False, "5", "empty_gold")),
    ],
)  # fmt: skip
def test_boxes_and_empty_answers(response, gold, expected):
    assert grade_response(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("Answer: C", "C", GradeResult(True, "C", "exact")),
        ("the answer is (b)", "B", GradeResult(True, "B", "exact")),
        ("so \\boxed{\\textbf{(A)}}", "a", GradeResult(True, "A", "exact")),
        ("\\boxed{(D)}", "(D)", GradeResult(True, "D", "exact")),
        ("Answer: A ... no wait, the answer is (C)", "A", GradeResult(False, "C", "mismatch")),
        ("I cannot decide.", "A", GradeResult(False, "", "no_answer")),
        ("", "A", GradeResult(False, "", "no_answer")),
    ],
)
def test_multiple_choice(response, gold, expected):
    assert grade_response(response, gold, "multiple_choice") == expected


def test_unknown_answer_kind_is_an_error():
    with pytest.raises(ValueError, match="answer_kind"):
        grade_response("\\boxed{1}", "1", "free_text")


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("$\\dfrac{1}{2}$", "\\frac{1}{2}"),
        ("\\left( 1, 2 \\right)", "( 1, 2 )"),
        ("x = 1,000.", "1000"),
        ("10\\%", "10"),
        ("90^{\\circ}", "90"),
        ("\\text{(B)}", "(B)"),
        ("5\\text{ cm}", "5"),
        ("5~\\text{cm}", "5"),
        ("1\\,000", "1000"),
        ("\\$ 3", "3"),
        ("\\frac12", "\\frac{1}{2}"),
        ("\\sqrt2", "\\sqrt{2}"),
        (".5", "0.5"),
        ("2\\frac{1}{3}", "\\frac{7}{3}"),
        ("(1,2)", "(1,2)"),
        ("1, 2", "1, 2"),
        ("a = 1, b = 2", "a = 1, b = 2"),  # systems keep their left-hand sides
        ("x^2 = 4", "x^2 = 4"),  # so do equations
        ("", ""),
    ],
)
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


def test_normalize_answer_can_keep_the_left_hand_side():
    assert normalize_answer("x = 1,000.") == "1000"
    assert normalize_answer("y = \\dfrac{1}{2}", keep_lhs=True) == "y = \\frac{1}{2}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(1, 2)", ("(", ")", ["1", "2"])),
        ("[a, \\frac{1}{2})", ("[", ")", ["a", "\\frac{1}{2}"])),
        ("(f(1), g(2, 3))", ("(", ")", ["f(1)", "g(2, 3)"])),
        ("(0,9) \\cup (9,36)", None),
        ("(5)", None),
        ("\\{1, 2\\}", None),
    ],
)
def test_split_tuple(text, expected):
    assert split_tuple(text) == expected


def test_gold_answers_are_parsed_once():
    verify._parse_latex.cache_clear()
    for response in ("\\boxed{2\\sqrt{2}}", "\\boxed{\\sqrt{2} \\cdot 2}", "\\boxed{3\\sqrt{2}}"):
        grade_response(response, "\\sqrt{8}")
    info = verify._parse_latex.cache_info()
    assert (info.misses, info.hits) == (4, 2)  # the gold once, each prediction once


def test_only_latex_extraction_is_configured():
    assert all(type(config) is LatexExtractionConfig for config in verify._latex_only())


@pytest.mark.parametrize(
    "token", ["0", "7", "123456789012345678901234567890", "0.5", ".25", "3.", "2E5", "1.5e-3"]
)
def test_safe_number_parsing_matches_sympy(token):
    assert verify._safe_parse_number(None, token) == sympy.Number(token)
    assert type(verify._safe_parse_number(None, token)) is type(sympy.Number(token))


def test_safe_number_parsing_edge_cases():
    assert verify._safe_parse_number(None, "007") == sympy.Integer(7)
    assert verify._safe_parse_number(None, "1,000") == sympy.Integer(1000)
    with pytest.raises(ValueError):
        verify._safe_parse_number(None, "1+1")


def test_model_text_is_never_evaluated(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    command = f"touch {marker}"
    adversarial = [
        f"\\boxed{{__import__('os').system('{command}')}}",
        f"\\boxed{{\\text{{__import__('os').system('{command}')}}}}",
        f'\\boxed{{eval("__import__(\\"os\\").system(\\"{command}\\")")}}',
        f"\\boxed{{exec('import os; os.system(\"{command}\")')}}",
        "\\boxed{().__class__.__bases__[0].__subclasses__()}",
        "\\boxed{lambda: __import__('os')}",
        f"Answer: {command}",
    ]
    ordinary = ["\\boxed{0.5}", "\\boxed{2\\sqrt{2}}", "\\boxed{x \\le 2}", "\\boxed{1.5e3}"]
    golds = ["1", "\\frac{1}{2}", "(-\\infty, 2]", "x"]
    for response in ordinary:  # let sympy finish its lazy imports before recording
        for gold in golds:
            grade_response(response, gold)

    calls: list[tuple[str, object]] = []

    def recorder(name, original):
        def record(*args, **kwargs):
            calls.append((name, args[0] if args else None))
            return original(*args, **kwargs)

        return record

    monkeypatch.setattr(sympy_parser, "eval_expr", recorder("eval_expr", sympy_parser.eval_expr))
    monkeypatch.setattr(builtins, "eval", recorder("eval", builtins.eval))
    monkeypatch.setattr(builtins, "exec", recorder("exec", builtins.exec))
    for response in adversarial + ordinary:
        for gold in golds:
            assert grade_response(response, gold).correct is False or response in ordinary
        assert grade_response(response, "B", "multiple_choice").correct is False
    monkeypatch.undo()

    # sympy's parse_expr -> eval path is never taken, not even for numbers ...
    assert [call for call in calls if call[0] == "eval_expr"] == []
    # ... and whatever sympy compiles for itself (dataclasses, monomial helpers) holds no
    # piece of model text.
    assert not [c for c in calls if any(s in str(c[1]) for s in ("__import__", "pwned", "os."))]
    assert not marker.exists()
