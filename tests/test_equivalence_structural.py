"""Layer 1: structural checks (numbers, formulas, length, leaked answers), exact reasons."""

from __future__ import annotations

from collections import Counter

import pytest

from tagrpo.config.params import embedded
from tagrpo.data.rephrase_templates import APPENDIX_A_EXAMPLES
from tagrpo.equivalence.structural import (
    StructuralConfig,
    answer_revealed,
    check_structural,
    extract_numbers,
    formulas,
)

EMBEDDED = embedded(StructuralConfig)  # check_equivalence.structural of params.yaml


def test_extract_numbers_canonicalises_digits_words_and_separators() -> None:
    text = "Noelle: $12\\div 5=2.4$, 1,000 and 1{,}000 coins; five, Twelve; 2.50; \\frac12; x_{10}"
    assert extract_numbers(text) == Counter(
        {"12": 2, "5": 2, "2.4": 1, "1000": 2, "2.5": 1, "1": 1, "2": 1, "10": 1}
    )
    assert extract_numbers("one apple and no one else") == Counter()  # "one" is not counted
    assert extract_numbers("1,2,3 and 100") == Counter({"1": 1, "2": 1, "3": 1, "100": 1})


@pytest.mark.parametrize(
    ("rephrasing", "reason", "detail"),
    [
        ("   ", "empty", None),
        ("what is  3 + 4 + 4", "identical", None),
        ("Tom has 3 pens, finds 4 and then 4 more. " * 6, "too_long", None),
        ("Determine 3 + 4.", "numbers_missing", "4"),  # multiset: one of the two 4s is gone
        ("Determine 3 + 5 + 4.", "numbers_missing", "4"),
        ("Determine 3 + 4 + 4. Hint: it is 11.", "answer_revealed", "11"),
        ("Determine 3 + 4 + 4, i.e. \\boxed{?}", "answer_revealed", "11"),
        ("Determine 4 + 3 + 4.", None, None),
    ],
)
def test_structural_reasons(rephrasing: str, reason: str | None, detail: str | None) -> None:
    outcome = check_structural("What is 3 + 4 + 4?", rephrasing, "11", "math", config=EMBEDDED)
    assert outcome.passed is (reason is None)
    assert outcome.reason == reason
    if detail is not None:
        assert outcome.detail == detail


def test_length_bounds_scale_with_the_original() -> None:
    original = "A rectangle has sides 3 and 4. " * 10 + "What is its area?"  # 327 characters
    # With the default slack (120 characters) the bound is 0.33 * 327 - 120 < 0: the short
    # reply is caught by the number check instead.
    assert (
        check_structural(original, "Find 3 times 4.", "12", config=EMBEDDED).reason
        == "numbers_missing"
    )
    tight = embedded(StructuralConfig, length_slack_chars=0, numbers="off")
    outcome = check_structural(original, "Find 3 times 4.", "12", config=tight)
    assert (outcome.reason, outcome.detail) == ("too_short", "15 < 108 characters")
    outcome = check_structural("What is 3 + 4?", "x" * 163, "7", config=EMBEDDED)
    assert (outcome.reason, outcome.detail) == ("too_long", "163 > 162 characters")


def test_number_levels_and_new_numbers() -> None:
    original = "Find $x$ if $x^2 = 16$ and $x > 0$, using 4 steps."
    rephrased = "Using 4 steps, find $x$ given $x^{2}=16$ and $x>0$."
    multiset = check_structural(original, rephrased, "4", config=EMBEDDED)
    assert multiset.passed  # numbers kept; the formula $x^2 = 16$ was rewritten as $x^{2}=16$
    strict = check_structural(
        original, rephrased, "4", config=embedded(StructuralConfig, numbers="strict")
    )
    assert (strict.reason, strict.detail) == ("formula_missing", "x^2=16")
    assert formulas(original) == ["x", "x^2=16", "x>0"]
    more = "Find $x$ if $x^2 = 16$ and $x > 0$, using 4 steps and 5 more."
    assert check_structural(
        original, more, "4", config=EMBEDDED
    ).passed  # more numbers are allowed...
    strict_new = embedded(StructuralConfig, reject_new_numbers=True)
    outcome = check_structural(original, more, "4", config=strict_new)
    assert (outcome.reason, outcome.detail) == ("numbers_added", "5")  # ... unless rejected
    as_set = embedded(StructuralConfig, numbers="set")
    assert check_structural("What is 3 + 3?", "Add 3 to itself.", "6", config=as_set).passed
    assert not check_structural("What is 3 + 3?", "Add 3 to itself.", "6", config=EMBEDDED).passed
    off = embedded(StructuralConfig, numbers="off")
    assert check_structural("What is 3 + 3?", "What is the sum?", "6", config=off).passed
    with pytest.raises(ValueError, match=r"off.*set.*multiset.*strict"):
        embedded(StructuralConfig, numbers="loose")
    with pytest.raises(ValueError, match="number"):
        embedded(StructuralConfig, number="set")  # a typo of `numbers`: rejected, not ignored


def test_answer_revealed_for_numeric_latex_and_choice_golds() -> None:
    assert answer_revealed("Find $x$.", "Find $x$ (it is $\\frac{1}{2}$).", "\\frac{1}{2}", "math")
    assert not answer_revealed(
        "Is $\\frac12$ less than 1?", "Is $\\frac{1}{2}$ < 1?", "\\frac12", "math"
    )
    # The gold already occurs in the original as often: nothing new is revealed.
    assert not answer_revealed("What is 1 + 9 - 9?", "Start with 1, add 9, take 9.", "1", "math")
    assert answer_revealed("What is 2 + 2?", "What is 2 + 2? (4)", "4", "math")
    assert answer_revealed("Find the sum.", "Find the sum, which is 1,000.", "1000", "math")
    assert not answer_revealed("Pick one.", "Choose B.", "B", "multiple_choice")
    assert not answer_revealed("Find x.", "Solve for x.", "x", "math")  # too short to test


def test_the_papers_own_examples_pass_except_one_that_drops_a_number() -> None:
    outcomes = [
        check_structural(question, rephrasing, "", "math", config=EMBEDDED)
        for question, rephrasing in APPENDIX_A_EXAMPLES
    ]
    # The Noelle example's rephrasing leaves out "when she has 11 points": our number check
    # is stricter than the paper's own examples (documented; `numbers: off` accepts it).
    assert [(o.passed, o.reason, o.detail) for o in outcomes] == [
        (True, None, None),
        (True, None, None),
        (True, None, None),
        (True, None, None),
        (False, "numbers_missing", "11"),
        (True, None, None),
        (True, None, None),
        (True, None, None),
    ]
