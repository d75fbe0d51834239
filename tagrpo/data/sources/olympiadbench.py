"""OlympiadBench, OE_TO_maths_en_COMP (``olympiadbench/test.jsonl``, 675 rows).

``final_answer`` is a list or a list-like string: several entries are joined with ", ", ``$``
delimiters are removed. ``unit``, ``answer_type``, ``subfield``, ``is_multiple_answer`` and the
numeric tolerance ``error`` go to ``meta``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Reject,
    Source,
    as_bool,
    compact,
    literal_list,
    optional_text,
    problem_text,
    strip_math_delimiters,
)


def build(record: Mapping[str, Any], row_index: int) -> Question:
    question_id = SOURCE.question_id(record, row_index)
    problem = problem_text(record, "question")
    context = optional_text(record, "context")
    if context:
        problem = f"{context}\n\n{problem}"  # multi-part problems need their shared context
    if record.get("final_answer") is None:
        raise Reject("missing_field", "final_answer")
    raw_answers = literal_list(record["final_answer"], "final_answer")
    answers = [strip_math_delimiters(str(item)) for item in raw_answers]
    answers = [item for item in answers if item]
    if not answers:
        raise Reject("empty_answer")
    solution_value = record.get("solution")
    solution: str | None = None
    if solution_value is not None:
        try:
            solution = "\n\n".join(
                str(s).strip() for s in literal_list(solution_value, "solution")
            ).strip()
        except Reject:
            solution = str(solution_value).strip()  # an unparsable solution is not fatal
    return Question(
        id=question_id,
        source="olympiadbench",
        split="test",
        problem=problem,
        answer=", ".join(answers),
        solution=solution or None,
        subject=optional_text(record, "subfield"),
        meta=compact(
            {
                "unit": optional_text(record, "unit"),
                "answer_type": optional_text(record, "answer_type"),
                "subfield": optional_text(record, "subfield"),
                "is_multiple_answer": as_bool(record.get("is_multiple_answer", False)),
                "error": optional_text(record, "error"),
                "context_prepended": True if context else None,
            }
        ),
    )


def _answer_as_final_answer(
    record: Mapping[str, Any], config: str | None, row: int
) -> dict[str, Any]:
    # math-ai/olympiadbench: a plain answer column instead of final_answer (a list upstream)
    mapped = dict(record)
    if mapped.get("final_answer") is None and mapped.get("answer") is not None:
        mapped["final_answer"] = [str(mapped["answer"])]
    return mapped


SOURCE = Source(
    name="olympiadbench",
    title="OlympiadBench",
    split="test",
    file="olympiadbench/test.jsonl",
    id_field="id",
    build=build,
    # Row counts of other copies may differ (math-ai/olympiadbench: 674 instead of 675).
    hub=(
        HubSpec("Hothan/OlympiadBench", "train", ("OE_TO_maths_en_COMP",)),
        HubSpec("math-ai/olympiadbench", "test", (None,), _answer_as_final_answer),
    ),
    group="competition",
)
