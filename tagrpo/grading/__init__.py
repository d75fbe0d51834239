"""Answer extraction, normalisation and equivalence checking for math and multiple choice."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagrpo.grading.extract import all_boxed, extract_choice, last_boxed
    from tagrpo.grading.normalize import normalize_answer
    from tagrpo.grading.pool import GradingPool, grade_many
    from tagrpo.grading.types import GradeFn, GradeItem, SolveItem
    from tagrpo.grading.verify import GradeResult, grade_response

# Exports resolve lazily, and sympy and math-verify (about two seconds) load only when an answer
# needs them: the data loaders use ``tagrpo.grading.extract`` just to find a box.
_EXPORTS = {
    "all_boxed": "extract",
    "extract_choice": "extract",
    "last_boxed": "extract",
    "normalize_answer": "normalize",
    "GradeFn": "types",
    "GradeItem": "types",
    "SolveItem": "types",
    "GradingPool": "pool",
    "grade_many": "pool",
    "GradeResult": "verify",
    "grade_response": "verify",
}

__all__ = [
    "GradeFn",
    "GradeItem",
    "GradeResult",
    "GradingPool",
    "SolveItem",
    "all_boxed",
    "extract_choice",
    "grade_many",
    "grade_response",
    "last_boxed",
    "normalize_answer",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
