"""Final-answer extraction: the last balanced box, and option letters for multiple choice."""

import pytest

from tagrpo.grading.extract import all_boxed, choice_letter, extract_choice, iter_boxed, last_boxed

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is $\\boxed{42}$.", "42"),
        ("first \\boxed{3}, then \\boxed{4}", "4"),  # two boxes: the last one counts
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces come out whole
        ("\\boxed{\\frac{\\sqrt{3}}{2}} done", "\\frac{\\sqrt{3}}{2}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not count
        ("\\fbox{7}", "7"),
        ("\\boxed {  5 }", "5"),  # space before the brace, content stripped
        ("\\boxed{\\boxed{3}}", "\\boxed{3}"),  # nested box: the outer one
        ("\\boxed{1} and an unbalanced \\boxed{2", "1"),
        ("\\boxed{}", ""),
        ("no box at all: 5", None),
        ("", None),
        (None, None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_all_boxed_and_iter_boxed_keep_text_order():
    text = "a \\boxed{1} b \\fbox{\\frac{2}{3}} c \\boxed{x"
    assert all_boxed(text) == ["1", "\\frac{2}{3}"]
    assert [(start, content) for start, _, content in iter_boxed(text)] == [
        (2, "1"),
        (14, "\\frac{2}{3}"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: C", "C"),
        ("**Answer:** (D)", "D"),
        ("Thus the answer is (B).", "B"),
        ("the answer is (b)", "B"),  # letters compare case-insensitively
        ("The correct answer is option A because ...", "A"),
        ("$\\boxed{D}$", "D"),
        ("\\boxed{(A)}", "A"),
        ("\\boxed{\\text{(B)}}", "B"),
        ("\\boxed{\\textbf{(C)}}", "C"),
        ("\\boxed{c}", "C"),
        ("\\boxed{B) 10^{-4} eV}", "B"),
        ("Answer: A. On reflection, the answer is (C).", "C"),  # the last one wins
        ("\\boxed{A} ... so Answer: B", "B"),
        ("Answer: B ... final: \\boxed{\\text{(D)}}", "D"),
        ("The answer is a prime number.", None),  # "a" is an article here
        # Letters run to Z (the mini world's 20-option benchmark); past a question's last
        # option a letter is simply a wrong answer.
        ("Answer: E", "E"),
        ("\\boxed{T}", "T"),
        ("The answer is I think (B)", "I"),  # an upper-case letter is taken as given
        ("\\boxed{42}", None),
        ("no letter here", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_choice(text, expected):
    assert extract_choice(text) == expected


@pytest.mark.parametrize(
    ("gold", "expected"),
    [("B", "B"), ("(c)", "C"), ("\\text{(A)}", "A"), (" D ", "D"), ("T", "T"), ("12", None)],
)
def test_choice_letter_of_gold(gold, expected):
    assert choice_letter(gold) == expected
