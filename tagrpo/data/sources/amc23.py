"""AMC 2023 (``amc23/test.jsonl``, 40 rows): float answers ("27.0") written as integers where
integral."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Reject,
    Source,
    compact,
    numeric_answer,
    optional_text,
    problem_text,
)


def build(record: Mapping[str, Any], row_index: int) -> Question:
    question_id = SOURCE.question_id(record, row_index)
    problem = problem_text(record)
    if record.get("answer") is None:
        raise Reject("missing_field", "answer")
    return Question(
        id=question_id,
        source="amc23",
        split="test",
        problem=problem,
        answer=numeric_answer(record["answer"]),
        meta=compact({"url": optional_text(record, "url")}),
    )


SOURCE = Source(
    name="amc23",
    title="AMC23",
    split="test",
    file="amc23/test.jsonl",
    id_field="id",
    build=build,
    hub=(HubSpec("math-ai/amc23", "test"),),
    group="competition",
)
