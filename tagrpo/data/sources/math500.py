"""MATH-500 (``math500/test.jsonl``, 500 rows), the in-domain check set: given ``answer``;
an integer level is written "Level N" like MATH train."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Source,
    answer_text,
    optional_text,
    problem_text,
    required_text,
)


def build(record: Mapping[str, Any], row_index: int) -> Question:
    question_id = SOURCE.question_id(record, row_index)
    problem = problem_text(record)
    answer = answer_text(required_text(record, "answer"))
    level = record.get("level")
    level_text = f"Level {level}" if isinstance(level, int) else optional_text(record, "level")
    return Question(
        id=question_id,
        source="math500",
        split="test",
        problem=problem,
        answer=answer,
        solution=optional_text(record, "solution"),
        level=level_text,
        subject=optional_text(record, "subject"),
    )


SOURCE = Source(
    name="math500",
    title="MATH-500",
    split="test",
    file="math500/test.jsonl",
    id_field="unique_id",
    build=build,
    hub=(HubSpec("HuggingFaceH4/MATH-500", "test"),),
    bare_ids=True,  # MATH ids ("test/algebra/1.json") are unique already
)
