"""The types grading shares with its callers (evaluation, training, the equivalence checks).

They live here, beside the grader, so that a caller needs nothing but :mod:`tagrpo.grading` to
name them, and no importer of one of them imports another caller's package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

# (responses, gold answers, answer kinds) -> [(correct, pred, reason)], one per response, in
# order: what :func:`tagrpo.grading.grade_fn.make_grade_fn` yields.
GradeFn = Callable[[Sequence[str], Sequence[str], Sequence[str]], list[tuple[bool, str, str]]]


class GradeItem(NamedTuple):
    """One response to grade against its gold answer."""

    response: str
    answer: str
    answer_kind: str = "math"


@dataclass(frozen=True)
class SolveItem:
    """One text for a solver to answer ``k`` times, graded against the gold ``answer``.

    ``choices`` are the options of a multiple-choice question (shown with the text).
    """

    text: str
    answer: str
    answer_kind: str = "math"
    choices: tuple[str, ...] | None = None


__all__ = ["GradeFn", "GradeItem", "SolveItem"]
