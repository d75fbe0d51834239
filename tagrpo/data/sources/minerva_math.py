"""Minerva-Math (``minerva_math/test.jsonl``, 272 rows): gold = the last ``\\boxed{}`` of the
solution (an ``answer`` field wins if any)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Reject,
    Source,
    boxed_answer,
    optional_text,
    problem_text,
)


def build(record: Mapping[str, Any], row_index: int) -> Question:
    question_id = SOURCE.question_id(record, row_index)
    problem = problem_text(record)
    solution = optional_text(record, "solution")
    given = optional_text(record, "answer")
    if given is not None:
        answer = given
    elif solution is not None:
        answer = boxed_answer(solution)
    else:
        raise Reject("missing_field", "solution")
    return Question(
        id=question_id,
        source="minerva_math",
        split="test",
        problem=problem,
        answer=answer,
        solution=solution,
        subject=optional_text(record, "type"),
    )


def _question_as_problem(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    # math-ai/minervamath names the problem "question" and gives the answer directly
    mapped = dict(record)
    if mapped.get("problem") is None and mapped.get("question") is not None:
        mapped["problem"] = mapped["question"]
    return mapped


SOURCE = Source(
    name="minerva_math",
    title="Minerva-Math",
    split="test",
    file="minerva_math/test.jsonl",
    id_field="idx",
    build=build,
    hub=(HubSpec("math-ai/minervamath", "test", (None,), _question_as_problem),),
    group="ood",
)
