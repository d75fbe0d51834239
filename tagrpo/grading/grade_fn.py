"""The grading function evaluation and probes use: a process pool behind a plain callable."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from tagrpo.grading.graders import grader_kind
from tagrpo.grading.pool import GradingPool
from tagrpo.grading.settings import GradingSettings
from tagrpo.grading.types import GradeFn, GradeItem


@contextlib.contextmanager
def make_grade_fn(
    workers: int = 2,
    item_timeout_s: float = 5.0,
    kill_grace_s: float = 1.0,
    wall_timeout_s: float | None = None,
    grader: str = "tagrpo",
) -> Iterator[GradeFn]:
    """Yield ``grade(responses, answers, kinds) -> [(correct, pred, reason)]`` over a pool.

    ``grader`` grades the math answers (:mod:`tagrpo.grading.graders`); a kind that already
    names one (``math@math_verify``, the parity grading's) is graded by that one.

    The workers start at once but are waited for only by the first call: enter this before
    loading a model, and their start-up (~1.6 s of imports) overlaps the loading.
    """
    pool = GradingPool(
        workers=workers,
        item_timeout_s=item_timeout_s,
        kill_grace_s=kill_grace_s,
        wall_timeout_s=wall_timeout_s,
    )
    pool.launch()
    try:

        def grade(
            responses: Sequence[str], answers: Sequence[str], kinds: Sequence[str]
        ) -> list[tuple[bool, str, str]]:
            items = [
                GradeItem(response, answer, grader_kind(kind, grader))
                for response, answer, kind in zip(responses, answers, kinds, strict=True)
            ]
            return [(r.correct, r.pred, r.reason) for r in pool.grade(items)]

        yield grade
    finally:
        pool.close()


def grade_fn_for(
    grading: GradingSettings, grader: str
) -> contextlib.AbstractContextManager[GradeFn]:
    """:func:`make_grade_fn` with the ``common.grading`` settings and ``grader``: the stages
    whose numbers are compared with the paper's (training reward, evaluation, diagnostics)
    pass ``grading.grader``; the project's own checks (the base model's probe, the equivalence
    check) pass ``"tagrpo"``."""
    return make_grade_fn(
        grading.workers,
        grading.item_timeout_s,
        grading.kill_grace_s,
        grading.wall_timeout_s,
        grader,
    )
