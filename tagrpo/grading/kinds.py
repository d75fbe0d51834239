"""Answer kinds, without the grader's heavy imports.

The command line validates input lines and the verl reward hook picks an answer kind before any
grading happens; neither should pay for importing sympy and math-verify to do so. Which
benchmarks are multiple choice is declared on each source (:mod:`tagrpo.data.sources.registry`).
"""

from __future__ import annotations

ANSWER_KINDS = ("math", "multiple_choice")

__all__ = ["ANSWER_KINDS"]
