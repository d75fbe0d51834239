"""Answer kinds and the benchmark registry, without the grader's heavy imports.

The command line validates input lines and the verl reward hook picks an answer kind before any
grading happens; neither should pay for importing sympy and math-verify to do so.
"""

from __future__ import annotations

from tagrpo.grading.extract import choice_letter

ANSWER_KINDS = ("math", "multiple_choice")
# Benchmarks whose gold answer is an option letter. "mini_choice" is the mini world's name for
# its multiple-choice benchmark (tagrpo.miniworld.dataset).
MULTIPLE_CHOICE_BENCHMARKS = frozenset({"gpqa_diamond", "miniworld_choice", "mini_choice"})


def answer_kind_for(benchmark: str | None, answer: str) -> str:
    """``multiple_choice`` for a registered benchmark whose gold is an option letter, else math.

    An explicit ``answer_kind`` given with the data always wins; callers check it first. A
    registered benchmark whose gold is not a letter (e.g. a copy that stores the option text)
    is graded as math rather than never matching.
    """
    if benchmark in MULTIPLE_CHOICE_BENCHMARKS and choice_letter(answer) is not None:
        return "multiple_choice"
    return "math"


__all__ = ["ANSWER_KINDS", "MULTIPLE_CHOICE_BENCHMARKS", "answer_kind_for"]
