"""Answer kinds and the graders' names, without the grader's heavy imports.

The command line validates input lines and the verl reward hook picks an answer kind before any
grading happens; neither should pay for importing sympy and math-verify to do so. Which
benchmarks are multiple choice is declared on each source (:mod:`tagrpo.data.sources.registry`).
"""

from __future__ import annotations

from typing import Literal

ANSWER_KINDS = ("math", "multiple_choice")
# Who grades math answers (``common.grading.grader``; :mod:`tagrpo.grading.graders`), named here
# so that the params schema does not load the graders.
Grader = Literal["tagrpo", "math_reward", "math_verify"]
GRADERS: tuple[Grader, ...] = ("tagrpo", "math_reward", "math_verify")

__all__ = ["ANSWER_KINDS", "GRADERS", "Grader"]
